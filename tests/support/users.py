"""Other users of this machine, for tests of what one user can do to another's server.

As root, a test runs a process as another uid with ``setpriv`` (util-linux): no account is
needed, only a uid that nobody uses. Tests skip with a reason where that is not possible.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import pytest

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
