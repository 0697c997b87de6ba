"""The little HTTP a server's status line needs, spoken over a plain socket.

One HTTP/1.0 request, its whole exchange bounded by one deadline (:func:`http_request`: every
read waits only for what is left of it, so a server that drips bytes cannot outlast it), its
answer capped (:data:`MAX_STATUS_BYTES`, headers at 16 KiB), a loopback listener proved first
(:mod:`updater.servers.proof`). ``http.client``, with ``email`` and ``ssl`` behind it, cost
more than the rest of the check, so only the watch stream uses it (:func:`open_connection`,
:class:`Watchdog`).

On the fast path of ``mux update --check --max-age`` (:mod:`updater.servers.status`):
standard library only, and ``socket`` (or, for a Unix socket, ``_socket`` alone) only once
there is a server to ask.
"""

from __future__ import annotations

import time

from updater.servers.addresses import TcpAddress, UnixAddress, connect_host
from updater.servers.peer import Peer, peer_pid
from updater.servers.proof import PROOF_HEADER, Proof

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    import _socket
    import http.client
    from collections.abc import Callable
    from typing import Any

    from updater.servers.addresses import ServerAddress

DEFAULT_TIMEOUT = 1.0


# A status line is a few hundred bytes; never buffer whatever a confused server streams at us.
MAX_STATUS_BYTES = 64 * 1024


class NotHttp(Exception):
    """What a server answered is not an HTTP response."""


# A status line's answer has a few headers; anything past this before the body is not one.
_MAX_HEAD_BYTES = 16 * 1024


def connect_unix(sock: Any, path: str, deadline: float) -> None:
    """Connect to a Unix socket; while its listen queue is full (``EAGAIN``: a crowd of
    clients, which a live server works through in moments) try again until ``deadline``, and
    raise ``BlockingIOError`` if it still is: the server then accepts no connection."""
    delay = 0.005
    while True:
        try:
            sock.connect(path)
            return
        except BlockingIOError:
            remaining = deadline - time.monotonic()
            if remaining <= delay:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def _connect(address: ServerAddress, timeout: float, peer: Peer | None) -> _socket.socket:
    if isinstance(address, TcpAddress):
        # deferred: this module is on a fast path (docs/build.md)
        import socket

        return socket.create_connection((connect_host(address), address.port), timeout=timeout)
    # A Unix socket straight from _socket, the C module under socket: importing socket (it
    # builds its enums from _socket's constants) cost about as much as asking the server.
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        connect_unix(sock, address.socket_path, time.monotonic() + timeout)
    except BaseException:
        sock.close()
        raise
    if peer is not None:
        peer.pid = peer_pid(sock)
    return sock


def http_request(
    address: ServerAddress, method: str, path: str, *, timeout: float, peer: Peer | None = None
) -> tuple[int, bytes]:
    """One HTTP/1.0 request to a server; the whole exchange is bounded by ``timeout``.

    Returns (HTTP status, body up to :data:`MAX_STATUS_BYTES` + 1 bytes). Raises
    ``TimeoutError`` past the deadline (every read waits only for what is left of it, so a
    server that drips bytes cannot outlast it), ``FileNotFoundError``/
    ``ConnectionRefusedError`` when nobody listens, :class:`NotHttp` when the answer is not
    HTTP, :class:`~updater.servers.proof.NotYours` when a loopback listener is not this user's server (nothing was
    sent to it), ``OSError`` otherwise. ``peer`` (Unix sockets) learns the listening process
    once connected, even when no answer follows.
    """
    deadline = time.monotonic() + timeout
    host = (
        "localhost" if isinstance(address, UnixAddress) else address.display.removeprefix("http://")
    )
    sock = _connect(address, timeout, peer)
    try:
        proof = Proof.for_connection(address, sock, method, path)
        request = (
            f"{method} {path} HTTP/1.0\r\nHost: {host}\r\nAccept: application/json\r\n"
            f"{proof.lines if proof else ''}Content-Length: 0\r\n\r\n"
        )
        sock.sendall(request.encode("ascii"))
        head, body = _read_answer(sock, deadline, timeout)
    finally:
        sock.close()
    status = _status_code(head)
    if proof is not None:
        proof.check(address, _header(head, PROOF_HEADER))
    length = _content_length(head)
    if length is not None:
        body = body[:length]
    return status, body[: MAX_STATUS_BYTES + 1]


def _read_answer(sock: _socket.socket, deadline: float, timeout: float) -> tuple[bytes, bytes]:
    """(the answer's head, its body) as read until the server closes, the body passes the
    cap, or the deadline."""
    received = b""
    length, head_end = None, -1
    while True:
        if head_end < 0:
            head_end = received.find(b"\r\n\r\n")
            if head_end >= 0:
                _status_code(received[:head_end])
                length = _content_length(received[:head_end])
            elif len(received) > _MAX_HEAD_BYTES:
                raise NotHttp("headers larger than 16 KiB")
        if head_end >= 0:
            read = len(received) - head_end - 4
            if read > MAX_STATUS_BYTES or (length is not None and read >= length):
                break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no complete answer within {timeout:g}s")
        sock.settimeout(remaining)
        chunk = sock.recv(64 * 1024)
        if not chunk:
            break  # HTTP/1.0: the server closes after its answer
        received += chunk
    if head_end < 0:
        raise NotHttp("no complete status line and headers" if received else "no answer")
    return received[:head_end], received[head_end + 4 :]


def _header(head: bytes, wanted: str) -> str | None:
    for line in head.split(b"\r\n")[1:]:
        name, colon, value = line.partition(b":")
        if colon and name.strip().lower() == wanted.lower().encode():
            return value.strip().decode("latin-1")
    return None


def _status_code(head: bytes) -> int:
    status_line = head.split(b"\r\n", 1)[0]
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise NotHttp("no HTTP status line")
    return int(parts[1])


def _content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n")[1:]:
        name, colon, value = line.partition(b":")
        if colon and name.strip().lower() == b"content-length":
            if not value.strip().isdigit():
                raise NotHttp("a malformed Content-Length")
            return int(value.strip())
    return None


_connection_class: Callable[[str, float, Peer | None], http.client.HTTPConnection] | None = None


def _unix_connection_class() -> Callable[[str, float, Peer | None], http.client.HTTPConnection]:
    """An ``HTTPConnection`` that talks over a Unix socket, built on first use.

    ``http.client`` is the costliest import of this module; a machine with no server never
    pays for it.
    """
    global _connection_class
    if _connection_class is None:
        # deferred: this module is on a fast path (docs/build.md)
        import http.client

        class UnixHTTPConnection(http.client.HTTPConnection):
            def __init__(self, socket_path: str, timeout: float, peer: Peer | None) -> None:
                super().__init__("localhost", timeout=timeout)
                self.socket_path = socket_path
                self.peer = peer

            def connect(self) -> None:
                # deferred: this module is on a fast path (docs/build.md)
                import socket

                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.settimeout(self.timeout)
                    waiting = self.timeout if self.timeout is not None else DEFAULT_TIMEOUT
                    connect_unix(sock, self.socket_path, time.monotonic() + waiting)
                except BaseException:
                    sock.close()
                    raise
                if self.peer is not None:
                    self.peer.pid = peer_pid(sock)
                self.sock = sock

        _connection_class = UnixHTTPConnection
    return _connection_class


def open_connection(
    address: ServerAddress, timeout: float, peer: Peer | None = None
) -> http.client.HTTPConnection:
    """An ``http.client`` connection to a server, for a stream (the watch client); a status
    or shutdown request goes through :func:`http_request` instead."""
    if isinstance(address, UnixAddress):
        return _unix_connection_class()(address.socket_path, timeout, peer)
    # deferred: this module is on a fast path (docs/build.md)
    import http.client

    return http.client.HTTPConnection(connect_host(address), address.port, timeout=timeout)


class Watchdog:
    """Cuts a connection at its deadline, so a server that drips bytes cannot outlast it.

    Socket timeouts bound each read, not the whole exchange; shutting the socket down wakes
    the blocked read, which then fails and is reported as a timeout.
    """

    def __init__(self, connection: http.client.HTTPConnection, timeout: float) -> None:
        # deferred: this module is on a fast path (docs/build.md)
        import threading

        self.fired = False
        self._connection = connection
        self._timer = threading.Timer(timeout, self._cut)
        self._timer.daemon = True

    def _cut(self) -> None:
        # deferred: this module is on a fast path (docs/build.md)
        import socket

        self.fired = True
        sock = self._connection.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._timer.cancel()
