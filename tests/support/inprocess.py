"""``mux`` run inside the test's own process: :func:`run_in_process` takes the arguments and
the environment a real process would get and answers as :func:`tests.support.processes.run_mux`
does (exit code, stdout, stderr), through :func:`updater.cli.app.run`, which returns the exit
code and turns every failure into its one line.

A process costs about 0.3 s of CPU (most of it imports); here a command costs what it does.
Use it wherever the process is not what is tested: the exit codes, one-line errors, locks,
signals and sockets of a real process keep their real-process tests (``run_mux``).

The environment is the process's whole environment for the duration of the call (then put
back), standard input is empty, and stdout and stderr are captured as text.

:func:`run_installed` runs an *installed* stand-in build (``<bin>/mux``, a link into
``MUX_HOME/versions/<v>/``) the same way, with the process identity that build would have:
``sys.frozen``, ``sys.argv[0]`` the command run, the running package folder
(:func:`updater.config.buildfolder.running_package_folder`) in its version folder, so its
build info, its install and its version hold (:mod:`updater.install.inuse`) are that build's;
then it runs what ``updater.__main__.main`` runs (the hold, the fast paths, the CLI), without
the attestation's early start (a start-up optimisation) and without ``sys.exit``. It is the
checkout's code, so it only does so for a build that is an unmodified stand-in of this
checkout for this Python (:func:`unmodified_standin`), from the main thread, one call at a
time; otherwise it answers None and the caller starts the real process.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path

from release.build.standin import ENTRY_NAME, ENTRY_POINT, launcher_text
from release.build.steps import PACKAGE_DIR
from release.cli import run as release_run
from tests.support.standins import INTERPRETER, own_interpreter_launcher
from updater import __main__ as entry
from updater.cli.app import run
from updater.config import buildfolder, buildinfo
from updater.config.buildfolder import BUILD_INFO_NAME
from updater.install import inuse


@contextlib.contextmanager
def environment(env: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` is ``env`` inside, what it was after."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_in_process(args: list[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """``mux ARGS`` in this process, with ``env`` as its environment."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        environment(env),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
        _empty_stdin(),
    ):
        code = run(list(args))
    return subprocess.CompletedProcess(["mux", *args], code, stdout.getvalue(), stderr.getvalue())


def run_release_in_process(
    args: list[str], env: Mapping[str, str], *, cwd: Path | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """``mux-release ARGS`` in this process (:func:`release.cli.run`), with ``env`` as its
    environment, ``cwd`` as its working directory and ``stdin`` what it reads; answers as
    :func:`tests.support.processes.mux_release` does. A process of it costs about 0.9 s of
    CPU, most of it imports."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        environment(env),
        contextlib.chdir(cwd or Path.cwd()),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
        _stdin(stdin),
    ):
        code = release_run(list(args))
    return subprocess.CompletedProcess(
        ["mux-release", *args], code, stdout.getvalue(), stderr.getvalue()
    )


@contextlib.contextmanager
def _stdin(text: str) -> Iterator[None]:
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(text.encode()), encoding="utf-8")
    try:
        yield
    finally:
        sys.stdin = saved


@contextlib.contextmanager
def _empty_stdin() -> Iterator[None]:
    saved = sys.stdin
    sys.stdin = io.StringIO("")
    try:
        yield
    finally:
        sys.stdin = saved


def run_installed(
    mux: Path, args: list[str], env: Mapping[str, str]
) -> subprocess.CompletedProcess[str] | None:
    """``<mux> ARGS`` as the installed stand-in build ``mux`` links to would run it, in this
    process (module docstring); None when that cannot stand for the process: the build is not
    an unmodified stand-in of this checkout, or the call is not from the main thread, or
    another in-process run is under way."""
    if threading.current_thread() is not threading.main_thread():
        return None
    folder = unmodified_standin(mux)
    if folder is None or not _one_at_a_time.acquire(blocking=False):
        return None
    try:
        stdout, stderr = io.StringIO(), io.StringIO()
        with (
            _identity(mux, folder, args),
            environment(env),
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
            _empty_stdin(),
        ):
            code = _main(list(args))
    finally:
        _one_at_a_time.release()
    return subprocess.CompletedProcess(
        [str(mux), *args], code, stdout.getvalue(), stderr.getvalue()
    )


_one_at_a_time = threading.Lock()


def _main(args: list[str]) -> int:
    """``updater.__main__.main`` without the attestation's early start, returning the exit
    code a process would have: ``sys.exit``'s, or 1 and the traceback for an exception."""
    try:
        removed = inuse.hold_running_build()
        if removed is not None:
            print(f"mux: error: {removed}", file=sys.stderr)  # as __main__.main says it
            return 1
        code = entry._fast_path(args)
        return run(args) if code is None else code
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except Exception:
        traceback.print_exc()
        return 1


@contextlib.contextmanager
def _identity(mux: Path, folder: Path, args: list[str]) -> Iterator[None]:
    """This process is the build in ``folder`` (a version folder), run as ``mux``, inside."""
    missing = object()
    saved = (
        getattr(sys, "frozen", missing),
        sys.argv,
        buildfolder.running_package,
        buildinfo._cached,
        inuse._held,
    )
    sys.frozen = True  # type: ignore[attr-defined]
    sys.argv = [str(mux), *args]
    # What the build's entry point finds: its launcher's folder resolved (cd -P), lib/updater.
    buildfolder.running_package = str(folder / "lib" / "updater")
    buildinfo._cached = None
    inuse._held = None
    try:
        yield
    finally:
        if inuse._held is not None:  # the process's hold on its version ends with it
            os.close(inuse._held)
        frozen, sys.argv, buildfolder.running_package, buildinfo._cached, inuse._held = saved
        if frozen is missing:
            del sys.frozen  # type: ignore[attr-defined]
        else:
            sys.frozen = frozen  # type: ignore[attr-defined]


def unmodified_standin(mux: Path) -> Path | None:
    """The version folder ``mux`` runs (its link resolved) when that is a stand-in build of
    this checkout for this Python, unmodified: its launcher and entry point as written, and
    beside its build info exactly the checkout's ``updater`` modules (and their bytecode,
    which Python checks against them by hash). None otherwise."""
    folder = Path(os.path.realpath(mux)).parent
    try:
        launcher = (folder / "mux").read_text(encoding="utf-8")
        # A build with its own copy of the interpreter (tests.support.standins) runs the same
        # code: in this process, only the programs it starts (servers, its smoke test) need
        # that copy, and they are processes of its launcher either way.
        own = launcher == own_interpreter_launcher(launcher_text(sys.executable))
        if launcher != launcher_text(sys.executable) and not own:
            return None
        lib = folder / "lib"
        expected = [ENTRY_NAME, "updater", *([INTERPRETER.parts[1]] if own else [])]
        if sorted(os.listdir(lib)) != sorted(expected):
            return None
        if (lib / ENTRY_NAME).read_text(encoding="utf-8") != ENTRY_POINT:
            return None
        signature = _signature(lib / "updater")
    except (OSError, UnicodeDecodeError):
        return None
    verdict = _verdicts.get(signature)
    if verdict is None:
        verdict = _verdicts[signature] = _same_modules(lib / "updater", _checkout_modules())
    return folder if verdict else None


# Each package copy's verdict, by what a change to it would change (every file's path, size,
# time and inode), so that it is read and hashed once per build folder.
_verdicts: dict[tuple[tuple[str, int, int, int], ...], bool] = {}
_checkout: dict[str, str] = {}


def _signature(package: Path) -> tuple[tuple[str, int, int, int], ...]:
    found = []
    for dirpath, dirnames, filenames in os.walk(package):
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(Path(dirpath, d))]):
            path = Path(dirpath, name)
            info = path.lstat()
            found.append((str(path), info.st_size, info.st_mtime_ns, info.st_ino))
    return tuple(found)


def _checkout_modules() -> dict[str, str]:
    """The checkout's ``updater`` modules, by path inside the package, with their digests."""
    if not _checkout:
        for path in PACKAGE_DIR.rglob("*.py"):
            relative = path.relative_to(PACKAGE_DIR).as_posix()
            _checkout[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    return _checkout


def _same_modules(package: Path, modules: Mapping[str, str]) -> bool:
    """``package`` holds the modules ``modules`` lists and their checked-hash bytecode, its
    build info, and nothing else (no link, no other file)."""
    seen: dict[str, str] = {}
    for path in package.rglob("*"):
        relative = path.relative_to(package).as_posix()
        if path.is_symlink():
            return False
        if path.is_dir() or relative == BUILD_INFO_NAME:
            continue
        if path.suffix == ".py":
            seen[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif not _checked_bytecode(path):
            return False
    return seen == dict(modules)


_CHECKED_HASH = 0b11  # PEP 552: hash-based, checked against the source


def _checked_bytecode(path: Path) -> bool:
    if path.parent.name != "__pycache__" or path.suffix != ".pyc":
        return False
    with path.open("rb") as stream:
        header = stream.read(8)
    return len(header) == 8 and int.from_bytes(header[4:8], "little") == _CHECKED_HASH
