"""File locks with a deadline, and who holds one (stdlib only: every mux process starts here).

mux's locks are ``flock``s: the kernel releases them when a process dies, whatever state it
was in. :func:`flock_within` takes one without blocking past a deadline; :func:`lock_holders`
names the processes that hold one, as Linux's ``/proc/locks`` says.
"""

from __future__ import annotations

import os
import time


def flock_within(fd: int, operation: int, *, wait: float, interval: float) -> bool:
    """``flock(fd, operation)`` without blocking, tried every ``interval`` seconds for at most
    ``wait``: True once taken, False when another holder kept it that long. Errors other than
    "held" are raised."""
    # deferred: this module is on a fast path (docs/build.md)
    import fcntl

    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(interval)


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
