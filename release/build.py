"""Build a mux for one target, with its build info baked in.

Two builders write the same layout, ``<out_dir>/mux-<target>/`` with the ``mux`` executable
at its top and ``updater/_build_info.json`` somewhere below (see docs/contracts.md):

* :func:`build_standalone`: the real thing, a PyInstaller one-folder build that needs no
  Python on the user's machine. PyInstaller is a development dependency, run in its own
  process so nothing of it is imported here.
* :func:`build_standin`: a fast stand-in for tests and the release rehearsal: a POSIX ``sh``
  launcher that runs a copy of the ``updater`` package with a given Python.

Both ship the pinned artifacts of ``release/pins.toml`` (``pins_path``) that the build's
target ships, as ``vendor/<name>/<asset>`` inside the build folder, so they end up in
``mux-<target>.tar.gz``: an entry's single asset, or its asset for this target (an entry that
does not declare the target ships nothing there). The build never downloads: the release
engineer or the release workflow puts each of them, under its asset name, into one folder and
passes it as ``artifacts_dir`` (``mux-release build --artifacts DIR``), e.g. with
``mux-release fetch-artifacts --target T --out DIR`` (:mod:`release.fetch_artifacts`). Every
file is checked against its pin (size, then a streamed sha256) before anything is written, and
hashed again while it is copied in, so a file that changes in between still fails closed. A
missing file is a :class:`BuildError`, a size or digest mismatch a
:class:`~updater.errors.VerificationError` (exit 3); either way no build folder is left
behind. With no pins this is a no-op.

Then :func:`write_build_bill` records what the folder ships (:mod:`release.bill`): the
third-party notices (``THIRD_PARTY_NOTICES.md``) and the CycloneDX SBOM, both derived from the
same mapping of every file of the folder to its origin.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import updater
from release.pins import check_file_against_pin
from updater.config.buildfolder import BUILD_INFO_NAME
from updater.config.buildinfo import (
    MAX_TRUSTED_KEYS,
    POLICY_FILE,
    BuildInfo,
    TrustSettings,
)
from updater.errors import MuxError, UsageError
from updater.files import sha256_file
from updater.formats.minisign import PublicKey
from updater.formats.models import archive_folder, parse_version

if TYPE_CHECKING:
    from release.pins import Pin, PinnedAsset

PACKAGE_DIR = Path(updater.__file__).resolve().parent
DEV_ONLY_MODULES = (
    "PyInstaller",
    "_distutils_hack",
    "_pytest",
    "hypothesis",
    "mypy",
    "mypyc",
    "pkg_resources",
    "pytest",
    "respx",
    # setuptools' PyInstaller runtime hook imports it at every start (~0.5 s); mux never uses it.
    "setuptools",
    "tkinter",
)
# Where pinned artifacts go inside a build folder: vendor/<pin name>/<asset>.
VENDOR_DIR_NAME = "vendor"
_CHUNK = 1 << 20


class BuildError(MuxError):
    """A build could not be made (missing tool, failed compiler run, bad output folder)."""


def build_folder_name(target: str) -> str:
    return archive_folder(target)  # the archive's one top folder (docs/contracts.md)


def make_build_info(
    *,
    version: str,
    protocol_version: int,
    target: str,
    repo: str,
    minisign_keys: Sequence[str],
    policy_file: str = POLICY_FILE,
) -> BuildInfo:
    """Validate the declared build settings and turn them into a :class:`BuildInfo`.

    ``policy_file`` is where the build reads the machine policy (an absolute path: a
    distribution whose /etc is elsewhere names its own)."""
    from updater.config.targets import TARGETS

    parse_version(version)
    if target not in TARGETS:
        raise UsageError(f"{target!r} is not a published target", hint=", ".join(TARGETS))
    if isinstance(protocol_version, bool) or protocol_version < 0:
        raise UsageError("the protocol version must be a non-negative integer")
    if len(minisign_keys) > MAX_TRUSTED_KEYS:
        raise UsageError(
            f"at most {MAX_TRUSTED_KEYS} trusted minisign keys (the current and the next one)"
        )
    keys = tuple(PublicKey.parse(key).to_base64() for key in minisign_keys)
    if not Path(policy_file).is_absolute():
        raise UsageError(f"--policy-file {policy_file!r} must be an absolute path")
    return BuildInfo(
        version=version,
        protocol_version=protocol_version,
        target=target,
        repo=repo,
        development=False,
        trust=TrustSettings(minisign_keys=keys),
        policy_file=policy_file,
    )


def write_build_info(package_dir: Path, info: BuildInfo) -> Path:
    """Write ``_build_info.json`` into an ``updater`` package folder (the one writer of it)."""
    path = Path(package_dir) / BUILD_INFO_NAME
    path.write_text(json.dumps(info.to_json(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def _resolve_target(target: str | None) -> str:
    if target:
        return target
    from updater.config.targets import detect_target

    return detect_target()


def _fresh_output_folder(out_dir: Path, target: str) -> Path:
    folder = Path(out_dir) / build_folder_name(target)
    if folder.exists() or folder.is_symlink():
        raise BuildError(f"{folder} already exists", hint="remove it or build into another --out")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    return folder


def _copy_updater_package(destination: Path) -> None:
    shutil.copytree(
        PACKAGE_DIR,
        destination,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", BUILD_INFO_NAME),
    )


# --- pinned artifacts ----------------------------------------------------------------------


@dataclass(frozen=True)
class PinnedFile:
    """A pinned artifact's file in the artifacts folder, checked against its pin."""

    pin: Pin
    item: PinnedAsset
    source: Path

    @property
    def destination(self) -> PurePosixPath:
        """Its place inside the build folder (and so inside ``mux-<target>/``)."""
        return PurePosixPath(VENDOR_DIR_NAME, self.pin.name, self.item.asset)


def shipped_pins(pins: Sequence[Pin], target: str) -> list[tuple[Pin, PinnedAsset]]:
    """The pinned files a build for ``target`` ships, each with its pin (pure)."""
    from release.pins import PinsError

    shipped = []
    for pin in pins:
        item = pin.file_for(target)
        if item is None:
            continue
        if pin.tag is None or not item.is_pinned:
            raise PinsError(
                f"{item.label(pin.name)} is not pinned yet, so the build cannot ship it",
                hint=f"run mux-release repin {pin.name} --tag <tag>",
            )
        shipped.append((pin, item))
    by_asset: dict[str, str] = {}
    for pin, item in shipped:
        other = by_asset.setdefault(item.asset, pin.name)
        if other != pin.name:
            raise PinsError(f"{other} and {pin.name} both pin an asset named {item.asset}")
    return shipped


def check_pinned_artifacts(
    pins_path: Path | None, artifacts_dir: Path | None, target: str | None = None
) -> list[PinnedFile]:
    """Find and check, in ``artifacts_dir``, every pinned file a ``target`` build ships (offline).

    No ``pins_path``, or a pins.toml without entries for the target, needs no artifacts. An
    entry that was never pinned cannot be shipped, so it fails the build, as it fails
    ``pins --check``. ``target`` defaults to this machine's.
    """
    if pins_path is None:
        return []
    from release.pins import load_pins

    pins = load_pins(Path(pins_path))
    wanted = shipped_pins(pins, _resolve_target(target)) if pins else []
    if not wanted:
        return []
    if artifacts_dir is None:
        raise UsageError(
            f"{pins_path} pins {', '.join(pin.name for pin, _ in wanted)}; give the folder "
            f"holding {', '.join(item.asset for _, item in wanted)} with --artifacts"
        )
    folder = Path(artifacts_dir)
    if not folder.is_dir():
        raise UsageError(f"the artifacts folder {folder} does not exist")
    found = []
    for pin, item in wanted:
        source = folder / item.asset
        if not source.is_file():
            raise BuildError(
                f"{item.label(pin.name)} {pin.tag}: {source} is missing (the pin wants sha256 "
                f"{item.sha256})",
                hint=f"download {item.url} into {folder}",
            )
        # The size first: a wrong file usually fails here without reading it.
        size = source.stat().st_size
        check_file_against_pin(pin, item, size=size, sha256=None, where=source)
        check_file_against_pin(pin, item, size=size, sha256=sha256_file(source), where=source)
        found.append(PinnedFile(pin=pin, item=item, source=source))
    return found


def write_bill(folder: Path, pins_path: Path | None) -> None:
    """The build's last step: its notices and SBOM, from what the folder now holds."""
    from release.bill import write_build_bill

    write_build_bill(folder, pins_path=pins_path)


def vendor_pinned_artifacts(files: Sequence[PinnedFile], build_folder: Path) -> None:
    """Copy checked artifacts into ``build_folder``, hashing what is written.

    The hash of the copy is what ships, so it is checked again: a file replaced after
    :func:`check_pinned_artifacts` fails here rather than slipping into the release. The caller
    removes the build folder on failure.
    """
    for entry in files:
        destination = Path(build_folder, *entry.destination.parts)
        destination.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        size = 0
        with open(entry.source, "rb") as source, open(destination, "xb") as copy:
            while chunk := source.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
                copy.write(chunk)
        # Fixed mode: the archive's modes must not depend on how the file was downloaded.
        destination.chmod(0o644)
        check_file_against_pin(
            entry.pin, entry.item, size=size, sha256=digest.hexdigest(), where=entry.source
        )


# How the inventory knows a stand-in's launcher (release/inventory.py).
LAUNCHER_HEADER = """\
#!/bin/sh
# mux stand-in launcher (mux-release build --standin): runs the updater package next to it.
"""
_LAUNCHER = (
    LAUNCHER_HEADER
    + """\
# Resolve our real location: <bin>/mux is a symlink into MUX_HOME/versions/<version>/.
self=$(readlink -f -- "$0" 2>/dev/null) || self=
if [ -z "$self" ]; then
    self=$0
    while [ -L "$self" ]; do
        link=$(readlink -- "$self") || break
        case $link in
            /*) self=$link ;;
            *) self=$(dirname -- "$self")/$link ;;
        esac
    done
fi
here=$(cd -P -- "$(dirname -- "$self")" && pwd -P) || exit 1
# -B: never write __pycache__ into the installed folder (its file list is checked later).
# MUX_STANDIN_LAUNCHER tells the entry point how it was invoked (as argv[0] of a frozen build).
MUX_STANDIN_LAUNCHER=$0 exec {python} -E -B "$here/lib/mux_entry.py" "$@"
"""
)

_STANDIN_ENTRY = """\
# mux stand-in entry point: our own copy of the updater package comes first on sys.path.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# Behave like a standalone (frozen) build: argv[0] is the command the user ran, so that
# `mux server restart` and friends re-run <bin>/mux, which mux update switches.
sys.frozen = True
sys.argv[0] = os.environ.pop("MUX_STANDIN_LAUNCHER", sys.argv[0])

from updater.__main__ import main

sys.exit(main())
"""


def build_standin(
    out_dir: Path,
    *,
    version: str,
    protocol_version: int,
    repo: str,
    minisign_keys: Sequence[str],
    target: str | None = None,
    python: str = sys.executable,
    report_version: str | None = None,
    report_target: str | None = None,
    pins_path: Path | None = None,
    artifacts_dir: Path | None = None,
    policy_file: str = POLICY_FILE,
) -> Path:
    """A stand-in build in ``out_dir/mux-<target>/`` (returned): ``mux`` + ``lib/``.

    ``report_version``/``report_target`` bake a build info that disagrees with the declared
    version/target, to test that consumers catch a lying build. ``pins_path`` and
    ``artifacts_dir``: the pinned artifacts to ship under ``vendor/`` (module docstring).
    """
    target = _resolve_target(target)
    declared = make_build_info(
        version=version,
        protocol_version=protocol_version,
        target=target,
        repo=repo,
        minisign_keys=minisign_keys,
        policy_file=policy_file,
    )
    baked = BuildInfo(
        version=report_version if report_version is not None else declared.version,
        protocol_version=declared.protocol_version,
        target=report_target if report_target is not None else declared.target,
        repo=declared.repo,
        development=False,
        trust=declared.trust,
        policy_file=declared.policy_file,
    )
    pinned = check_pinned_artifacts(pins_path, artifacts_dir, target)
    folder = _fresh_output_folder(out_dir, target)
    try:
        vendor_pinned_artifacts(pinned, folder)
        lib = folder / "lib"
        _copy_updater_package(lib / "updater")
        write_build_info(lib / "updater", baked)
        (lib / "mux_entry.py").write_text(_STANDIN_ENTRY, encoding="utf-8")
        launcher = folder / "mux"
        launcher.write_text(_LAUNCHER.format(python=shlex.quote(python)), encoding="utf-8")
        launcher.chmod(0o755)
        write_bill(folder, pins_path)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder


_PYINSTALLER_ENTRY = """\
import sys

from updater.__main__ import main

sys.exit(main())
"""


def build_standalone(
    out_dir: Path,
    *,
    version: str,
    protocol_version: int,
    repo: str,
    minisign_keys: Sequence[str],
    target: str | None = None,
    pins_path: Path | None = None,
    artifacts_dir: Path | None = None,
    policy_file: str = POLICY_FILE,
    python_options: Sequence[str] = (),
) -> Path:
    """A PyInstaller one-folder build of ``mux`` in ``out_dir/mux-<target>/`` (returned).

    Only the running machine's target can be built (PyInstaller does not cross-compile).
    ``pins_path`` and ``artifacts_dir``: the pinned artifacts to ship under ``vendor/``
    (module docstring); they are checked before PyInstaller runs. ``python_options``: for
    diagnostic builds only (:func:`pyinstaller_settings`).
    """
    from updater.config.targets import detect_target

    host = detect_target()
    target = target or host
    if target != host:
        raise UsageError(f"cannot build {target} on a {host} machine (no cross-compiling)")
    info = make_build_info(
        version=version,
        protocol_version=protocol_version,
        target=target,
        repo=repo,
        minisign_keys=minisign_keys,
        policy_file=policy_file,
    )
    if importlib.util.find_spec("PyInstaller") is None:
        raise BuildError(
            "PyInstaller is not installed",
            hint="it is a development dependency: run `uv sync` and use `uv run mux-release`",
        )
    pinned = check_pinned_artifacts(pins_path, artifacts_dir, target)
    folder = _fresh_output_folder(out_dir, target)
    with tempfile.TemporaryDirectory(prefix="mux-build-") as scratch_name:
        scratch = Path(scratch_name)
        info_dir = scratch / "info"
        info_dir.mkdir()
        info_file = write_build_info(info_dir, info)
        entry = scratch / "mux_entry.py"
        entry.write_text(_PYINSTALLER_ENTRY, encoding="utf-8")
        command = pyinstaller_command(
            scratch, entry=entry, info_file=info_file, python_options=python_options
        )
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
            raise BuildError(f"PyInstaller failed (exit {result.returncode}): {tail[0]}")
        built = scratch / "dist" / "mux"
        if not (built / "mux").is_file():
            raise BuildError("PyInstaller finished but produced no mux executable")
        if target.endswith("-linux-gnu"):
            # The system's own (libgcc_s), never the build machine's copy: release/glibc.py.
            from release.glibc import leave_out_system_libraries

            leave_out_system_libraries(built)
        # Into the scratch build, so the output folder only ever appears complete.
        vendor_pinned_artifacts(pinned, built)
        write_bill(built, pins_path)
        try:
            shutil.move(str(built), str(folder))
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
    return folder


# --- what the PyInstaller build ships and runs at start-up (docs/build.md) ------------------
#
# Four decisions, each measured (bench/bench_standalone.py, docs/build.md) and each kept here,
# apart from the build steps above:
# * what is left out: modules the installed mux never imports (NEVER_IMPORTED);
# * what runs before mux's own code: PyInstaller's runtime hooks mux does not need;
# * how modules are stored: PyInstaller's archive or plain .pyc files (MODULE_ARCHIVE);
# * shared libraries stripped of their symbol tables.

SPEC_FILE = Path(__file__).with_name("mux.spec")

# Top-level modules the installed mux never imports, on any path: `mux version`, the check
# (cached, uncached), `mux update` with all five layers (attestation included) and its
# progress bar on a terminal, `--rollback`, the server commands and the daemon, `--help` and
# usage errors. PyInstaller's analysis follows every import statement, also those on paths
# mux never takes (optional features of its dependencies); these would only weigh on the
# download and, for some, on every start through their runtime hooks.
# Checked: tests/test_imports.py records the modules every path imports and fails when
# one of these shows up; the real build's `mux update` runs in tests/test_release_build.py.
NEVER_IMPORTED: dict[str, str] = {
    "release": "the release tooling (mux-release) is not part of the client",
    "tomlkit": "only the release tooling reads and writes TOML",
    "pygments": "rich uses it for syntax highlighting and pretty tracebacks, both off",
    "markdown_it": "rich.markdown only; mux renders no Markdown",
    "mdurl": "markdown_it only",
    "asyncio": "mux is synchronous; anyio and httpcore import it only for async clients",
    "concurrent": "process and thread pools: mux uses neither",
    "multiprocessing": "never used; its runtime hook would import it at every start",
    "dns": "email_validator's deliverability check (pydantic's EmailStr), never used",
    "email_validator": "pydantic's EmailStr, never used",
    "pydoc": "interactive help()",
    "pydoc_data": "interactive help()",
    "xml": "no XML anywhere in mux's data path",
    "xmlrpc": "no XML anywhere in mux's data path",
    "pyexpat": "no XML anywhere in mux's data path",
    "_pydecimal": "the pure-Python fallback of _decimal, which ships",
}

# Imported when installed, never needed: httpcore tries `import anyio` (which imports sniffio)
# for async clients and uses threading locks without it; mux's HTTP clients are synchronous.
# Measured: 114 M instructions (16%) less for every uncached check, and as much for every
# update. mux's own code that uses one of these when present falls back without it.
# A development run imports them, so the recording test cannot check these: the real build
# running every path (tests/test_release_build.py) is their guard.
OPTIONAL_NEVER_NEEDED: dict[str, str] = {
    "anyio": "httpcore's async backend; mux only uses httpx's synchronous client",
    "sniffio": "anyio's event-loop detection",
    # Shipped, PyInstaller's bootstrap imports it at every start (its ctypes hook): about
    # 16 M instructions on `mux version` and on every sidebar check (docs/build.md).
    "ctypes": "never used: a server's link watch polls, and a silent server's executable is "
    "read from /proc on Linux (elsewhere its status line names it)",
}

# PyInstaller runtime hooks run before mux's own code at every start. Measured with
# `-X importtime` in a build: together they imported inspect, zipfile, pkgutil and
# multiprocessing (more than half of `mux version`'s start-up).
UNNEEDED_RUNTIME_HOOKS: dict[str, str] = {
    "pyi_rth_inspect": "makes inspect.getsource work on frozen code; mux never reads its source",
    "pyi_rth_pkgutil": "makes pkgutil.iter_modules list frozen modules; mux never lists modules",
    "pyi_rth_multiprocessing": "multiprocessing is not shipped (NEVER_IMPORTED)",
}

# Pure-Python modules stay in PyInstaller's module archive (PYZ, inside the executable).
# Measured against plain .pyc files in the folder (`noarchive`): the archive costs every start
# about 30 M instructions (its table of contents is unmarshalled, each module decompressed by
# an importer written in Python: `mux version` 109 M instead of 79 M), but the folder holds
# 95 files instead of 1039, and every install pays per file (unpack, fsync, .mux-files,
# rollback's re-check): `mux update` took 0.5 s more CPU and 1.3 s more wall time with the
# loose files. Updates are where mux is furthest from its target (docs/build.md).
MODULE_ARCHIVE = True

# Symbol tables are for debuggers: the local CPython's libpython alone carries 17 MiB of them.
STRIP_BINARIES = True


def pyinstaller_settings(
    entry: Path, info_file: Path, *, python_options: Sequence[str] = ()
) -> dict[str, object]:
    """The settings release/mux.spec reads: everything PyInstaller is told, in one place.

    ``python_options`` are baked into the bootloader for diagnostic builds only (e.g.
    ``X importtime``, see docs/build.md): a frozen mux ignores ``PYTHON*`` variables.
    """
    return {
        "entry": str(entry),
        "paths": [str(PACKAGE_DIR.parent)],
        "datas": [[str(info_file), "updater"]],
        "excludes": sorted({*DEV_ONLY_MODULES, *NEVER_IMPORTED, *OPTIONAL_NEVER_NEEDED}),
        "drop_runtime_hooks": sorted(UNNEEDED_RUNTIME_HOOKS),
        "noarchive": not MODULE_ARCHIVE,
        "strip": STRIP_BINARIES,
        "python_options": list(python_options),
    }


def pyinstaller_command(
    scratch: Path, *, entry: Path, info_file: Path, python_options: Sequence[str] = ()
) -> list[str]:
    """The PyInstaller run that builds ``scratch/dist/mux/`` from release/mux.spec."""
    settings = scratch / "pyinstaller-settings.json"
    doc = pyinstaller_settings(entry, info_file, python_options=python_options)
    settings.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return [
        sys.executable,
        "-m",
        "PyInstaller",
        "--noconfirm",
        "--log-level=WARN",
        f"--distpath={scratch / 'dist'}",
        f"--workpath={scratch / 'work'}",
        str(SPEC_FILE),
        "--",
        str(settings),
    ]
