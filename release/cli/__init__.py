"""The ``mux-release`` command: thin wrappers over the release modules.

Each command parses its flags, calls one function of a release module (:mod:`release.build`,
:mod:`release.publish`, ...) and prints the result. Failures are one line on stderr with the
exit code of their kind (:mod:`updater.errors`).

Every command's start, ``mux-release --help`` included, pays for what is imported here (about
510 M instructions for ``--help``, callgrind), so the commands whose modules bring a large
library import them when they run, each saying which (on top of ``import release.cli``): the
builds and the bill bring :mod:`importlib.metadata` (+115 M); ``repin``, ``verify`` and
``fetch-artifacts`` the updater's HTTP stack, httpx (+750 M); ``rehearse`` that and
cryptography's X.509 (+1 G); ``tuf``, ``tuf-client`` and ``feed --tuf-online-private-key`` python-tuf
and securesystemslib. Everything else is imported below. tomlkit, the ``release`` extra,
is imported by :mod:`release.pins.pinfile` when it reads a file, so without it ``mux-release``
still starts and :func:`main` says how to get it.

The commands are typer sub-apps by job, one module each (:mod:`release.cli.build`,
:mod:`release.cli.publish`, :mod:`release.cli.lifecycle`, :mod:`release.cli.tuf`,
:mod:`release.cli.upkeep`, :mod:`release.cli.rehearse`), merged here into one flat listing; the
options several of them take are declared once in :mod:`release.cli.options`. A new command
goes into the module of its job (a lifecycle verb with
:func:`release.cli.lifecycle.lifecycle_verb`, which declares the options they share once).
"""

from __future__ import annotations

import sys
from typing import Annotated, Literal

import typer

from release.cli import build, lifecycle, publish, rehearse, tuf, upkeep
from release.cli.options import CONTEXT_SETTINGS, Group, command_help
from updater.cli.completions import command_tree
from updater.cli.completions import script as completion_script
from updater.errors import EXIT_ERROR, MuxError

app = typer.Typer(
    name="mux-release",
    help="Build, package and sign mux releases.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    cls=Group,
    context_settings=CONTEXT_SETTINGS,
)
for job in (build, publish, lifecycle, upkeep, rehearse, tuf):
    app.add_typer(job.app)
# The completion script reads the whole tree, so its command is the last one added.
shell = typer.Typer()
app.add_typer(shell)

# What the `release` extra of the mux distribution adds (pyproject.toml).
RELEASE_EXTRA_MODULES = frozenset({"tomlkit"})


@shell.command("completions", epilog=command_help("completions", (0, "printed")))
def completions_command(
    shell: Annotated[
        Literal["bash", "zsh", "fish"],
        typer.Argument(metavar="<bash|zsh|fish>", help="bash, zsh or fish."),
    ],
) -> None:
    """Print a completion script for mux-release.

    bash: eval "$(mux-release completions bash)"."""
    tree = command_tree(typer.main.get_command(app))
    print(completion_script(shell, "mux-release", tree), end="")


def run(args: list[str]) -> int:
    """Run ``mux-release ARGS`` and return its exit code: every failure is one line on stderr
    (``mux-release: error: ...``), click's usage errors are click's own (exit 2)."""
    try:
        app(args=args, prog_name="mux-release")  # standalone: it ends in SystemExit
    except SystemExit as exc:
        if isinstance(exc.code, str):  # sys.exit("message"), as the interpreter says it
            print(exc.code, file=sys.stderr)
            return EXIT_ERROR
        return exc.code if isinstance(exc.code, int) else 0
    except MuxError as exc:
        print(f"mux-release: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except ModuleNotFoundError as exc:
        if exc.name not in RELEASE_EXTRA_MODULES:
            raise
        print(
            f"mux-release: error: {exc.name} is missing: the release tooling is the optional "
            "extra of mux (pip install 'mux[release]'; in a checkout, uv sync)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    except OSError as exc:  # disk full, permissions, a file where a folder should be
        detail = f"{exc.strerror}: {exc.filename}" if exc.filename else str(exc)
        print(f"mux-release: error: {detail}", file=sys.stderr)
        return EXIT_ERROR
    return 0


def main() -> None:
    sys.exit(run(sys.argv[1:]))
