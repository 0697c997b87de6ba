"""Notice within a second or two when ``mux update`` moves the mux link (inside a server).

Linux: inotify on the bin dir (through ctypes: no third-party module), with a slow poll as a
safety net (a bin dir that appears later, an inotify limit reached). Elsewhere: a poll of
``readlink`` every second, which costs a system call. Either way the callback runs in this
watcher's own thread, only when the link's target changed.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import threading
from collections.abc import Callable
from pathlib import Path

POLL_SECONDS = 1.0  # without inotify
SAFETY_POLL_SECONDS = 30.0  # with inotify: catches what it cannot see (the dir appearing)

_IN_ATTRIB = 0x004
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_ONLYDIR = 0x01000000
_WATCH_MASK = (
    _IN_ATTRIB
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
    | _IN_ONLYDIR
)


def _read_link(link: Path) -> str | None:
    try:
        return os.readlink(link)
    except OSError:
        return None


class _Inotify:
    """One inotify descriptor watching one directory (Linux, through libc)."""

    def __init__(self, directory: Path) -> None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.fd = fd
        self._libc = libc
        self._directory = directory
        self.watching = False
        self.rewatch()

    def rewatch(self) -> None:
        """(Re)watch the directory; false when it does not exist (yet)."""
        if self.watching:
            return
        result = self._libc.inotify_add_watch(self.fd, os.fsencode(self._directory), _WATCH_MASK)
        self.watching = result >= 0

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while os.read(self.fd, 65536):
                pass
        # IN_DELETE_SELF / IN_MOVE_SELF end the watch: start over on the next poll.
        self.watching = self._directory.is_dir() and self.watching

    def close(self) -> None:
        os.close(self.fd)


class LinkWatch:
    """Call ``on_change(target)`` in a thread of its own whenever ``link`` points elsewhere."""

    def __init__(
        self, link: Path, on_change: Callable[[str | None], None], *, inotify: bool = True
    ) -> None:
        self.link = link
        self._use_inotify = inotify
        self._on_change = on_change
        self._last = _read_link(link)
        self._wake_read, self._wake_write = os.pipe()
        self._thread = threading.Thread(target=self._run, name="mux-link-watch", daemon=True)
        self._stopped = False
        self.mode = "poll"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped = True
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"\0")
        self._thread.join(2.0)
        for fd in (self._wake_read, self._wake_write):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _check(self) -> None:
        target = _read_link(self.link)
        if target != self._last:
            self._last = target
            self._on_change(target)

    def _run(self) -> None:
        inotify: _Inotify | None = None
        if self._use_inotify and sys.platform.startswith("linux"):
            try:
                inotify = _Inotify(self.link.parent)
                self.mode = "inotify"
            except (OSError, AttributeError, ImportError):
                # ImportError: the released build ships no ctypes (release/build.py), so its
                # servers poll, as they do where there is no inotify.
                inotify = None
        try:
            self._check()  # a move between the first read and the watch being in place
            while not self._stopped:
                watched = inotify is not None and inotify.watching
                timeout = SAFETY_POLL_SECONDS if watched else POLL_SECONDS
                descriptors = [self._wake_read] + ([inotify.fd] if inotify else [])
                ready, _, _ = select.select(descriptors, [], [], timeout)
                if self._stopped:
                    return
                if inotify is not None:
                    if inotify.fd in ready:
                        inotify.drain()
                    inotify.rewatch()
                try:
                    self._check()
                except Exception as exc:  # a broken callback must not end the watch
                    print(f"link watch: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        finally:
            if inotify is not None:
                inotify.close()
