"""``mux-release`` commands that keep the repository current: repin, pins, notices, protocol."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from release.checkout import REPO_ROOT, write_text_atomically
from release.cli.options import (
    PinsOption,
    command_help,
    notices_path,
    pins_path,
)
from release.pins.pinfile import check_pins, load_pins
from release.upkeep.protocol import LOCK_PATH, check_protocol, record_protocol
from updater.config import settings
from updater.errors import UsageError

app = typer.Typer()


_NotesFileOption = Annotated[
    Path | None,
    typer.Option("--notices", metavar="<FILE>", help="Notices file (default: the repository's)."),
]


@app.command(
    "repin",
    epilog=command_help(
        "repin",
        (0, "pinned (or, with --dry-run, verified and printed)"),
        (3, "the asset did not verify (nothing written)"),
    ),
)
def repin_command(
    name: Annotated[
        str, typer.Argument(metavar="<NAME>", help="The artifact's name in pins.toml.")
    ],
    tag: Annotated[
        str | None,
        typer.Option("--tag", metavar="<TAG>", help="Pin this release tag (the project's own)."),
    ] = None,
    latest: Annotated[bool, typer.Option("--latest", help="Pin the newest release.")] = False,
    allow_downgrade: Annotated[
        bool, typer.Option("--allow-downgrade", help="Allow a tag older than the pinned one.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Verify and print the changes; write nothing.")
    ] = False,
    source: Annotated[
        str | None,
        typer.Option(
            "--source", metavar="<URL|DIR>", help="A mirror (feed URL or folder) instead of GitHub."
        ),
    ] = None,
    trusted_root: Annotated[
        Path | None,
        typer.Option(
            "--trusted-root",
            metavar="<FILE>",
            help="Sigstore trusted_root.json (default: Sigstore's own).",
        ),
    ] = None,
    pins: PinsOption = None,
    notices: _NotesFileOption = None,
) -> None:
    """Move a pin to a verified release asset.

    The notices are regenerated for it."""
    from release.upkeep.repin import Checkout, Upstream  # deferred: httpx (release.cli)
    from release.upkeep.repin import repin as run_repin  # deferred: httpx (release.cli)

    result = run_repin(
        name,
        tag=tag,
        latest=latest,
        allow_downgrade=allow_downgrade,
        checkout=Checkout(pins_path(pins), notices_path(notices)),
        upstream=Upstream(source=source, trusted_root=trusted_root),
        dry_run=dry_run,
        progress=lambda line: print(line, file=sys.stderr),
        settings=settings.load(os.environ),
    )
    for line in result.describe():
        print(line)


@app.command(
    "pins",
    epilog=command_help("pins", (1, "--check found a problem (each on stderr), or an error")),
)
def pins_command(
    check: Annotated[
        bool, typer.Option("--check", help="Check every pin and the notices; exit 1 on a problem.")
    ] = False,
    pins: PinsOption = None,
    notices: _NotesFileOption = None,
) -> None:
    """List the pinned artifacts, or check them (--check).

    --check reads nothing from the network: it is CI's check."""
    path = pins_path(pins)
    if check:
        problems = check_pins(path, notices_path=notices_path(notices))
        for problem in problems:
            print(f"mux-release: pins: {problem}", file=sys.stderr)
        if problems:
            raise typer.Exit(1)
        print(f"{path}: every pin is complete and the notices name it")
        return
    loaded = load_pins(path)
    for pin in loaded:
        for item in pin.files:
            where = f" [{item.target}]" if item.target else ""
            print(f"{pin.name}{where}  {pin.tag}  {item.sha256}  {pin.repository}/{item.asset}")
    if not loaded:
        print(f"{path}: no artifact is pinned")


@app.command(
    "notices",
    epilog=command_help(
        "notices",
        (
            1,
            "--check: the file is stale (the diff printed); --check-build: a file maps to "
            "nothing; or an error",
        ),
    ),
)
def notices_command(
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 with a diff when the file is stale.")
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option(
            "--out", metavar="<FILE>", help="Notices file (default: THIRD_PARTY_NOTICES.md)."
        ),
    ] = None,
    check_build: Annotated[
        Path | None,
        typer.Option(
            "--check-build",
            metavar="<BUILD_DIR>",
            help="Map every file of this build folder to a notice entry (exit 1 naming any "
            "that maps to nothing) and check its THIRD_PARTY_NOTICES.md and SBOM.",
        ),
    ] = None,
    pins: PinsOption = None,
) -> None:
    """Write THIRD_PARTY_NOTICES.md, or check it (--check).

    --check fails when the file is stale."""
    from release.bill.bill import check_build as run_check_build  # deferred: importlib.metadata
    from release.bill.third_party_notices import (  # deferred: importlib.metadata
        check_notices,
        generate_notices,
    )

    if check_build is not None:
        if not check_build.is_dir():
            raise UsageError(f"{check_build} is not a build folder")
        bill = run_check_build(check_build, pins_path=pins_path(pins))
        print(
            f"{check_build}: every one of its {bill.files} files maps to one of "
            f"{bill.components} components; its notices and SBOM are current"
        )
        return
    path = notices_path(output)
    expected = generate_notices(pins_path(pins))
    if check:
        diff = check_notices(path, expected)
        if diff is not None:
            sys.stdout.write(diff)
            print(f"mux-release: error: {path} is stale (run mux-release notices)", file=sys.stderr)
            raise typer.Exit(1)
        print(f"{path} is current")
        return
    write_text_atomically(path, expected)
    print(f"wrote {path}")


@app.command(
    "protocol",
    epilog=command_help(
        "protocol", (1, "protocol code changed without a version bump, or an error")
    ),
)
def protocol_command(
    record: Annotated[
        bool, typer.Option("--record", help="Record the fingerprint after a protocol bump.")
    ] = False,
    compatible: Annotated[
        str | None,
        typer.Option(
            "--compatible",
            metavar="<WHY>",
            help="With --record: record a change without a bump, because old clients and"
            " servers still understand it (an optional field they ignore); the lock keeps why.",
        ),
    ] = None,
    root: Annotated[
        Path | None,
        typer.Option("--root", metavar="<DIR>", help="Repository root (default: this checkout)."),
    ] = None,
) -> None:
    """Show the protocol version, or record it (--record).

    Fails when protocol code changed without a version bump."""
    if compatible is not None and not record:
        raise typer.BadParameter("--compatible goes with --record")
    if record:
        state = record_protocol(root or REPO_ROOT, compatible=compatible)
        print(
            f"recorded protocol version {state.protocol_version} "
            f"(fingerprint {state.fingerprint[:12]}) in {LOCK_PATH}"
        )
        return
    print(check_protocol(root or REPO_ROOT).summary())
