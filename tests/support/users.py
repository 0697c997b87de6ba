"""Other users of this machine, for tests of what one user can do to another's server,
locks and files.

As root, a test runs a process as another uid with ``setpriv`` (util-linux): no account is
needed, only a uid that nobody uses. Tests skip with a reason where that is not possible
(not root, no ``setpriv``, no interpreter the other uid may run). A folder under ``/tmp``
that everyone may traverse stands in for a home folder others can look into (mode 0755, as
many are).
"""

from __future__ import annotations

import atexit
import functools
import os
import select
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.environment import user_dirs

OWNER_UID = 1500  # a user whose server is attacked
OTHER_UID = 1501  # the other user of the machine


@functools.cache
def why_no_other_user() -> str | None:
    """Why this process cannot act as another user (None: it can)."""
    if not sys.platform.startswith("linux"):
        return "acting as another user is tested on Linux (setpriv)"
    if os.geteuid() != 0:
        return "acting as another user needs root (setpriv --reuid)"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    probe = subprocess.run(
        [*as_user(OTHER_UID), sys.executable, "-c", "import updater"],
        capture_output=True,
        cwd="/",
        timeout=60,
        check=False,
    )
    if probe.returncode != 0:
        return f"another user cannot run this checkout's python: {probe.stderr[-300:]!r}"
    return None


@pytest.fixture
def other_users() -> None:
    """Skip the test, saying why, where this process cannot act as other users."""
    reason = why_no_other_user()
    if reason is not None:
        pytest.skip(reason)


def as_user(uid: int) -> list[str]:
    """The command prefix that runs what follows as ``uid`` (and its own group, no others)."""
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


def other_user_prefix() -> list[str]:
    """The command prefix that runs a command as :data:`OTHER_UID`; skips the test, saying
    why, when this process cannot do that."""
    reason = why_no_other_user()
    if reason is not None:
        pytest.skip(reason)
    return [*as_user(OTHER_UID), "--"]


_made: list[Path] = []


@atexit.register
def _remove_made() -> None:
    for path in _made:
        shutil.rmtree(path, ignore_errors=True)


def private_dir(uid: int, prefix: str) -> Path:
    """A new 0700 folder under /tmp owned by ``uid`` (short: it may hold sockets); removed
    when the tests end."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    _made.append(path)
    os.chown(path, uid, uid)
    path.chmod(0o700)
    return path


def user_env(uid: int, base: Mapping[str, str]) -> dict[str, str]:
    """An environment for a mux process of ``uid``: its own HOME and runtime dir."""
    home = private_dir(uid, f"mux-home-{uid}-")
    runtime = private_dir(uid, f"mux-run-{uid}-")
    env = {
        key: value
        for key, value in base.items()
        if not key.startswith(("XDG_", "MUX_")) and key not in ("HOME", "PYTHONPATH")
    }
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(runtime), MUX_UPDATE_CHECK_INTERVAL="0")
    env.update(XDG_CACHE_HOME=str(home / "cache"), XDG_STATE_HOME=str(home / "state"))
    return env


def run_as(
    uid: int, args: list[str], env: Mapping[str, str], *, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``args`` as ``uid`` from ``/`` and wait for it."""
    return subprocess.run(
        [*as_user(uid), *args],
        env=dict(env),
        cwd="/",
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def mux_as(
    uid: int, args: list[str], env: Mapping[str, str], *, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``mux ARGS`` (this checkout's) as ``uid``."""
    return run_as(uid, [sys.executable, "-m", "updater", *args], env, timeout=timeout)


# Open the path read-only (flock works on any descriptor), then take the lock without
# waiting; say "held" or "refused <errno>", then keep it until standard input closes.
_HOLDER = """
import fcntl, os, sys
path, kind = sys.argv[1], sys.argv[2]
try:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB if kind == "ex" else fcntl.LOCK_SH | fcntl.LOCK_NB)
except OSError as exc:
    print("refused", exc.errno, flush=True)
    sys.exit(0)
print("held", os.getpid(), flush=True)
sys.stdin.read()
"""


class Holder:
    """A process holding (or refused) a lock; ``held`` says which, ``pid`` whose."""

    def __init__(self, process: subprocess.Popen[str], first_line: str) -> None:
        self.process = process
        words = first_line.split()
        self.held = bool(words) and words[0] == "held"
        self.pid = int(words[1]) if self.held else None
        self.answer = first_line.strip()


@contextmanager
def holding(path: Path, *, as_other_user: bool, kind: str = "ex") -> Iterator[Holder]:
    """A process that opens ``path`` read-only and takes its ``flock`` (``ex`` or ``sh``),
    as the second user or as this one; kept until the block ends."""
    prefix = other_user_prefix() if as_other_user else []
    process = subprocess.Popen(
        [*prefix, sys.executable, "-c", _HOLDER, str(path), kind],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], 30)
        assert ready, "the lock holder said nothing within 30 s"
        yield Holder(process, process.stdout.readline())
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=30)


@contextmanager
def traversable_folder(prefix: str = "mux-local-") -> Iterator[Path]:
    """A fresh folder under /tmp that every user may traverse (0755), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        folder.chmod(0o755)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def open_sandbox(base: Path, env: dict[str, str]) -> dict[str, str]:
    """``env`` with HOME and the XDG data, cache and state folders under ``base``, each
    made as a lax system makes them (0755), so that only the modes mux chooses decide."""
    home = base / "home"
    dirs = user_dirs(home)
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o755)
    for parent in (home / ".local",):
        parent.chmod(0o755)
    return {**env, **{k: str(v) for k, v in dirs.items()}}
