"""The stand-in build: a fast mux for tests and the release rehearsal, no PyInstaller.

:func:`build_standin` writes a build folder of the same layout as the standalone build
(:mod:`release.folder.layout`): a POSIX ``sh`` launcher ``mux`` (starting with
:data:`~release.folder.layout.LAUNCHER_HEADER`, so the inventory knows it) that runs a copy of the
``updater`` package with a given Python, its build info, the pinned artifacts and its bill, by
the same steps (:mod:`release.build.steps`). Stand-in builds are never published.
"""

from __future__ import annotations

import atexit
import functools
import py_compile
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Unpack

from release.build.steps import (
    PACKAGE_DIR,
    BuildError,
    BuildOptions,
    check_pinned_artifacts,
    fresh_output_folder,
    make_build_info,
    resolve_target,
    unknown_options,
    vendor_pinned_artifacts,
    write_bill,
    write_build_info,
)
from release.folder.layout import LAUNCHER_HEADER
from updater.config.buildfolder import BUILD_INFO_NAME
from updater.config.buildinfo import POLICY_FILE, BuildInfo


def _copy_updater_package(destination: Path) -> None:
    """The checkout's ``updater`` package, with its modules compiled, as a real build ships
    them (in its module archive): a stand-in's every start would otherwise compile them all.

    The bytecode is checked against its source by hash, not by time: an archive's members
    carry one normalised time (release.folder.archive), and a test that edits a stand-in's
    module gets that module compiled from its new source, as any Python would.

    A process that makes many stand-ins (the test suite makes hundreds, the rehearsal a
    few) compiles the package once and copies that tree afterwards: the bytecode depends on
    the sources alone (fixed ``ddir`` and hash seed), so the copy is the same bytes a new
    compile would write (0.24 s of a child process saved per stand-in, measured). The copy
    is taken again whenever a source file's size or time changed."""
    sources = _source_fingerprint()
    compiled = _COMPILED.get(sources)
    if compiled is None or not compiled.is_dir():
        compiled = Path(tempfile.mkdtemp(dir=_compiled_cache_root()), "updater")
        _compile_package_copy(compiled)
        _COMPILED[sources] = compiled
    shutil.copytree(compiled, destination)


# The compiled package trees this process made, by the fingerprint of the sources they were
# compiled from (_copy_updater_package).
_COMPILED: dict[tuple[tuple[str, int, int], ...], Path] = {}


def _source_fingerprint() -> tuple[tuple[str, int, int], ...]:
    """Every source file of the package with its size and modification time (ns)."""
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if "__pycache__" not in path.parts:
            status = path.stat()
            found.append((str(path.relative_to(PACKAGE_DIR)), status.st_size, status.st_mtime_ns))
    return tuple(found)


@functools.cache
def _compiled_cache_root() -> str:
    root = tempfile.mkdtemp(prefix="mux-standin-compiled-")
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def _compile_package_copy(destination: Path) -> None:
    shutil.copytree(
        PACKAGE_DIR,
        destination,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", BUILD_INFO_NAME),
    )
    # In a process of its own with a fixed hash seed: the order a set literal is marshalled
    # in follows its strings' hashes, which are random in every other process.
    compiled = subprocess.run(
        [
            *(sys.executable, "-E", "-c", _COMPILE, str(destination)),
            py_compile.PycInvalidationMode.CHECKED_HASH.name,
        ],
        env={"PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        check=False,
    )
    if compiled.returncode != 0:
        shutil.rmtree(destination, ignore_errors=True)
        raise BuildError(
            f"cannot compile the updater package copied into {destination}: "
            + (compiled.stdout + compiled.stderr).strip()[-300:]
        )


# ddir: the name the bytecode records for its source, not this folder's, so that two builds
# are identical.
_COMPILE = """\
import compileall, py_compile, sys
mode = py_compile.PycInvalidationMode[sys.argv[2]]
ok = compileall.compile_dir(sys.argv[1], ddir="updater", quiet=1, invalidation_mode=mode)
sys.exit(0 if ok else 1)
"""


ENTRY_NAME = "mux_entry.py"  # in lib/, beside the updater package
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

ENTRY_POINT = """\
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


def launcher_text(python: str) -> str:
    """The stand-in's launcher ``mux`` that runs ``python``, as :func:`build_standin` writes it."""
    return _LAUNCHER.format(python=shlex.quote(python))


def build_standin(
    out_dir: Path,
    *,
    version: str,
    protocol_version: int,
    repo: str,
    minisign_keys: Sequence[str],
    python: str = sys.executable,
    report_version: str | None = None,
    report_target: str | None = None,
    **options: Unpack[BuildOptions],
) -> Path:
    """A stand-in build in ``out_dir/mux-<target>/`` (returned): ``mux`` + ``lib/``.

    ``report_version``/``report_target`` bake a build info that disagrees with the declared
    version/target, to test that consumers catch a lying build. ``options``: the target, the
    trust settings and the pinned artifacts to ship under ``vendor/`` (module docstring).
    """
    unknown_options(options)
    target = resolve_target(options.get("target"))
    pins_path = options.get("pins_path")
    declared = make_build_info(
        version=version,
        protocol_version=protocol_version,
        target=target,
        repo=repo,
        minisign_keys=minisign_keys,
        policy_file=options.get("policy_file", POLICY_FILE),
        tuf_root=options.get("tuf_root"),
        tuf_metadata_url=options.get("tuf_metadata_url", ""),
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
    pinned = check_pinned_artifacts(pins_path, options.get("artifacts_dir"), target)
    folder = fresh_output_folder(out_dir, target)
    try:
        vendor_pinned_artifacts(pinned, folder)
        lib = folder / "lib"
        _copy_updater_package(lib / "updater")
        write_build_info(lib / "updater", baked)
        (lib / ENTRY_NAME).write_text(ENTRY_POINT, encoding="utf-8")
        launcher = folder / "mux"
        launcher.write_text(launcher_text(python), encoding="utf-8")
        launcher.chmod(0o755)
        write_bill(folder, pins_path)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder
