"""``mux update`` (alone, or with ``--json``, ``-q``, ``-v``) when a staged release is ready:
answered before the CLI framework and the HTTP stack are imported.

:func:`updater.commands.staged.apply_from_recent_answer` applies the staged release when a
recent signed answer offers exactly it; anything else (nothing staged, no recent answer, an
error) answers None, and :mod:`updater.__main__` runs the full update, which says what is
wrong in its own words.
"""

from __future__ import annotations

import sys

from updater.cli import render
from updater.commands.staged import apply_from_recent_answer
from updater.config import buildinfo
from updater.config.settings import load_for, require_updates
from updater.errors import MuxError


def answer(args: list[str]) -> int | None:
    """Apply the staged release and print what ``mux update`` prints; None: not this path."""
    try:
        build = buildinfo.current()
        settings = load_for(build)
        require_updates(settings, action="update")
        result = apply_from_recent_answer(settings, build)
    except MuxError:
        return None
    except KeyboardInterrupt:
        print("mux: interrupted", file=sys.stderr)  # as the CLI says it
        return 130
    if result is None:
        return None
    if "--json" in args:
        print(render.to_json_line(render.update_document(result)))
    elif not {"-q", "--quiet"} & set(args):
        verbose = bool({"-v", "--verbose"} & set(args))
        verbosity = render.VERBOSE if verbose else render.DEFAULT
        print(render.update_text(result, settings.carried, verbosity=verbosity))
    return result.exit_code
