"""The standalone build: a PyInstaller one-folder mux that needs no Python on the user's
machine, and what it ships.

:func:`build_standalone` makes it for the running machine's target (PyInstaller does not
cross-compile), by the steps every build takes (:mod:`release.build.steps`): the build info is
checked and baked in, the pinned artifacts checked and vendored, the bill written last.
PyInstaller is a development dependency, run in its own process (:func:`pyinstaller_command`,
``release/mux.spec``) so nothing of it is imported here. The decisions about what the build
ships and runs at start-up are kept below, apart from the build steps (docs/build.md).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Unpack

from release.build.glibc import leave_out_system_libraries
from release.build.steps import (
    PACKAGE_DIR,
    BuildError,
    BuildOptions,
    check_pinned_artifacts,
    fresh_output_folder,
    make_build_info,
    unknown_options,
    vendor_pinned_artifacts,
    write_bill,
    write_build_info,
)
from release.checkout import RELEASE_DIR
from updater.config.buildinfo import POLICY_FILE
from updater.config.targets import detect_target
from updater.errors import UsageError

# Development tools in the build's environment; never shipped (see also NEVER_IMPORTED).
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
    python_options: Sequence[str] = (),
    **options: Unpack[BuildOptions],
) -> Path:
    """A PyInstaller one-folder build of ``mux`` in ``out_dir/mux-<target>/`` (returned).

    Only the running machine's target can be built (PyInstaller does not cross-compile).
    ``options``: the target, the trust settings and the pinned artifacts to ship under
    ``vendor/`` (module docstring), which are checked before PyInstaller runs. ``python_options``: for
    diagnostic builds only (:func:`pyinstaller_settings`).
    """
    unknown_options(options)
    host = detect_target()
    target = options.get("target") or host
    pins_path = options.get("pins_path")
    if target != host:
        raise UsageError(f"cannot build {target} on a {host} machine (no cross-compiling)")
    info = make_build_info(
        version=version,
        protocol_version=protocol_version,
        target=target,
        repo=repo,
        minisign_keys=minisign_keys,
        policy_file=options.get("policy_file", POLICY_FILE),
        tuf_root=options.get("tuf_root"),
        tuf_metadata_url=options.get("tuf_metadata_url", ""),
    )
    if importlib.util.find_spec("PyInstaller") is None:
        raise BuildError(
            "PyInstaller is not installed",
            hint="it is a development dependency: run `uv sync` and use `uv run mux-release`",
        )
    pinned = check_pinned_artifacts(pins_path, options.get("artifacts_dir"), target)
    folder = fresh_output_folder(out_dir, target)
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
        env = {**os.environ, **pyinstaller_environment()}
        result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
            raise BuildError(f"PyInstaller failed (exit {result.returncode}): {tail[0]}")
        built = scratch / "dist" / "mux"
        if not (built / "mux").is_file():
            raise BuildError("PyInstaller finished but produced no mux executable")
        if target.endswith("-linux-gnu"):
            # The system's own (libgcc_s), never the build machine's copy: release/build/glibc.py.
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
# Five decisions, each measured (bench/bench_standalone.py, docs/build.md) and each kept here,
# apart from the build steps above:
# * what is left out: modules the installed mux never imports (NEVER_IMPORTED);
# * what runs before mux's own code: PyInstaller's runtime hooks mux does not need;
# * how modules are stored: PyInstaller's archive or plain .pyc files (MODULE_ARCHIVE);
# * whether the archive's modules are compressed (ARCHIVE_COMPRESSION_LEVEL);
# * shared libraries stripped of their symbol tables.

SPEC_FILE = RELEASE_DIR / "mux.spec"

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

# The archive's modules are stored, not zlib-compressed: every start inflated each module it
# imported, 14 M of the 169 M instructions of a cached check (callgrind). Stored (zlib streams
# of stored blocks: a copy and an adler32 each), the cached check of a TUF build ran 156.5 M
# instructions instead of 166.1 M, 2.99x `python -c pass` instead of 3.28x (31 rounds);
# the executable grows from 5.8 MB to 14.2 MB, but the download shrinks (19.91 to 19.51 MiB:
# the release archive's gzip compresses stored modules better than already deflated ones).
# PyInstaller reads the level from its environment (PYINSTALLER_ZLIB_COMPRESSION_LEVEL, as
# its own CI sets it), for the module archive and the executable's archive alike.
ARCHIVE_COMPRESSION_LEVEL = 0

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


def pyinstaller_environment() -> dict[str, str]:
    """What PyInstaller's process gets besides the build machine's environment: a fixed hash
    seed (reproducible builds) and the archive's compression level."""
    return {
        "PYTHONHASHSEED": "0",
        "PYINSTALLER_ZLIB_COMPRESSION_LEVEL": str(ARCHIVE_COMPRESSION_LEVEL),
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
