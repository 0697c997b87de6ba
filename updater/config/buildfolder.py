"""Where a build folder keeps its build info: the one rule (docs/contracts.md).

A release build folder has its ``mux`` executable at the top and its build info at
``<code folder>/updater/_build_info.json``, exactly one folder below the top (``_internal/``
in a PyInstaller build, ``lib/`` in the stand-in). The running mux, the layout's reader,
``mux-release package`` and the inventory of a build all find it by this rule.

Stdlib only, and nothing but :mod:`os` and :mod:`sys`: the first thing every mux process does
(:mod:`updater.install.inuse`) uses it.
"""

from __future__ import annotations

import os
import sys

BUILD_INFO_NAME = "_build_info.json"
CODE_PACKAGE = "updater"  # the folder of mux's own modules inside a build's code folder

# The running mux's build info: in its own package folder, wherever that was loaded from.
RUNNING_BUILD_INFO = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), BUILD_INFO_NAME
)


def running_build_folder() -> str | None:
    """The folder of the release build this process was started from (``…/versions/<v>``),
    whether or not it is still there; None for a development checkout or a Python install.

    Derived from where the modules were loaded when the process started, so it never follows
    the ``<bin>/mux`` link, which ``mux update`` may have moved since.
    """
    if not getattr(sys, "frozen", False):
        return None
    return os.path.dirname(os.path.dirname(os.path.dirname(RUNNING_BUILD_INFO)))


def is_build_info(relative: str) -> bool:
    """``relative``, a ``/``-separated path inside a build folder, is where the build info
    belongs (``<code folder>/updater/_build_info.json``)."""
    parts = relative.split("/")
    return (
        len(parts) == 3
        and parts[0] not in ("", ".", "..")
        and parts[1:] == [CODE_PACKAGE, BUILD_INFO_NAME]
    )


def build_info_in(folder: str) -> str | None:
    """The build info file of the build folder ``folder``; None unless there is exactly one
    where the rule puts it (a code folder that is a link does not count)."""
    try:
        with os.scandir(folder) as entries:
            found = [
                os.path.join(entry.path, CODE_PACKAGE, BUILD_INFO_NAME)
                for entry in entries
                if entry.is_dir(follow_symlinks=False)
            ]
    except OSError:
        return None
    present = [path for path in found if os.path.isfile(path)]
    return present[0] if len(present) == 1 else None
