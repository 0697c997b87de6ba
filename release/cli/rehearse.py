"""``mux-release rehearse``: a whole release, offline."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from release.cli.options import command_help
from updater.errors import MuxError

app = typer.Typer()


# --- rehearse ----------------------------------------------------------------------------


@app.command(
    "rehearse",
    epilog=command_help(
        "rehearse",
        (0, "every step passed"),
        (1, "a step failed (it is named; its own exit code when it has one, e.g. 3)"),
    ),
)
def rehearse_command(
    standin: Annotated[
        bool,
        typer.Option("--standin", help="Use fast stand-in builds instead of PyInstaller."),
    ] = False,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the work folder.")] = False,
    build: Annotated[
        Path | None,
        typer.Option(
            "--build",
            metavar="<BUILD_DIR>",
            help="Rehearse with this standalone build (mux-release build) instead of making one.",
        ),
    ] = None,
) -> None:
    """Rehearse a whole release, offline.

    Build, sign, attest, serve, install, update and restart, as a real release does."""
    from release.rehearsal.rehearse import rehearse  # deferred: httpx, cryptography (release.cli)

    try:
        rehearse(standin=standin, keep=keep, build=build)
    except MuxError as exc:
        print(f"mux-release: rehearsal failed: {exc}", file=sys.stderr)
        raise typer.Exit(exc.exit_code) from None
