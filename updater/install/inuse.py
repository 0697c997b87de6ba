"""Which installed versions are in use: every mux process holds a lock on its own version.

A mux that runs from ``MUX_HOME/versions/<version>/`` takes a shared ``flock`` on that
folder's ``.mux-files`` (the file list install.sh and mux write into every installed version)
as the first thing it does, and holds it for its whole life (:func:`hold_running_build`,
called by :mod:`updater.__main__`). The kernel keeps the lock whatever the process does:
hung, stopped, its socket somewhere mux does not look, its listen queue full. It lets go
only when the process is gone. The descriptor is close-on-exec: what a mux process runs that
is not mux (a shell in a session) never keeps a version alive; a mux it runs takes its own.

Removing a version (:mod:`updater.install.transaction`) first takes an exclusive, non-blocking lock on
the same file and keeps it until the folder is renamed away (:func:`try_exclusive`); a
version whose lock is held stays. Who holds it is read from ``/proc/locks`` on Linux
(:func:`updater.locks.lock_holders`); elsewhere the version stays without a pid to name.

Races, and what holds:

* A mux starting from a version while that version is being removed either gets its shared
  lock first (the version stays), or finds the folder gone once the remover let go (the
  file it locked is no longer the one at its path, or there is none): it stops at once with
  one line, before it runs anything from a folder that is being deleted.
* A remover killed while it holds the exclusive lock: the kernel releases the lock; the
  folder is either still in place (whole) or already renamed to ``versions/.trash-*``,
  which no process can start from and the next run deletes.
* Builds that take no lock (protocol 1, from before this rule) are found as before, by their
  sockets, and on Linux by scanning ``/proc/*/exe`` (:func:`processes_running_from`).

Stdlib only, and only ``fcntl`` beyond what every path loads: this runs first in every mux
process, ``mux version`` included.
"""

from __future__ import annotations

import os
import stat
import sys

from updater.config.buildfolder import running_build_folder, running_build_info
from updater.locks import flock_within, held_by_other_users, lock_holders

HOLD_FILE = ".mux-files"  # the contract's file list: every installed version has one
# A remover holds the exclusive lock only while it renames the folder away; a starting mux
# that finds it held waits this long at most, then runs without a hold. It does not wait at
# all when only other users' processes hold it: no remover of this user's, and a file list
# mux writes is 0600, so only a descriptor opened before (an older mux's 0644 list) can.
START_WAIT = 5.0
# Opened without blocking (a FIFO planted there must not hang every start), never a link.
_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW

_held: int | None = None  # this process's shared lock, kept open for its whole life


def hold_running_build() -> str | None:
    """Take the shared lock on this process's version for its whole life.

    Returns None when the lock is held, or when there is nothing to hold (a development
    checkout, a build that is not installed, a file system without locks). Returns the reason
    when this build was removed while the process started: the caller stops.
    """
    global _held
    folder = running_build_folder()
    if folder is None or _held is not None:
        return None
    path = os.path.join(folder, HOLD_FILE)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        if os.path.exists(running_build_info()):
            return None  # a build folder that is not an installed version (a smoke test)
        return _removed(folder)
    except OSError:
        return None
    # deferred: this module is on a fast path (docs/build.md)
    import fcntl

    try:
        taken = _is_regular(fd) and flock_within(
            fd, fcntl.LOCK_SH, wait=START_WAIT, interval=0.01, unless=held_by_other_users
        )
    except OSError:
        taken = False
    if not taken:
        os.close(fd)
        return None
    if not _same_file(fd, path):
        os.close(fd)
        return _removed(folder)
    _held = fd
    return None


def _is_regular(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


def _removed(folder: str) -> str:
    return f"{folder} was removed while this mux started (an update pruned it); run mux again"


def _same_file(fd: int, path: str) -> bool:
    try:
        held, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)


def hold_version(folder: str | os.PathLike[str] | None) -> VersionHold:
    """:class:`VersionHold` on the version in ``folder``, for a ``with`` block."""
    return VersionHold(folder)


class VersionHold:
    """A shared hold on the version in ``folder`` for the ``with`` block: what a process that
    runs no mux from it takes to keep it (``mux server restart``, between stopping a server
    and starting it again). Nothing to hold (no folder, not an installed version, a file
    system without locks) holds nothing."""

    def __init__(self, folder: str | os.PathLike[str] | None) -> None:
        self._fd: int | None = None
        if folder is None:
            return
        try:
            fd = os.open(os.path.join(folder, HOLD_FILE), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        # deferred: this module is on a fast path (docs/build.md)
        import fcntl

        try:
            taken = flock_within(fd, fcntl.LOCK_SH, wait=START_WAIT, interval=0.01)
        except OSError:
            taken = False
        if taken:
            self._fd = fd
        else:
            os.close(fd)

    def __enter__(self) -> VersionHold:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# -- the remover's side ------------------------------------------------------------------------


class Exclusive:
    """The exclusive lock on one version folder, or why it could not be taken.

    ``acquired``: nobody holds the version (or it has no file list to lock); keep this object
    open until the folder is renamed away, then :meth:`close` it. Otherwise ``holders`` are
    the pids the operating system names (empty when it does not say).
    """

    def __init__(self, fd: int | None, acquired: bool, holders: tuple[int, ...] = ()) -> None:
        self._fd = fd
        self.acquired = acquired
        self.holders = holders

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Exclusive:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def try_exclusive(folder: str | os.PathLike[str]) -> Exclusive:
    """Take the exclusive lock of the version in ``folder`` without waiting.

    A folder without a file list cannot be locked by anyone: it counts as free here, and the
    caller's other evidence (servers, processes) decides.
    """
    # deferred: this module is on a fast path (docs/build.md)
    import fcntl

    path = os.path.join(folder, HOLD_FILE)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return Exclusive(None, True)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holders = lock_holders(fd)
        os.close(fd)
        return Exclusive(None, False, holders)
    except OSError:
        os.close(fd)
        return Exclusive(None, True)
    return Exclusive(fd, True)


# -- processes that take no lock ---------------------------------------------------------------


def processes_running_from(versions_dir: str | os.PathLike[str]) -> dict[str, tuple[int, ...]]:
    """On Linux, the processes whose program lies in a version folder below ``versions_dir``
    (``/proc/<pid>/exe``; only this user's processes can be read), by version; an empty
    mapping elsewhere. What places builds that take no lock: a one-folder build's program is
    in its folder."""
    if not sys.platform.startswith("linux"):
        return {}
    prefix = os.path.realpath(versions_dir) + os.sep
    found: dict[str, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    me = os.getpid()
    for name in entries:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            program = os.readlink(f"/proc/{name}/exe")
        except OSError:
            continue
        if not program.startswith(prefix):
            continue
        version = program[len(prefix) :].split(os.sep, 1)[0]
        if version and not version.startswith(".") and ".partial-" not in version:
            found.setdefault(version, []).append(int(name))
    return {version: tuple(sorted(pids)) for version, pids in found.items()}
