"""``mux-release`` commands that make builds: build, package, delta, packager-marker,
fetch-artifacts, glibc, compare-builds.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

import updater
from release.build.glibc import GLIBC_FLOOR, check_glibc_floor
from release.build.reproduce import compare_builds, read_environment
from release.cli.options import (
    PinsOption,
    PublicKeysOption,
    command_help,
    pins_path,
    read_small,
)
from release.pins.pinfile import DEFAULT_PINS_PATH
from release.publish.delta import write_deltas
from release.publish.package import package_release, read_release_notes
from updater.config import settings
from updater.config.marker import MARKER_NAME, marker_document
from updater.errors import UsageError
from updater.files import atomic_write
from updater.protocol import PROTOCOL_VERSION
from updater.timestamps import parse_duration

app = typer.Typer()


# --- build -------------------------------------------------------------------------------


@app.command(
    epilog=command_help(
        "build",
        (0, "built (the folder is printed)"),
        (3, "a pinned artifact does not match its pin (nothing written)"),
    )
)
def build(
    out: Annotated[
        Path, typer.Option("--out", metavar="<DIR>", help="Folder to write mux-<target>/ into.")
    ] = Path("dist"),
    version: Annotated[
        str | None,
        typer.Option(
            "--version", metavar="<X.Y.Z>", help="Release version (default: the project's)."
        ),
    ] = None,
    protocol_version: Annotated[
        int | None,
        typer.Option(
            "--protocol-version",
            metavar="<N>",
            help="Default: updater.protocol.PROTOCOL_VERSION.",
        ),
    ] = None,
    repo: Annotated[
        str,
        typer.Option(
            "--repo",
            metavar="<OWNER/NAME>",
            envvar="GITHUB_REPOSITORY",
            help="owner/name to update from. Env: GITHUB_REPOSITORY.",
        ),
    ] = "",
    keys: PublicKeysOption = None,
    target: Annotated[
        str | None,
        typer.Option("--target", metavar="<TARGET>", help="Default: this machine's target."),
    ] = None,
    standin: Annotated[
        bool, typer.Option("--standin", help="Fast sh + Python stand-in (tests, rehearsal).")
    ] = False,
    pins: Annotated[
        Path | None,
        typer.Option(
            "--pins",
            metavar="<FILE>",
            help="pins.toml of the artifacts to ship (default: release/pins.toml).",
        ),
    ] = None,
    artifacts: Annotated[
        Path | None,
        typer.Option(
            "--artifacts",
            metavar="<DIR>",
            help="Folder holding each pinned asset under its asset name (never downloaded); "
            "each is checked against its pin and shipped as vendor/<name>/<asset>.",
        ),
    ] = None,
    policy_file: Annotated[
        str,
        typer.Option(
            "--policy-file",
            metavar="<PATH>",
            help="Where the build reads the machine policy (absolute path; default "
            "/etc/mux/policy.toml).",
        ),
    ] = "/etc/mux/policy.toml",
    tuf_root: Annotated[
        Path | None,
        typer.Option(
            "--tuf-root",
            metavar="<ROOT_JSON>",
            help="The root.json of the project's TUF repository this build trusts first "
            "(its version 1, or the newest: a build follows every rotation after it).",
        ),
    ] = None,
    tuf_metadata_url: Annotated[
        str,
        typer.Option(
            "--tuf-metadata-url",
            metavar="<URL>",
            help="Where that repository's metadata is published (the feed's metadata/ on "
            "GitHub Pages); the GitHub source reads it.",
        ),
    ] = "",
) -> None:
    """Build mux for this machine, its build info baked in.

    The build info is its version, protocol, trusted keys and TUF root. Every artifact pinned in pins.toml ships inside the build, after its size and sha256 were
    checked against the pin (exit 3 on a mismatch, nothing written).
    """
    # deferred: importlib.metadata (release.cli)
    from release.build.standalone import build_standalone
    from release.build.standin import build_standin

    if not keys:
        raise UsageError("give at least one trusted minisign public key with --public-key")
    if version is None:
        version = updater.__version__  # the source tree's: release jobs do not install the project
    if protocol_version is None:
        protocol_version = PROTOCOL_VERSION
    make = build_standin if standin else build_standalone
    folder = make(
        out,
        version=version,
        protocol_version=protocol_version,
        repo=repo,
        minisign_keys=keys,
        target=target,
        pins_path=pins or DEFAULT_PINS_PATH,
        artifacts_dir=artifacts,
        policy_file=policy_file,
        tuf_root=read_small(tuf_root, "--tuf-root") if tuf_root is not None else None,
        tuf_metadata_url=tuf_metadata_url,
    )
    print(folder)


# --- package -----------------------------------------------------------------------------


@app.command(epilog=command_help("package", (0, "packaged (each archive and its sha256 printed)")))
def package(
    build_dirs: Annotated[
        list[Path],
        typer.Argument(metavar="<BUILD_DIR>...", help="Built mux-<target>/ folders."),
    ],
    out: Annotated[
        Path, typer.Option("--out", metavar="<DIR>", help="Empty folder for the release files.")
    ],
    released_at: Annotated[
        str | None,
        typer.Option("--released-at", metavar="<TIME>", help="RFC 3339 time (default: now)."),
    ] = None,
    notes: Annotated[
        Path | None,
        typer.Option(
            "--notes",
            metavar="<FILE>",
            help="The release notes (Markdown, at most 64 KiB): signed in manifest.json, "
            "shown by mux update.",
        ),
    ] = None,
) -> None:
    """Package built folders into a release folder.

    It holds mux-<target>.tar.gz, manifest.json and SHA256SUMS."""
    release_notes = "" if notes is None else read_release_notes(notes)
    manifest = package_release(
        build_dirs, out, released_at=released_at, release_notes=release_notes
    )
    for asset in manifest.assets:
        print(f"{out / asset.name}  {asset.sha256}")
    print(f"mux {manifest.version} (protocol {manifest.protocol_version}) packaged in {out}")


# --- delta -------------------------------------------------------------------------------


@app.command(
    "delta", epilog=command_help("delta", (0, "written (deltas refused for size included)"))
)
def delta_command(
    release_dir: Annotated[
        Path, typer.Argument(metavar="<RELEASE_DIR>", help="A packaged release folder.")
    ],
    previous: Annotated[
        list[Path] | None,
        typer.Option(
            "--previous",
            metavar="<RELEASE_DIR>",
            help="An earlier release folder (its archives and manifest.json); repeat it. "
            "Deltas are made from the newest three below this release.",
        ),
    ] = None,
) -> None:
    """Write file lists and deltas from earlier releases.

    Each target gets its signed file list, and its deltas from earlier releases. Run after package and before attest and sign: SHA256SUMS is rewritten over the new files
    (its signature removed). A delta of half the full archive or more is not published."""
    report = write_deltas(release_dir, previous or (), say=print)
    published = [d for d in report.deltas if d.published]
    print(
        f"{len(report.file_lists)} file lists, {len(published)} deltas written in {release_dir}"
        f" ({len(report.deltas) - len(published)} refused)"
    )


# --- packager-marker ---------------------------------------------------------------------


@app.command(
    "packager-marker", epilog=command_help("packager-marker", (0, "written (its path printed)"))
)
def packager_marker_command(
    folder: Annotated[
        Path,
        typer.Argument(
            metavar="<BUILD_DIR>",
            help="The unpacked build folder: the one holding the mux executable.",
        ),
    ],
    manager: Annotated[
        str,
        typer.Option(
            "--manager",
            metavar="<NAME>",
            help="Who manages this install, e.g. Homebrew, Nix, Debian.",
        ),
    ],
    update_command: Annotated[
        str,
        typer.Option(
            "--update-command",
            metavar="<COMMAND>",
            help="What updates it, e.g. 'brew upgrade mux'.",
        ),
    ],
    announce_delay: Annotated[
        str,
        typer.Option(
            "--announce-delay",
            metavar="<DURATION>",
            help="How long after a release `mux update --check` waits before announcing it "
            "(e.g. 24h: the time the package needs to catch up).",
        ),
    ] = "0",
) -> None:
    """Mark a build as managed by a package manager.

    The marker, mux-packager.json, goes next to the build's executable: `mux update` then
    refuses with --update-command, and `mux update --check` names it."""
    if not (folder / "mux").is_file():
        raise UsageError(f"{folder} holds no mux executable; give the unpacked build folder")
    try:
        delay = parse_duration(announce_delay)
    except ValueError as exc:
        raise UsageError(f"--announce-delay: {exc}") from None
    document = marker_document(manager, update_command, round(delay))
    path = folder / MARKER_NAME
    atomic_write(path, (json.dumps(document, indent=2) + "\n").encode(), mode=0o644)
    print(path)


# --- fetch-artifacts, glibc, compare-builds ---------------------------------------------


@app.command(
    "fetch-artifacts",
    epilog=command_help(
        "fetch-artifacts", (3, "a download does not match its pin (it is not kept)")
    ),
)
def fetch_artifacts_command(
    target: Annotated[
        str,
        typer.Option("--target", metavar="<TARGET>", help="The target whose build needs them."),
    ],
    out: Annotated[
        Path, typer.Option("--out", metavar="<DIR>", help="Folder to download them into.")
    ],
    pins: PinsOption = None,
) -> None:
    """Download the pinned artifacts a build ships.

    Only those a build for TARGET ships, each checked against its pin; then `mux-release build --artifacts DIR` ships them."""
    from release.pins.fetch import fetch_artifacts  # deferred: httpx (release.cli)

    fetched = fetch_artifacts(
        pins_path(pins), target, out, quiet=False, settings=settings.load(os.environ)
    )
    for item in fetched:
        state = "already there" if item.reused else "downloaded"
        print(f"{item.path}  {item.sha256}  ({item.pin}, {state})")
    if not fetched:
        print(f"no pinned artifact ships in a {target} build")


@app.command(
    "glibc",
    epilog=command_help(
        "glibc",
        (0, "no file needs more than --max"),
        (1, "a file needs more (each named), or an error"),
    ),
)
def glibc_command(
    folder: Annotated[
        Path,
        typer.Argument(metavar="<BUILD_DIR>", help="A built mux-<target>/ folder (Linux, gnu)."),
    ],
    maximum: Annotated[
        str | None,
        typer.Option(
            "--max",
            metavar="<X.Y>",
            help="The newest glibc the build may need (default: the floor).",
        ),
    ] = None,
) -> None:
    """Print the newest glibc a build needs.

    Read with objdump -T; exit 1 naming every file that needs more than --max (default: the release's floor, release/build/glibc.py)."""
    floor = maximum or GLIBC_FLOOR
    requirement = check_glibc_floor(folder, floor)
    print(f"{folder} {requirement.describe()}; the floor is glibc {floor}")


@app.command(
    "compare-builds",
    epilog=command_help(
        "compare-builds",
        (0, "identical archives, or different machines (not comparable)"),
        (1, "the archives differ (the files named), or an error"),
    ),
)
def compare_builds_command(
    first: Annotated[Path, typer.Argument(metavar="<BUILD_DIR>", help="A build folder.")],
    second: Annotated[
        Path,
        typer.Argument(metavar="<BUILD_DIR>", help="Another build of the same version and target."),
    ],
    environments: Annotated[
        tuple[Path, Path] | None,
        typer.Option(
            "--environments",
            metavar="<FIRST_JSON> <SECOND_JSON>",
            help="The machines the two builds ran on (the build jobs' JSON files): a "
            "difference between builds from different machines is reported, not failed.",
        ),
    ] = None,
) -> None:
    """Check that two builds package to identical archives.

    Fails (exit 1, naming the files) unless they do; with --environments, builds from different machines that differ are "not comparable" (exit 0)."""
    recorded = None
    if environments is not None:
        recorded = (read_environment(environments[0]), read_environment(environments[1]))
    print(compare_builds(first, second, recorded).describe())
