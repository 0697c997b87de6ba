"""Build a mux for one target, with its build info baked in.

Two builders write the same layout, ``<out_dir>/mux-<target>/`` with the ``mux`` executable
at its top and ``updater/_build_info.json`` somewhere below (see docs/contracts.md):

* :func:`build_standalone`: the real thing, a PyInstaller one-folder build that needs no
  Python on the user's machine. PyInstaller is a development dependency, run in its own
  process so nothing of it is imported here.
* :func:`build_standin`: a fast stand-in for tests and the release rehearsal: a POSIX ``sh``
  launcher that runs a copy of the ``updater`` package with a given Python.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import updater
from updater.buildinfo import BUILD_INFO_FILE, MAX_TRUSTED_KEYS, BuildInfo, TrustSettings
from updater.errors import MuxError, UsageError
from updater.minisign import PublicKey
from updater.models import parse_version

PACKAGE_DIR = Path(updater.__file__).resolve().parent
BUILD_INFO_NAME = BUILD_INFO_FILE.name
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


class BuildError(MuxError):
    """A build could not be made (missing tool, failed compiler run, bad output folder)."""


def build_folder_name(target: str) -> str:
    return f"mux-{target}"


def make_build_info(
    *,
    version: str,
    protocol_version: int,
    target: str,
    repo: str,
    minisign_keys: Sequence[str],
) -> BuildInfo:
    """Validate the declared build settings and turn them into a :class:`BuildInfo`."""
    from updater._targets import TARGETS

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
    return BuildInfo(
        version=version,
        protocol_version=protocol_version,
        target=target,
        repo=repo,
        development=False,
        trust=TrustSettings(minisign_keys=keys),
    )


def write_build_info(package_dir: Path, info: BuildInfo) -> Path:
    """Write ``_build_info.json`` into an ``updater`` package folder (the one writer of it)."""
    path = Path(package_dir) / BUILD_INFO_NAME
    path.write_text(json.dumps(info.to_json(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def _resolve_target(target: str | None) -> str:
    if target:
        return target
    from updater._targets import detect_target

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


_LAUNCHER = """\
#!/bin/sh
# mux stand-in launcher (mux-release build --standin): runs the updater package next to it.
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
) -> Path:
    """A stand-in build in ``out_dir/mux-<target>/`` (returned): ``mux`` + ``lib/``.

    ``report_version``/``report_target`` bake a build info that disagrees with the declared
    version/target, to test that consumers catch a lying build.
    """
    target = _resolve_target(target)
    declared = make_build_info(
        version=version,
        protocol_version=protocol_version,
        target=target,
        repo=repo,
        minisign_keys=minisign_keys,
    )
    baked = BuildInfo(
        version=report_version if report_version is not None else declared.version,
        protocol_version=declared.protocol_version,
        target=report_target if report_target is not None else declared.target,
        repo=declared.repo,
        development=False,
        trust=declared.trust,
    )
    folder = _fresh_output_folder(out_dir, target)
    try:
        lib = folder / "lib"
        _copy_updater_package(lib / "updater")
        write_build_info(lib / "updater", baked)
        (lib / "mux_entry.py").write_text(_STANDIN_ENTRY, encoding="utf-8")
        launcher = folder / "mux"
        launcher.write_text(_LAUNCHER.format(python=shlex.quote(python)), encoding="utf-8")
        launcher.chmod(0o755)
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
) -> Path:
    """A PyInstaller one-folder build of ``mux`` in ``out_dir/mux-<target>/`` (returned).

    Only the running machine's target can be built (PyInstaller does not cross-compile).
    """
    from updater._targets import detect_target

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
    )
    if importlib.util.find_spec("PyInstaller") is None:
        raise BuildError(
            "PyInstaller is not installed",
            hint="it is a development dependency: run `uv sync` and use `uv run mux-release`",
        )
    folder = _fresh_output_folder(out_dir, target)
    with tempfile.TemporaryDirectory(prefix="mux-build-") as scratch_name:
        scratch = Path(scratch_name)
        info_dir = scratch / "info"
        info_dir.mkdir()
        info_file = write_build_info(info_dir, info)
        entry = scratch / "mux_entry.py"
        entry.write_text(_PYINSTALLER_ENTRY, encoding="utf-8")
        command = [
            sys.executable,
            "-m",
            "PyInstaller",
            "--noconfirm",
            "--onedir",
            "--console",
            "--log-level=WARN",
            "--name=mux",
            f"--distpath={scratch / 'dist'}",
            f"--workpath={scratch / 'work'}",
            f"--specpath={scratch / 'spec'}",
            f"--paths={PACKAGE_DIR.parent}",
            # The CLI imports its subcommands lazily; collect every module of the package.
            "--collect-submodules=updater",
            # sigstore reads its trust roots from package data at run time.
            "--collect-data=sigstore",
            f"--add-data={info_file}{os.pathsep}updater",
            # Development tools reachable through optional plugin imports (pydantic's mypy
            # plugin, hypothesis entry points) are never part of mux, nor is setuptools.
            *(f"--exclude-module={name}" for name in DEV_ONLY_MODULES),
            str(entry),
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
            raise BuildError(f"PyInstaller failed (exit {result.returncode}): {tail[0]}")
        built = scratch / "dist" / "mux"
        if not (built / "mux").is_file():
            raise BuildError("PyInstaller finished but produced no mux executable")
        try:
            shutil.move(str(built), str(folder))
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
    return folder
