"""Notice within a second when ``mux update`` moves the mux link (inside a server), or when
a file the server follows changes (the user's update state).

A poll of ``readlink`` every second (``MUX_LINK_POLL``): one system call, and the only way a
released build has (inotify and kqueue would need ctypes, which the build leaves out: it costs every start of
every mux, docs/build.md). The callback runs in this watcher's own thread, only when the
link's target changed.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

POLL_SECONDS = 1.0


def _read_link(link: Path) -> str | None:
    try:
        return os.readlink(link)
    except OSError:
        return None


class LinkWatch:
    """Call ``on_change(target)`` in a thread of its own whenever ``link`` points elsewhere
    (or, with ``read``, whenever what ``read(link)`` says of that path changes: the user's
    state file, by its inode, size and time)."""

    def __init__(
        self,
        link: Path,
        on_change: Callable[[Any], None],
        *,
        read: Callable[[Path], Any] = _read_link,
        interval: float = POLL_SECONDS,
    ) -> None:
        self.link = link
        self._interval = interval
        self._on_change = on_change
        self._read = read
        self._last = read(link)
        self._wake_read, self._wake_write = os.pipe()
        self._thread = threading.Thread(target=self._run, name="mux-link-watch", daemon=True)
        self._stopped = False

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
        target = self._read(self.link)
        if target != self._last:
            self._last = target
            self._on_change(target)

    def _run(self) -> None:
        self._check()  # a move between the first read and the thread starting
        while not self._stopped:
            select.select([self._wake_read], [], [], self._interval)  # the poll, or stop()
            if self._stopped:
                return
            try:
                self._check()
            except Exception as exc:  # a broken callback must not end the watch
                print(f"link watch: {exc.__class__.__name__}: {exc}", file=sys.stderr)
