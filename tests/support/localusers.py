"""Another local user, for the tests of what the users of one machine can do to each other.

A test running as root acts as a second user (``nobody``) with ``setpriv``: the process that
tries to open, and lock, a file or folder mux made for this user. Where that is not possible
(not root, no ``setpriv``, no interpreter the second user may run) the test is skipped with
the reason. A folder under ``/tmp`` that everyone may traverse stands in for a home folder
others can look into (mode 0755, as many are).
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

OTHER_UID = 65534  # nobody
# The stdlib interpreter of the system: the second user cannot run the test's (under /root).
SYSTEM_PYTHON = "/usr/bin/python3"

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


def other_user_prefix() -> list[str]:
    """The command prefix that runs a command as the second user; skips the test when this
    process cannot do that."""
    if os.geteuid() != 0:
        pytest.skip("acting as a second local user needs root (setpriv)")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"{SYSTEM_PYTHON} is not there for the second user to run")
    return ["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups", "--"]


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
    python = SYSTEM_PYTHON if as_other_user else shutil.which("python3") or SYSTEM_PYTHON
    process = subprocess.Popen(
        [*prefix, python, "-c", _HOLDER, str(path), kind],
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
    import tempfile

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
    dirs = {
        "HOME": home,
        "XDG_CACHE_HOME": home / ".cache",
        "XDG_DATA_HOME": home / ".local" / "share",
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_STATE_HOME": home / ".local" / "state",
    }
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o755)
    for parent in (home / ".local",):
        parent.chmod(0o755)
    return {**env, **{k: str(v) for k, v in dirs.items()}}
