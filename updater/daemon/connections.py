"""A server's connections: one thread reads every request, within bounds, and answers it.

No thread per connection: the server's main thread accepts, reads every request head
without blocking, and writes the small answers (the status line, errors, the shutdown
request's ``202``). Only a watch stream, once its request is read and allowed, gets a thread
of its own (:mod:`updater.daemon.hub`, which bounds how many). The bounds:

- a request head (request line and headers) is at most :data:`MAX_HEAD_BYTES` and
  :data:`MAX_HEADERS` lines (then ``431``), a body at most :data:`MAX_BODY_BYTES` (``413``);
- a connection has :data:`REQUEST_DEADLINE` seconds from its accept to its whole request
  and answer, however it sends it (a byte every few seconds included), then it is closed;
- at most ``max_pending`` connections are being read at once: one more and the oldest is
  closed, so slow clients can delay nobody for long, and a status query, which sends its
  request at once, is answered while they wait;
- out of file descriptors, ``accept`` fails and the listener stays readable: the oldest
  connection being read is closed to make room, else a spare descriptor is given up to
  accept and close the next connection, else the listener is left alone for a moment. The
  loop never spins on a listener it cannot accept from.

The server decides what to answer (:class:`Request` in, :class:`Reply` out); nothing here
logs a request, only (through :meth:`~updater.daemon.serverlog.ServerLog.noisy`) what went
wrong with one.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import selectors
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

from updater.daemon.serverlog import ServerLog

MAX_HEAD_BYTES = 16 * 1024
MAX_HEADERS = 64
MAX_BODY_BYTES = 64 * 1024
REQUEST_DEADLINE = 10.0
MAX_PENDING = 64  # connections being read at once (fewer when descriptors are scarce)
ACCEPT_BATCH = 32  # connections accepted in one go before the others are served
PAUSE = 0.25  # seconds the listener is left alone when nothing at all can be accepted
_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_REASONS = {
    200: "OK",
    202: "Accepted",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}


class Request:
    """One request as read: method, target, HTTP version, headers (names in lower case)."""

    __slots__ = ("headers", "method", "target", "version")

    def __init__(self, method: str, target: str, version: str, headers: dict[str, str]):
        self.method = method
        self.target = target
        self.version = version
        self.headers = headers

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


class Reply:
    """What to do with a connection: write ``data`` and close it (then call ``then``), or
    hand it over to ``takeover``, which owns it from then on (a watch stream)."""

    __slots__ = ("data", "takeover", "then")

    def __init__(
        self,
        data: bytes = b"",
        *,
        then: Callable[[], None] | None = None,
        takeover: Callable[[socket.socket], None] | None = None,
    ) -> None:
        self.data = data
        self.then = then
        self.takeover = takeover


def http_head(code: int, headers: Mapping[str, str]) -> bytes:
    lines = [f"HTTP/1.0 {code} {_REASONS.get(code, 'Unknown')}", "Server: mux-server"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def json_answer(code: int, doc: Mapping[str, Any]) -> bytes:
    """A whole HTTP/1.0 answer with a JSON body (strict JSON: never NaN or Infinity)."""
    body = json.dumps(doc, sort_keys=True, allow_nan=False).encode()
    head = {"Content-Type": "application/json", "Content-Length": str(len(body))}
    return http_head(code, head) + body


# What a connection the server cannot serve any more hears as it stops (refuse_waiting).
STOPPING_ANSWER = json_answer(503, {"error": "the server is stopping", "stopping": True})
MAX_REFUSED_AT_STOP = 1024


class Refused(Exception):
    """A request that cannot be read as one: answered ``code`` with ``reason``."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def _head_end(data: bytes) -> tuple[int, int]:
    """Where the head ends and its body begins in ``data`` ((-1, -1): not yet); a blank
    line ends it, with or without carriage returns."""
    ends = [(i, i + len(mark)) for mark in (b"\r\n\r\n", b"\n\n") if (i := data.find(mark)) >= 0]
    return min(ends) if ends else (-1, -1)


def parse_head(head: bytes) -> Request:
    """The request line and headers (without the blank line); raises :class:`Refused`."""
    lines = head.decode("latin-1").split("\n")
    if len(lines) > MAX_HEADERS + 1:
        raise Refused(431, f"more than {MAX_HEADERS} header lines")
    parts = lines[0].rstrip("\r").split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[1].startswith("/"):
        raise Refused(400, "not an HTTP request line")
    method, target, version = parts
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise Refused(505, f"unsupported {version[:20]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.rstrip("\r").partition(":")
        if not colon or not name or name != name.strip() or " " in name:
            raise Refused(400, "a malformed header line")
        key = name.lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return Request(method, target, version, headers)


def _body_length(request: Request) -> int:
    if request.header("Transfer-Encoding") is not None:
        raise Refused(501, "chunked bodies are not supported")
    text = request.header("Content-Length")
    if text is None:
        return 0
    if not text.isdigit():
        raise Refused(400, "a malformed Content-Length")
    length = int(text)
    if length > MAX_BODY_BYTES:
        raise Refused(413, f"a body larger than {MAX_BODY_BYTES} bytes")
    return length


class _Connection:
    __slots__ = ("deadline", "outgoing", "received", "sock", "then")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.received = b""
        self.outgoing: bytes | None = None  # set once an answer is being written
        self.then: Callable[[], None] | None = None


def descriptor_budget(reserved: int = 24) -> int:
    """How many more descriptors this process may open, keeping ``reserved`` for its own
    work (its log, a check child's pipes, the link watch); at least 0."""
    import resource  # (stdlib; the server's start only)

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            used = len(os.listdir(folder))
            break
        except OSError:
            continue
    else:
        used = 16
    return max(0, soft - used - reserved)


class Connections:
    """Accept on ``listener`` and serve each request with ``respond`` until ``stopped()``."""

    def __init__(
        self,
        listener: socket.socket,
        respond: Callable[[Request], Reply],
        log: ServerLog,
        *,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self._listener = listener
        self._respond = respond
        self._log = log
        self._max_pending = max(1, max_pending)
        self._open: dict[int, _Connection] = {}  # by descriptor, oldest first
        self._selector = selectors.DefaultSelector()
        self._spare = _open_spare()
        self._paused_until: float | None = None
        listener.setblocking(False)

    @property
    def open_count(self) -> int:
        return len(self._open)

    def run(self, wake_fd: int, stopped: Callable[[], bool]) -> None:
        """Serve until ``stopped()``; ``wake_fd`` turns readable to say it may be."""
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(wake_fd, selectors.EVENT_READ, "wake")
        try:
            while not stopped():
                for key, _events in self._selector.select(self._timeout()):
                    if key.data is None:
                        self._accept()
                    elif isinstance(key.data, _Connection):
                        self._serve(key.data)
                    # "wake": stopped() says why, at the top of the loop
                self._expire()
        finally:
            self.refuse_waiting()
            for connection in list(self._open.values()):
                self._refuse(connection.sock)
                self._close(connection)
            self._selector.close()
            if self._spare is not None:
                os.close(self._spare)

    def refuse_waiting(self) -> int:
        """Answer every connection still queued on the listener ``503``, "stopping", rather
        than leave the kernel to reset it when the listener closes: a restart's new server
        listens beside this one, and a client told so asks again, reaching it. Returns how
        many were answered."""
        answered = 0
        for _ in range(MAX_REFUSED_AT_STOP):
            try:
                sock, _address = self._listener.accept()
            except OSError:  # none left (BlockingIOError), or none can be taken
                break
            self._refuse(sock)
            sock.close()
            answered += 1
        return answered

    @staticmethod
    def _refuse(sock: socket.socket) -> None:
        try:
            sock.setblocking(False)
            sock.send(STOPPING_ANSWER)  # a few hundred bytes: the socket's buffer takes them
        except OSError:
            pass  # gone already

    # -- accepting -----------------------------------------------------------------------

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                sock, _address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno not in _OUT_OF_DESCRIPTORS:
                    return  # that one went away (ECONNABORTED...): the next, next time
                if not self._make_room():
                    self._pause()
                    return
                continue
            if len(self._open) >= self._max_pending:
                self._drop_oldest("too many connections at once")
            connection = _Connection(sock, time.monotonic() + REQUEST_DEADLINE)
            try:
                sock.setblocking(False)
                self._selector.register(sock, selectors.EVENT_READ, connection)
            except (OSError, ValueError):
                sock.close()
                continue
            self._open[sock.fileno()] = connection
            self._read(connection)  # a status query's request is usually there already

    def _make_room(self) -> bool:
        """Out of descriptors: free one so that the next accept works. False: nothing left."""
        if self._open:
            self._drop_oldest("out of file descriptors")
            return True
        if self._spare is None:
            return False
        os.close(self._spare)
        self._spare = None
        try:
            sock, _address = self._listener.accept()
        except OSError:
            pass
        else:
            with contextlib.suppress(OSError):
                sock.setblocking(False)
                sock.send(json_answer(503, {"error": "the server is out of file descriptors"}))
            sock.close()
            self._log.noisy("descriptors", "out of file descriptors: closed a new connection")
        self._spare = _open_spare()
        return True

    def _pause(self) -> None:
        self._log.noisy("descriptors", "out of file descriptors: not accepting for a moment")
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(self._listener)
        self._paused_until = time.monotonic() + PAUSE

    def _timeout(self) -> float:
        now = time.monotonic()
        wake = now + 1.0
        if self._open:
            wake = min(wake, next(iter(self._open.values())).deadline)
        if self._paused_until is not None:
            wake = min(wake, self._paused_until)
        return max(0.0, wake - now)

    def _expire(self) -> None:
        now = time.monotonic()
        if self._paused_until is not None and now >= self._paused_until:
            self._paused_until = None
            self._selector.register(self._listener, selectors.EVENT_READ, None)
        while self._open:
            oldest = next(iter(self._open.values()))
            if oldest.deadline > now:
                return
            self._log.noisy(
                "slow",
                f"closed a connection that took longer than {REQUEST_DEADLINE:g}s "
                "to send its request or take its answer",
            )
            self._close(oldest)

    def _drop_oldest(self, why: str) -> None:
        self._log.noisy("crowded", f"{why}: closed the connection that waited longest")
        self._close(next(iter(self._open.values())))

    # -- one connection ------------------------------------------------------------------

    def _serve(self, connection: _Connection) -> None:
        if connection.outgoing is None:
            self._read(connection)
        else:
            self._write(connection)

    def _read(self, connection: _Connection) -> None:
        while True:
            try:
                chunk = connection.sock.recv(16 * 1024)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._close(connection)
                return
            if not chunk:  # gone before its request was whole
                self._close(connection)
                return
            connection.received += chunk
            try:
                request = self._request(connection)
            except Refused as refused:
                self._log.noisy("malformed", f"refused a request: {refused.reason}")
                self._answer(
                    connection, Reply(json_answer(refused.code, {"error": refused.reason}))
                )
                return
            if request is not None:
                try:
                    reply = self._respond(request)
                except Exception as exc:  # one request's failure is not the server's
                    self._log.noisy("error", f"a request failed: {exc.__class__.__name__}: {exc}")
                    reply = Reply(json_answer(500, {"error": "the server failed to answer"}))
                self._answer(connection, reply)
                return

    def _request(self, connection: _Connection) -> Request | None:
        """The request, once it is all there (head and body); None until then."""
        data = connection.received
        end, body_at = _head_end(data)
        if end < 0:
            if len(data) > MAX_HEAD_BYTES:
                raise Refused(431, f"a request head larger than {MAX_HEAD_BYTES} bytes")
            return None
        if end > MAX_HEAD_BYTES:
            raise Refused(431, f"a request head larger than {MAX_HEAD_BYTES} bytes")
        request = parse_head(data[:end])
        if len(data) - body_at < _body_length(request):
            return None  # its body is on its way (read, then ignored: no endpoint takes one)
        return request

    def _answer(self, connection: _Connection, reply: Reply) -> None:
        if reply.takeover is not None:
            self._forget(connection)
            try:
                reply.takeover(connection.sock)  # the connection is the taker's from now on
            except Exception as exc:  # no thread for it, say: the server goes on
                self._log.noisy("error", f"a request failed: {exc.__class__.__name__}: {exc}")
                connection.sock.close()
            return
        connection.outgoing = reply.data
        connection.then = reply.then
        connection.received = b""
        self._write(connection)

    def _write(self, connection: _Connection) -> None:
        data = connection.outgoing or b""
        while data:
            try:
                sent = connection.sock.send(data)
            except (BlockingIOError, InterruptedError):
                connection.outgoing = data
                with contextlib.suppress(KeyError, ValueError):
                    self._selector.modify(connection.sock, selectors.EVENT_WRITE, connection)
                return
            except OSError:
                break
            data = data[sent:]
        self._close(connection)

    def _forget(self, connection: _Connection) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(connection.sock)
        self._open.pop(connection.sock.fileno(), None)

    def _close(self, connection: _Connection) -> None:
        self._forget(connection)
        connection.sock.close()
        then, connection.then = connection.then, None
        if then is not None:
            then()


def _open_spare() -> int | None:
    try:
        return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
