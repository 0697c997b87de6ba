"""A server's log: what an operator needs, one line each, bounded in size.

Every line is stamped, escaped (:func:`updater.text.safe_text`: nothing a client or a server
field holds reaches a terminal that shows the log raw) and cut at :data:`MAX_LINE`
characters. What a client can make happen as often as it likes (a refused request, a
connection that was too slow or too large) goes through :meth:`ServerLog.noisy`: the first
one is logged, and then one line a minute at most says how many more there were. Requests
that are answered are not logged, nor are watchers that come and go.

When the log is a regular file (``mux server start`` writes it next to the socket) it never
grows past its limit (:data:`LOG_LIMIT`): reaching it, the log keeps its first lines (the
server's start: version, address, pid, build) and the newest quarter, and says how much was
dropped between them (a log opened write-only keeps only its first lines). Writing it never
fails the server.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable

from updater.text import safe_text
from updater.timestamps import rfc3339

LOG_LIMIT = 1 << 20  # bytes of log file, at most
MAX_LINE = 1000  # characters of one message, at most
NOISY_INTERVAL = 60.0  # seconds between two lines of one noisy kind


class _Noisy:
    """One noisy kind: when it was last logged, how many came since, the last one's words."""

    __slots__ = ("count", "message", "since")

    def __init__(self, since: float, message: str) -> None:
        self.since = since
        self.count = 0
        self.message = message


def _with_count(message: str, count: int) -> str:
    return f"{message} ({count} more like it since the last such line)" if count else message


class ServerLog:
    """Lines to the descriptor ``fd`` (the server's stderr), bounded; callable with a message."""

    def __init__(
        self,
        fd: int = 2,
        *,
        limit: int = LOG_LIMIT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fd = fd
        self._limit = max(limit, 1024)
        self._clock = clock
        self._lock = threading.Lock()
        self._keep = 0  # the first bytes, kept when the log is trimmed (keep_head)
        self._noisy: dict[str, _Noisy] = {}
        try:
            self._regular = stat.S_ISREG(os.fstat(fd).st_mode)
        except OSError:
            self._regular = False

    def __call__(self, message: str) -> None:
        text = safe_text(message)
        if len(text) > MAX_LINE:
            text = text[:MAX_LINE] + "…"
        self._write(f"{rfc3339()} {text}\n".encode(errors="replace"))

    def noisy(self, kind: str, message: str) -> None:
        """``message`` for a thing a client can cause at will: logged at once the first
        time, then at most once every :data:`NOISY_INTERVAL` seconds per ``kind``, with the
        count of those not logged."""
        now = self._clock()
        with self._lock:
            seen = self._noisy.get(kind)
            if seen is not None and now - seen.since < NOISY_INTERVAL:
                seen.count += 1
                seen.message = message
                return
            skipped = seen.count if seen is not None else 0
            self._noisy[kind] = _Noisy(now, message)
        self(_with_count(message, skipped))

    def flush(self) -> None:
        """Log the counts that no line has told yet (when the server stops)."""
        with self._lock:
            untold = [(seen.message, seen.count) for seen in self._noisy.values() if seen.count]
            for seen in self._noisy.values():
                seen.count = 0
        for message, count in untold:
            self(_with_count(message, count))

    def keep_head(self) -> None:
        """What was written so far stays at the top of the log, whatever is trimmed later."""
        with self._lock:
            if self._regular:
                try:
                    self._keep = os.fstat(self._fd).st_size
                except OSError:
                    self._keep = 0

    def _write(self, data: bytes) -> None:
        with self._lock:
            try:
                if self._regular:
                    size = os.fstat(self._fd).st_size
                    if size + len(data) > self._limit:
                        try:
                            self._trim(size)
                        except OSError:  # cannot be trimmed (another's file?): written on
                            self._regular = False
                while data:
                    data = data[os.write(self._fd, data) :]
            except OSError:
                pass  # a full disk or a closed log must not stop the server

    def _trim(self, size: int) -> None:
        """Keep the head and the newest quarter of the limit, starting at a line."""
        head = min(self._keep, self._limit // 2, size)
        tail_from = max(head, size - self._limit // 4)
        try:
            tail = os.pread(self._fd, size - tail_from, tail_from)
        except OSError:  # opened write-only (by whoever started the server): no tail kept
            tail = b""
        if tail_from > head:
            newline = tail.find(b"\n")
            tail = tail[newline + 1 :] if newline >= 0 else b""
        dropped = size - head - len(tail)
        marker = (
            f"{rfc3339()} (the log reached {self._limit} bytes: {dropped} bytes of older "
            "lines were dropped here)\n"
        ).encode()
        os.ftruncate(self._fd, head)
        os.lseek(self._fd, head, os.SEEK_SET)
        data = marker + tail
        while data:
            data = data[os.write(self._fd, data) :]
