"""``mux server watch``, the server side: the hub that streams events to every watcher.

A :class:`WatchHub`: every watcher (one connection to ``GET /api/watch``)
gets its own bounded queue and its own thread, so a watcher that stops reading never stalls
the server or the others. Publishing never blocks: a watcher whose queue is full is dropped,
and its thread ends the stream with a last line saying why (once the reader takes what is
already in flight, or after a grace period). A reader that hangs up frees its place at once
(one thread of the hub waits on every idle connection). An idle stream sends a ``heartbeat``
line every :data:`HEARTBEAT` seconds (a type readers skip), so a client can tell a quiet
server from a hung one. When the server stops, every stream ends with a ``server-stopping``
line.

The client side (:func:`open_watch`, :class:`WatchStream`) reads the stream: the first line,
then each event as it comes (heartbeats are consumed, not passed on), bounded in size and in
silence (:data:`READ_TIMEOUT`). ``mux server watch`` prints them re-encoded, so nothing a
server sends reaches a terminal unescaped."""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from updater.protocol import WatchEvent
from updater.servers.watch import (
    EVENT_HEARTBEAT,
    EVENT_SERVER_STOPPING,
    EVENT_WATCH_DROPPED,
    HEARTBEAT,
)

MAX_WATCHERS = 256  # more connections than that are refused (HTTP 503)
QUEUE_LIMIT = 64  # lines waiting for one watcher; one more and it is dropped
SEND_BUFFER = 16 * 1024  # the kernel's share of a watcher's backlog (SO_SNDBUF)
WRITE_TIMEOUT = 30.0  # a send that makes no progress for this long drops the watcher
CLOSE_GRACE = 1.0  # how long a stopping server waits for its streams' last lines


def encode(doc: dict[str, Any]) -> bytes:
    """One line of the stream (ASCII JSON, so a terminal never gets a raw control byte)."""
    return json.dumps(doc, sort_keys=True).encode() + b"\n"


class Watcher:
    """One connection's queue (guarded by the hub's lock)."""

    def __init__(self) -> None:
        self.lines: deque[bytes] = deque()
        self.final: bytes | None = None  # the last line: dropped, or the server is stopping
        self.gone = False  # the reader hung up: the stream ends without another line


class _HangUps:
    """One thread that waits on the connections of every watcher, so that a reader hanging up
    ends its stream (and frees its place) at once, whatever the stream is waiting for.

    A watcher sends nothing after its request; whatever it does send is read and dropped.
    """

    def __init__(self, on_gone: Callable[[Watcher], None]) -> None:

        self._on_gone = on_gone
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._wake_read, self._wake_write = socket.socketpair()
        self._selector.register(self._wake_read, selectors.EVENT_READ, None)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="mux-watch-hangups", daemon=True)
        self._thread.start()

    def add(self, connection: socket.socket, watcher: Watcher) -> None:

        with self._lock:
            if not self._closed:
                self._selector.register(connection, selectors.EVENT_READ, watcher)

    def remove(self, connection: socket.socket) -> None:
        """Stop waiting on ``connection`` (before it is closed: its number may be reused)."""
        with self._lock, contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(connection)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        with contextlib.suppress(OSError):
            self._wake_write.send(b"\0")
        self._thread.join(1.0)

    def _run(self) -> None:
        try:
            while True:
                for key, _events in self._selector.select():
                    if key.data is None:
                        return  # woken by close()
                    self._check(key.fileobj, key.data)  # type: ignore[arg-type]
        finally:
            with self._lock:
                self._selector.close()
            self._wake_read.close()
            self._wake_write.close()

    def _check(self, connection: socket.socket, watcher: Watcher) -> None:
        try:
            data = connection.recv(4096, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.remove(connection)
            self._on_gone(watcher)


class WatchHub:
    """The watchers of one server and the events still in force."""

    def __init__(self, *, max_watchers: int = MAX_WATCHERS, queue_limit: int = QUEUE_LIMIT):
        self._changed = threading.Condition(threading.Lock())
        self._watchers: set[Watcher] = set()
        self._in_force: dict[str, WatchEvent] = {}  # by type, in the order they happened
        self._stopping: bytes | None = None
        self._max_watchers = max_watchers
        self._queue_limit = queue_limit
        self._streams: set[threading.Thread] = set()
        self._hangups: _HangUps | None = None  # started with the first watcher

    # -- events --------------------------------------------------------------------------

    def publish(self, event: WatchEvent, *, in_force: bool = True) -> None:
        """Send ``event`` to every watcher, now; never blocks on any of them.

        ``in_force``: a watcher that connects later gets it too (until :meth:`retract`).
        """
        with self._changed:
            self._publish(event, in_force=in_force)

    def replace(
        self, types: Iterable[str], events: Iterable[WatchEvent], *, in_force: bool = True
    ) -> None:
        """``events`` are now the whole truth about ``types``: what was in force of those
        types is withdrawn, then each event is sent (and in force, unless ``in_force`` is
        False). One step: a watcher that connects meanwhile sees the old set or the new one."""
        with self._changed:
            for event_type in types:
                self._in_force.pop(event_type, None)
            for event in events:
                self._publish(event, in_force=in_force)

    def _publish(self, event: WatchEvent, *, in_force: bool) -> None:
        line = encode(event.to_json())
        if self._stopping is not None:
            return
        if in_force:
            self._in_force.pop(event.type, None)
            self._in_force[event.type] = event
        for watcher in self._watchers:
            if watcher.final is not None or watcher.gone:
                continue
            if len(watcher.lines) >= self._queue_limit:
                watcher.lines.clear()
                watcher.final = encode(
                    {
                        "type": EVENT_WATCH_DROPPED,
                        "data": {
                            "reason": f"this watcher fell behind: {self._queue_limit} events "
                            "were waiting for it; reconnect to get the events in force"
                        },
                    }
                )
            else:
                watcher.lines.append(line)
        self._changed.notify_all()

    def retract(self, event_type: str) -> None:
        """``event_type`` is no longer in force (later watchers do not get it)."""
        with self._changed:
            self._in_force.pop(event_type, None)

    def in_force(self) -> list[WatchEvent]:
        with self._changed:
            return list(self._in_force.values())

    def close(self, reason: str) -> None:
        """The server stops: every stream ends with a ``server-stopping`` line.

        Waits at most :data:`CLOSE_GRACE` for the streams to write it, never longer.
        """
        final = encode({"type": EVENT_SERVER_STOPPING, "data": {"reason": reason}})
        with self._changed:
            self._stopping = final
            for watcher in self._watchers:
                if watcher.final is None:
                    watcher.final = final
            self._changed.notify_all()
            streams = list(self._streams)
            hangups, self._hangups = self._hangups, None
        deadline = time.monotonic() + CLOSE_GRACE
        for thread in streams:
            thread.join(max(0.0, deadline - time.monotonic()))
        if hangups is not None:
            hangups.close()

    def _gone(self, watcher: Watcher) -> None:
        with self._changed:
            watcher.gone = True
            self._changed.notify_all()

    @property
    def watcher_count(self) -> int:
        with self._changed:
            return len(self._watchers)

    # -- one stream ----------------------------------------------------------------------

    def serve(
        self,
        connection: socket.socket,
        begin: Callable[[bool], None],
        first_line: dict[str, Any],
    ) -> None:
        """Run one watcher's stream on ``connection`` until it ends (in its handler thread).

        ``begin(accepted)`` writes the HTTP head: 200, or 503 when there are too many
        watchers or the server is stopping (then nothing else is written).
        """
        watcher = Watcher()
        with self._changed:
            accepted = self._stopping is None and len(self._watchers) < self._max_watchers
            if accepted:
                self._watchers.add(watcher)
                self._streams.add(threading.current_thread())
                watcher.lines.append(encode(first_line))
                watcher.lines.extend(encode(event.to_json()) for event in self._in_force.values())
                if self._hangups is None:
                    self._hangups = _HangUps(self._gone)
                hangups = self._hangups
        begin(accepted)
        if not accepted:
            return
        try:
            with contextlib.suppress(OSError):
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
            connection.settimeout(WRITE_TIMEOUT)
            hangups.add(connection, watcher)
            self._stream(connection, watcher)
        finally:
            hangups.remove(connection)
            with self._changed:
                self._watchers.discard(watcher)
                self._streams.discard(threading.current_thread())

    def _next(self, watcher: Watcher) -> tuple[list[bytes], bytes | None]:
        """What to send next: queued lines, the last line, or (after :data:`HEARTBEAT`
        seconds of nothing) a heartbeat. An empty list and no last line: the reader is gone."""
        with self._changed:
            deadline = time.monotonic() + HEARTBEAT
            while not watcher.lines and watcher.final is None and not watcher.gone:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)  # woken for other watchers too: wait again
            if watcher.gone:
                return [], None
            lines = list(watcher.lines)
            watcher.lines.clear()
            if not lines and watcher.final is None:
                lines = [_HEARTBEAT_LINE]
            return lines, (watcher.final if not lines else None)

    def _stream(self, connection: socket.socket, watcher: Watcher) -> None:
        while True:
            lines, final = self._next(watcher)
            if not lines and final is None:
                return  # the reader hung up
            try:
                for line in lines:
                    connection.sendall(line)
                if final is not None:
                    connection.sendall(final)
                    return
            except OSError:  # gone, or took nothing for WRITE_TIMEOUT: the stream ends
                return


_HEARTBEAT_LINE = encode({"type": EVENT_HEARTBEAT, "data": {"interval": HEARTBEAT}})
