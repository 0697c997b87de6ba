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

A place is taken by :meth:`WatchHub.admit` and given back by the stream's thread whatever
happens to the connection after that, the HTTP head included (a reader that hangs up before
the head leaks nothing). End of input from a watcher (``shutdown(SHUT_WR)``, as ``nc -N`` and
``socat`` do) is not a hang-up: its stream goes on. Only a connection the kernel says is gone
(a hang-up, a reset) or a failed write ends it; so that a reader that closed its end entirely
is found at once on TCP too (where end of input and a close look alike until something is
written), its stream sends a heartbeat as soon as its input ends, which such a reader answers
with a reset.

The client side (:func:`open_watch`, :class:`WatchStream`) reads the stream: the first line,
then each event as it comes (heartbeats are consumed, not passed on), bounded in size and in
silence (:data:`READ_TIMEOUT`). ``mux server watch`` prints them re-encoded, so nothing a
server sends reaches a terminal unescaped."""

from __future__ import annotations

import contextlib
import json
import select
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
    WATCH_SCHEMA,
    first_line,
)
from updater.timestamps import rfc3339

MAX_WATCHERS = 256  # more connections than that are refused (HTTP 503)
QUEUE_LIMIT = 64  # lines waiting for one watcher; one more and it is dropped
SEND_BUFFER = 16 * 1024  # the kernel's share of a watcher's backlog (SO_SNDBUF)
WRITE_TIMEOUT = 30.0  # a send that makes no progress for this long drops the watcher
CLOSE_GRACE = 1.0  # how long a stopping server waits for its streams' last lines
_DRAIN = 4096  # what a watcher sends after its request is read this much at a time, dropped


def encode(doc: dict[str, Any]) -> bytes:
    """One line of the stream (ASCII JSON, so a terminal never gets a raw control byte; never
    NaN or Infinity, which a strict reader refuses: ``ValueError``)."""
    return json.dumps(doc, sort_keys=True, allow_nan=False).encode() + b"\n"


def stamped(event: WatchEvent) -> WatchEvent:
    """``event`` with the time it happened (now), unless it has one: an event in force keeps
    the time it was published when later watchers are sent it."""
    if event.at is None:
        event.at = rfc3339()
    return event


def own_line(event_type: str, data: dict[str, Any]) -> bytes:
    """A line the hub says itself (heartbeat, dropped, stopping), stamped now."""
    return encode({"type": event_type, "data": data, "at": rfc3339()})


class Watcher:
    """One connection's queue (guarded by the hub's lock)."""

    def __init__(self) -> None:
        self.lines: deque[bytes] = deque()
        self.final: bytes | None = None  # the last line: dropped, or the server is stopping
        self.gone = False  # the reader hung up: the stream ends without another line
        self.nudged = False  # its input ended: send a heartbeat now (see the module doc)


class _HangUps:
    """One thread that waits on the connections of every watcher, so that a reader hanging up
    ends its stream (and frees its place) at once, whatever the stream is waiting for.

    A watcher sends nothing after its request; whatever it does send is read and dropped.
    Every change to what is waited on, and every close of a watched connection, happens in
    this thread (asked for through :meth:`add` and :meth:`release`): a descriptor is never
    closed while it is waited on, so a number the kernel reuses for another connection is
    never mistaken for the old one.
    """

    def __init__(self, on_gone: Callable[[Watcher], None], on_eof: Callable[[Watcher], None]):
        self._on_gone = on_gone
        self._on_eof = on_eof
        self._poll = select.poll()
        self._lock = threading.Lock()
        self._changes: deque[tuple[str, socket.socket, Watcher | None]] = deque()
        self._watched: dict[int, tuple[socket.socket, Watcher]] = {}
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)
        self._poll.register(self._wake_read.fileno(), select.POLLIN)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="mux-watch-hangups", daemon=True)
        self._thread.start()

    def add(self, connection: socket.socket, watcher: Watcher) -> bool:
        """Wait on ``connection``; False when the hub is closing (the caller keeps it)."""
        return self._ask("add", connection, watcher)

    def release(self, connection: socket.socket) -> None:
        """Stop waiting on ``connection`` and close it (here, or at once when closing)."""
        if not self._ask("release", connection, None):
            connection.close()

    def _ask(self, what: str, connection: socket.socket, watcher: Watcher | None) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._changes.append((what, connection, watcher))
        with contextlib.suppress(OSError):  # a full pipe already wakes the thread
            self._wake_write.send(b"\0")
        return True

    def close(self) -> None:
        with self._lock:
            self._closed = True
        with contextlib.suppress(OSError):
            self._wake_write.send(b"\0")
        self._thread.join(1.0)

    def _run(self) -> None:
        try:
            while not self._closed:
                self._apply_changes()
                for fd, events in self._poll.poll():
                    if fd == self._wake_read.fileno():
                        with contextlib.suppress(OSError):
                            self._wake_read.recv(4096)
                    elif fd in self._watched:
                        self._check(fd, events)
        finally:
            with self._lock:
                self._closed = True
                changes = list(self._changes)
                self._changes.clear()
            # A connection asked to be added too late stays its stream's to close (release()
            # finds the hub closed); one asked to be released is closed here.
            for what, connection, _watcher in changes:
                if what == "release":
                    connection.close()
            for connection, _watcher in self._watched.values():
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)  # wakes its stream's blocked send
            self._wake_read.close()
            self._wake_write.close()

    def _apply_changes(self) -> None:
        while True:
            with self._lock:
                if not self._changes:
                    return
                what, connection, watcher = self._changes.popleft()
            fd = connection.fileno()
            if what == "add" and watcher is not None and fd >= 0:
                self._watched[fd] = (connection, watcher)
                self._poll.register(fd, select.POLLIN)
            elif what == "release":
                if fd >= 0 and self._watched.pop(fd, None) is not None:
                    with contextlib.suppress(KeyError):  # not when it was found gone
                        self._poll.unregister(fd)
                connection.close()

    def _check(self, fd: int, events: int) -> None:
        connection, watcher = self._watched[fd]
        gone = bool(events & (select.POLLHUP | select.POLLERR | select.POLLNVAL))
        if not gone and events & select.POLLIN:
            try:
                data = connection.recv(_DRAIN, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                gone = True
            else:
                if not data:
                    # End of input, not a hang-up: from now on only the kernel's word that
                    # the connection is gone (POLLHUP, POLLERR: always reported) counts.
                    self._poll.modify(fd, 0)
                    self._on_eof(watcher)
        if gone:
            self._poll.unregister(fd)  # kept in _watched (and open) until its stream releases it
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
        Raises ``ValueError`` for an event that is not strict JSON (NaN, Infinity).
        """
        with self._changed:
            self._publish(event, in_force=in_force)

    def replace(
        self, types: Iterable[str], events: Iterable[WatchEvent], *, in_force: bool = True
    ) -> None:
        """``events`` are now the whole truth about ``types``: what was in force of those
        types is withdrawn, then each event is sent (and in force, unless ``in_force`` is
        False). One step: a watcher that connects meanwhile sees the old set or the new one."""
        lines = [(event, encode(stamped(event).to_json())) for event in events]
        with self._changed:
            for event_type in types:
                self._in_force.pop(event_type, None)
            for event, line in lines:
                self._publish(event, in_force=in_force, line=line)

    def _publish(self, event: WatchEvent, *, in_force: bool, line: bytes | None = None) -> None:
        line = encode(stamped(event).to_json()) if line is None else line
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
                watcher.final = own_line(
                    EVENT_WATCH_DROPPED,
                    {
                        "reason": f"this watcher fell behind: {self._queue_limit} events "
                        "were waiting for it; reconnect to get the events in force"
                    },
                )
            else:
                watcher.lines.append(line)
        self._changed.notify_all()

    def withdraw(self, event_type: str, tell: Callable[[WatchEvent], WatchEvent]) -> None:
        """``event_type`` is no longer in force, and every watcher (each got it, when it was
        sent or when it connected) is sent ``tell(that event)``, not in force. One step: a
        watcher that connects meanwhile gets neither."""
        with self._changed:
            said = self._in_force.pop(event_type, None)
            if said is not None:
                self._publish(tell(said), in_force=False)

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
        final = own_line(EVENT_SERVER_STOPPING, {"reason": reason})
        with self._changed:
            self._stopping = final
            for watcher in self._watchers:
                if watcher.final is None:
                    watcher.final = final
            self._changed.notify_all()
            streams = list(self._streams)
        deadline = time.monotonic() + CLOSE_GRACE
        for thread in streams:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._changed:
            hangups, self._hangups = self._hangups, None
        if hangups is not None:
            hangups.close()

    def _gone(self, watcher: Watcher) -> None:
        with self._changed:
            watcher.gone = True
            self._changed.notify_all()

    def _input_ended(self, watcher: Watcher) -> None:
        with self._changed:
            watcher.nudged = True
            self._changed.notify_all()

    @property
    def watcher_count(self) -> int:
        with self._changed:
            return len(self._watchers)

    # -- one stream ----------------------------------------------------------------------

    def admit(self, status: dict[str, Any]) -> Watcher | None:
        """Take a place for a new watcher, its first lines queued (``status``, the server's
        status line, typed ``status`` with the stream's schema; then the events in force);
        None when there are too many watchers or the server is stopping. The place is given
        back by :meth:`stream` (or :meth:`abandon`)."""
        head = encode(first_line({**status, "schema": WATCH_SCHEMA}))
        with self._changed:
            if self._stopping is not None or len(self._watchers) >= self._max_watchers:
                return None
            watcher = Watcher()
            self._watchers.add(watcher)
            watcher.lines.append(head)
            watcher.lines.extend(encode(event.to_json()) for event in self._in_force.values())
            if self._hangups is None:
                self._hangups = _HangUps(self._gone, self._input_ended)
            return watcher

    def abandon(self, watcher: Watcher) -> None:
        """Give back a place that :meth:`stream` will never run for."""
        with self._changed:
            self._watchers.discard(watcher)

    def start(self, connection: socket.socket, watcher: Watcher, head: bytes) -> None:
        """Run :meth:`stream` in a thread of its own; the connection is the stream's."""
        thread = threading.Thread(
            target=self.stream, args=(connection, watcher, head), name="mux-watch", daemon=True
        )
        try:
            thread.start()
        except BaseException:  # no thread to be had: the place and the connection go back
            self.abandon(watcher)
            connection.close()
            raise

    def stream(self, connection: socket.socket, watcher: Watcher, head: bytes) -> None:
        """Run one watcher's stream on ``connection`` until it ends, then close it: ``head``
        (the HTTP head of the answer), then its lines. Whatever happens from the first byte
        on, the place goes back and the connection is closed."""
        with self._changed:
            self._streams.add(threading.current_thread())
            hangups = self._hangups
        watched = False
        try:
            connection.setblocking(True)
            with contextlib.suppress(OSError):
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
            connection.settimeout(WRITE_TIMEOUT)
            connection.sendall(head)
            watched = hangups is not None and hangups.add(connection, watcher)
            self._stream(connection, watcher)
        except OSError:
            pass  # gone before or while its head was written: nothing more to say
        finally:
            with self._changed:
                self._watchers.discard(watcher)
                self._streams.discard(threading.current_thread())
            if watched and hangups is not None:
                hangups.release(connection)
            else:
                connection.close()

    def _next(self, watcher: Watcher) -> tuple[list[bytes], bytes | None]:
        """What to send next: queued lines, the last line, or (after :data:`HEARTBEAT`
        seconds of nothing, or at once when the reader's input ended) a heartbeat. An empty
        list and no last line: the reader is gone."""
        with self._changed:
            deadline = time.monotonic() + HEARTBEAT
            while (
                not watcher.lines
                and watcher.final is None
                and not watcher.gone
                and not watcher.nudged
            ):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)  # woken for other watchers too: wait again
            if watcher.gone:
                return [], None
            watcher.nudged = False
            lines = list(watcher.lines)
            watcher.lines.clear()
            if not lines and watcher.final is None:
                lines = [own_line(EVENT_HEARTBEAT, {"interval": HEARTBEAT})]
            return lines, (watcher.final if not lines else None)

    def _stream(self, connection: socket.socket, watcher: Watcher) -> None:
        while True:
            lines, final = self._next(watcher)
            if not lines and final is None:
                return  # the reader hung up
            for line in lines:
                connection.sendall(line)
            if final is not None:
                connection.sendall(final)
                return
