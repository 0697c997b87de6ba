"""The operating system's word on the process behind a server's Unix socket.

A server that does not answer (hung, or not a mux at all) is still known by the process the
kernel names: the peer credentials of the connected socket (:func:`peer_pid`), else the
process holding the lock the server keeps beside its socket (:func:`socket_lock_holder`); and
which executable that process runs (:func:`process_executable`, Linux's ``/proc``). Who owns a
loopback TCP port is :mod:`updater.servers.owner`'s question.

On the fast path of ``mux update --check --max-age`` (:mod:`updater.servers.status`):
standard library only, ``struct`` and ``sys`` only once there is a socket to ask about.
"""

from __future__ import annotations

import os

from updater.locks import lock_holders
from updater.servers.runtime import SOCKET_LOCK_SUFFIX

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any


class Peer:
    """The process behind a connected Unix socket, filled in when the connection is made."""

    pid: int | None = None


def peer_pid(sock: Any) -> int | None:
    """The pid of the process at the other end of a connected Unix socket, as the kernel
    tells it (``SO_PEERCRED`` on Linux, ``LOCAL_PEERPID`` on macOS); None elsewhere.

    For a listening server this is the process that listened, even before it accepts: a
    hung server is still known by it.
    """
    import _socket  # the constants only (see _connect)

    # deferred: this module is on a fast path (docs/build.md)
    import struct
    import sys

    try:
        if hasattr(_socket, "SO_PEERCRED"):
            raw = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, struct.calcsize("3i"))
            pid = struct.unpack("3i", raw)[0]
        elif sys.platform == "darwin":
            sol_local, local_peerpid = 0, 0x002  # <sys/un.h>
            pid = struct.unpack("i", sock.getsockopt(sol_local, local_peerpid, 4))[0]
        else:
            return None
    except OSError:
        return None
    return pid if pid > 0 else None


def process_executable(pid: int) -> tuple[str, bool] | None:
    """The executable of process ``pid`` as the operating system names it, and whether it is
    still on disk; None when the OS does not say (no such process, another user's, no
    ``/proc``: on macOS a server's status line is what names its executable)."""
    # deferred: this module is on a fast path (docs/build.md)
    import sys

    if sys.platform.startswith("linux"):
        try:
            path = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            return None
        deleted = " (deleted)"
        if path.endswith(deleted) and not os.path.exists(path):
            return path.removesuffix(deleted), False
        return path, os.path.exists(path)
    return None


def socket_lock_holder(socket_path: str | Path) -> int | None:
    """The process holding the lock a server keeps beside its socket (``<socket>.lock``), as
    the OS says (Linux ``/proc/locks``); None when it does not say."""

    holders = lock_holders(f"{socket_path}{SOCKET_LOCK_SUFFIX}")
    return holders[0] if len(holders) == 1 else None
