"""File locks with a deadline, and who holds one (stdlib only: every mux process starts here).

mux's locks are ``flock``s: the kernel releases them when a process dies, whatever state it
was in. :func:`flock_within` takes one without blocking past a deadline; :func:`lock_holders`
names the processes that hold one, as Linux's ``/proc/locks`` says, and
:func:`held_by_other_users` whether they all run as another user: ``flock`` works on any
descriptor, a read-only one included, so a file another user can open is a lock they can
hold. mux creates its lock files private (0600, in 0700 folders) and never waits for a lock
only other users hold.
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (every mux starts here)
if TYPE_CHECKING:
    from collections.abc import Callable


def flock_within(
    fd: int,
    operation: int,
    *,
    wait: float,
    interval: float,
    unless: Callable[[int], bool] | None = None,
) -> bool:
    """``flock(fd, operation)`` without blocking, tried every ``interval`` seconds for at most
    ``wait``: True once taken, False when another holder kept it that long, or at once when
    ``unless(fd)`` says, the first time the lock is found held, that waiting is pointless
    (:func:`held_by_other_users`). Errors other than "held" are raised."""
    # deferred: this module is on a fast path (docs/build.md)
    import fcntl

    deadline = time.monotonic() + wait
    first = True
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if first and unless is not None and unless(fd):
                return False
            first = False
            if time.monotonic() >= deadline:
                return False
            time.sleep(interval)


def process_uid(pid: int) -> int | None:
    """The user a process runs as (its ``/proc`` entry's owner on Linux); None when unknown."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def held_by_other_users(target: int | str) -> bool:
    """Whether every process holding the lock on ``target`` runs as another user, neither
    this one nor root (as Linux's ``/proc/locks`` and ``/proc`` say; False when they do not
    say). Such a holder is no mux of this user's: none of this user's locks waits for it."""
    holders = lock_holders(target)
    me = os.geteuid()
    uids = [process_uid(pid) for pid in holders]
    return bool(uids) and all(uid is not None and uid not in (me, 0) for uid in uids)


def lock_holders(target: int | str) -> tuple[int, ...]:
    """The pids holding an ``flock`` on the file ``target`` (a descriptor or a path), as
    Linux's ``/proc/locks`` names them; empty elsewhere or when it cannot be read."""
    try:
        info = os.fstat(target) if isinstance(target, int) else os.stat(target)
        with open("/proc/locks", "rb") as stream:
            table = stream.read(1 << 20)
    except OSError:
        return ()
    wanted = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}".encode()
    pids = []
    for line in table.splitlines():
        # "1: FLOCK  ADVISORY  READ  1234 08:02:5678 0 EOF"; waiters read "1: -> FLOCK ...".
        fields = line.split()
        if len(fields) < 6 or fields[1] != b"FLOCK" or fields[5] != wanted:
            continue
        if fields[4].isdigit() and int(fields[4]) > 0:
            pids.append(int(fields[4]))
    return tuple(sorted(set(pids)))
