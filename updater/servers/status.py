"""Find mux servers and read their status lines (the client side of the server status contract).

This module is on the fast path of ``mux update --check --max-age`` (a sidebar runs it every
few minutes), so it uses the standard library only, imports ``socket`` and the protocol only
when there is a server to ask, and speaks the little HTTP a status line needs over a plain
socket (``http.client``, with ``email`` and ``ssl`` behind it, cost more than the rest of the
check; only the watch client uses it). Its records are NamedTuples (:mod:`updater._records`),
and the runtime directory is platformdirs' answer without importing platformdirs in the usual
cases (:mod:`updater.config.dirs`).

An *address* is either the filesystem path of a server's Unix socket or a loopback
``http://127.0.0.1:PORT`` URL. ``unix:///path.sock`` URLs are accepted wherever an address is
read and normalised to the plain path.

A loopback port is shared by every user of the machine, so a server on one answers only its
owner: every request carries the secret the server wrote when it started, in a file only
its owner can read (:func:`tcp_secret_path`, in the owner's runtime dir), as
``Authorization: Bearer <secret>``. The secret is read without following a link, only from
a regular file of this user's that nobody else may read, and never shown. ``localhost``
means ``127.0.0.1`` here, as it does for the server: a name that resolves to ``::1`` first
would hand the secret to whoever listens on that port of ``::1``.

What a server answers is read as strict JSON (:func:`strict_json`): ``NaN``, ``Infinity``
and numbers no float holds are refused, so nothing mux writes back is anything but JSON.
"""

from __future__ import annotations

import json
import os
import time

from updater._records import NamedTuple
from updater.config.dirs import user_runtime_dir
from updater.core.verdicts import ServerReport
from updater.errors import MuxError, UsageError
from updater.files import NotReadable, read_small_file
from updater.locks import lock_holders
from updater.urls import is_loopback_host

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    import _socket
    import http.client
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from pathlib import Path
    from typing import Any

    from updater.core.verdicts import ServerState
    from updater.protocol import StatusLine

SERVER_URL_ENV = "MUX_SERVER_URL"
SOCKET_SUFFIX = ".sock"
SOCKET_LOCK_SUFFIX = ".lock"  # <socket>.lock: held by the server for as long as it serves
DEFAULT_SOCKET_NAME = "default"
DEFAULT_TIMEOUT = 1.0
# A status line is a few hundred bytes; never buffer whatever a confused server streams at us.
MAX_STATUS_BYTES = 64 * 1024
SECRET_SUFFIX = ".secret"  # <runtime dir>/tcp-<port>.secret: a loopback server's owner secret
MAX_SECRET_BYTES = 256
AUTHORIZATION = "Authorization"  # the header that carries it: "Bearer <secret>"
# Where the kernel does not name a listener's owner: the client's HMAC of a fresh nonce
# ("Authorization: Mux-Proof <nonce> <mac>"), and the server's answer to it (Proof).
PROOF_SCHEME = "Mux-Proof"
CHALLENGE_HEADER = "X-Mux-Challenge"  # the nonce the server must prove it can sign
PROOF_HEADER = "X-Mux-Proof"  # the server's HMAC of that nonce
CLIENT_LABEL = "mux-client"
SERVER_LABEL = "mux-server"


class NonStandardJson(ValueError):
    """JSON that a strict parser refuses: ``NaN``, ``Infinity``, a number no float holds."""


def _no_constant(name: str) -> Any:
    raise NonStandardJson(f"{name} is not standard JSON")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise NonStandardJson(f"the number {text[:20]} is too large for standard JSON")
    return value


def strict_json(raw: bytes | str) -> Any:
    """``json.loads`` that refuses non-standard JSON (:class:`NonStandardJson`, a
    ``ValueError``), as a strict parser would: what mux reads from a server it may write back
    (``--json``, ``mux server watch``), and it writes only standard JSON."""
    return json.loads(raw, parse_constant=_no_constant, parse_float=_finite)


class UnixAddress(NamedTuple):
    """A server listening on a Unix socket."""

    socket_path: str  # a string: asking a server needs no pathlib

    @property
    def path(self) -> Path:
        # deferred: this module is on a fast path (docs/build.md)
        from pathlib import Path

        return Path(self.socket_path)

    @property
    def display(self) -> str:
        return self.socket_path


class TcpAddress(NamedTuple):
    """A server listening on a loopback TCP port (``MUX_SERVER_URL=http://127.0.0.1:PORT``)."""

    host: str
    port: int

    @property
    def display(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


ServerAddress = UnixAddress | TcpAddress


def parse_server_address(text: str) -> ServerAddress:
    """Read ``unix:///path.sock``, ``http://127.0.0.1:PORT`` or a plain socket path.

    Raises :class:`UsageError` for anything else: plain ``http://`` is allowed only to a
    loopback address, since the status line and the shutdown request carry no authentication.
    """
    if "://" not in text:
        if not text:
            raise UsageError("empty server address")
        return UnixAddress(text)
    from urllib.parse import unquote, urlsplit  # only URL addresses need these

    expected = "expected unix:///path/to.sock or http://127.0.0.1:PORT"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise UsageError(f"invalid server URL {text!r}: {exc}", hint=expected) from None
    if parts.scheme == "unix":
        path = unquote(parts.path)
        if parts.netloc or not path.startswith("/") or parts.query or parts.fragment:
            raise UsageError(f"invalid server URL {text!r}: needs an absolute path", hint=expected)
        return UnixAddress(path)
    if parts.scheme == "http":
        host = parts.hostname or ""
        if not is_loopback_host(host):
            raise UsageError(
                f"server URL {text!r} is not on this machine: http:// is only allowed to a loopback address",
                hint=expected,
            )
        if port is None:
            raise UsageError(f"server URL {text!r} has no port", hint=expected)
        if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
            raise UsageError(f"server URL {text!r} must name only host and port", hint=expected)
        return TcpAddress(host, port)
    raise UsageError(f"unsupported server URL {text!r}", hint=expected)


def runtime_dir() -> Path:
    """``<platformdirs user_runtime_dir>/mux``: where servers put their sockets.

    On Linux that is ``$XDG_RUNTIME_DIR/mux`` when the variable names a private directory,
    else the fallback platformdirs picks (``/run/user/<uid>/mux``, then a private
    ``runtime-<uid>`` in the temp dir). Clients and servers both call this, so they agree.
    Raises :class:`MuxError` when no usable directory exists.
    """
    # deferred: this module is on a fast path (docs/build.md)
    from pathlib import Path

    return Path(_runtime_dir())


def _runtime_dir() -> str:

    try:
        return user_runtime_dir()
    except (OSError, RuntimeError) as exc:
        raise MuxError(f"no usable runtime directory for mux servers: {exc}") from None


def default_socket_path(name: str = DEFAULT_SOCKET_NAME) -> Path:
    """``runtime_dir()/<name>.sock``."""
    return runtime_dir() / f"{name}{SOCKET_SUFFIX}"


def tcp_secret_path(port: int) -> str:
    """``<runtime dir>/tcp-<port>.secret``: the owner secret of this user's server on that
    loopback port (written by the server when it starts, removed when it stops). Raises
    :class:`MuxError` when there is no runtime dir."""
    return os.path.join(_runtime_dir(), f"tcp-{port}{SECRET_SUFFIX}")


def _owned_and_private(info: os.stat_result) -> None:
    if info.st_uid != os.geteuid():
        raise NotReadable("it belongs to another user")
    if info.st_mode & 0o077:
        raise NotReadable("others may read it")


def read_tcp_secret(port: int) -> str | None:
    """The secret to send to this user's server on loopback ``port``; None when there is none
    this user can trust (no runtime dir, no file, a link, another user's or a readable file,
    not one line of text): the server then refuses the request."""
    try:
        raw = read_small_file(
            tcp_secret_path(port),
            MAX_SECRET_BYTES,
            inspect=_owned_and_private,
            follow_links=False,
        )
    except (MuxError, NotReadable):
        return None
    if raw is None:
        return None
    secret = raw.strip()
    if not secret or not secret.isalnum() or not secret.isascii():
        return None
    return secret.decode("ascii")


def connect_host(address: TcpAddress) -> str:
    """Where to connect for ``address``: ``localhost`` is ``127.0.0.1``, as for the server."""
    return "127.0.0.1" if address.host.lower() == "localhost" else address.host


def discover_server_addresses(environ: Mapping[str, str] = os.environ) -> list[str]:
    """:func:`server_addresses` for ``MUX_SERVER_URL`` as ``environ`` has it."""
    return server_addresses(environ.get(SERVER_URL_ENV))


def server_addresses(server_url: str | None) -> list[str]:
    """``server_url`` (``MUX_SERVER_URL``) names one server; otherwise every ``*.sock`` in
    the runtime dir, sorted.

    Raises :class:`UsageError` when ``server_url`` is malformed.
    """
    if server_url:
        if "://" not in server_url:
            raise UsageError(
                f"{SERVER_URL_ENV} must be a URL, got {server_url!r}",
                hint="use unix:///path/to.sock or http://127.0.0.1:PORT",
            )
        return [parse_server_address(server_url).display]
    directory = _runtime_dir()
    try:
        names = sorted(entry.name for entry in os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise MuxError(f"cannot list {directory}: {exc.strerror}") from None
    return [os.path.join(directory, name) for name in names if name.endswith(SOCKET_SUFFIX)]


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


def every_server_address(server_url: str | None) -> list[str]:
    """Every server on this machine that mux knows of: each socket in the runtime dir, and
    the one ``server_url`` names. What retention asks, so that ``MUX_SERVER_URL`` (which
    picks the server other commands talk to) never hides a server whose build must stay.

    Retention does not rest on this list (a server elsewhere holds its version's lock,
    :mod:`updater.install.inuse`); it names the servers in what is kept and places builds that take
    no lock."""
    found = server_addresses(None)
    if server_url:
        named = server_addresses(server_url)[0]
        if named not in found:
            found.append(named)
    return found


def retention_reports(
    server_url: str | None,
    *,
    known: Iterable[ServerReport] = (),
    timeout: float = DEFAULT_TIMEOUT,
) -> list[ServerReport]:
    """The one answer to "which servers does retention ask": every server of
    :func:`every_server_address`, asked at once; ``known`` reports (read moments ago for
    another purpose) are reused, not asked again. Raises :class:`MuxError` when the servers
    cannot be listed."""
    return query_reusing(every_server_address(server_url), known, timeout=timeout)


def query_reusing(
    addresses: Sequence[str], known: Iterable[ServerReport], *, timeout: float = DEFAULT_TIMEOUT
) -> list[ServerReport]:
    """The servers at ``addresses``, in that order: ``known`` reports are reused, the rest
    are asked at once (:func:`query_all`)."""
    reused = {report.address: report for report in known}
    missing = [address for address in addresses if address not in reused]
    fresh = dict(zip(missing, query_all(missing, timeout), strict=True))
    return [reused.get(address) or fresh[address] for address in addresses]


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
    HTTP, :class:`NotYours` when a loopback listener is not this user's server (nothing was
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


class NotYours(Exception):
    """A loopback listener that is not this user's server: the kernel says another user owns
    it (``uid``), or it could not prove it holds this user's secret (``uid`` None)."""

    def __init__(self, address: TcpAddress, uid: int | None) -> None:
        self.address = address
        self.uid = uid
        super().__init__(not_yours_detail(address, uid))


def not_yours_detail(address: TcpAddress, uid: int | None) -> str:
    """Why a listener is not this user's server, with who holds the port where visible."""
    from updater.servers import owner  # deferred: this module is on a fast path (docs/build.md)

    if uid is not None:
        holders = owner.listeners(connect_host(address), address.port) or []
        theirs = [h for h in holders if h.uid == uid] or [owner.Listener(uid, 0, ())]
        return f"not your server: the port is held by {owner.describe(theirs)}"
    return "not your server: it could not prove that it holds your server's secret"


class Proof:
    """How a request to a loopback port proves this user, and how the answer proves the
    server (docs/threat-model.md, "Another user on the port of your server").

    On Linux the kernel names the owner of the connection just made
    (:func:`updater.servers.owner.connection_owner`): another user's is refused before a byte
    is sent; this user's gets the secret itself (``Bearer``, which every server version
    takes). Where the kernel does not say, the secret never leaves: the request carries an
    HMAC of a fresh nonce, the method and the path under it, and the answer must carry the
    server's HMAC of the same nonce (:data:`PROOF_HEADER`), else the listener is not yours.
    """

    def __init__(self, headers: dict[str, str], expected: str | None) -> None:
        self.headers = headers
        self._expected = expected  # the server's proof the answer must carry; None: the kernel said

    @property
    def lines(self) -> str:
        return "".join(f"{name}: {value}\r\n" for name, value in self.headers.items())

    @classmethod
    def for_connection(
        cls, address: ServerAddress, sock: _socket.socket, method: str, path: str
    ) -> Proof | None:
        if not isinstance(address, TcpAddress):
            return None  # a Unix socket lives in this user's private folder
        from updater.servers import owner  # deferred: this module is on a fast path

        uid = owner.connection_owner(sock)
        if uid is not None and uid != os.geteuid():
            raise NotYours(address, uid)
        secret = read_tcp_secret(address.port)
        if secret is None:  # the server will refuse; unproven, it is not yours either
            return cls({}, None if uid is not None else "")
        nonce = os.urandom(16).hex()
        if uid is not None:
            return cls({CHALLENGE_HEADER: nonce, AUTHORIZATION: f"Bearer {secret}"}, None)
        mac = proof_mac(secret, CLIENT_LABEL, nonce, method, path)
        headers = {CHALLENGE_HEADER: nonce, AUTHORIZATION: f"{PROOF_SCHEME} {nonce} {mac}"}
        return cls(headers, proof_mac(secret, SERVER_LABEL, nonce))

    def check(self, address: ServerAddress, given: str | None) -> None:
        """Raise :class:`NotYours` unless the answer proved the server (where it must)."""
        if self._expected is None:
            return
        import hmac  # deferred: only where the kernel does not name the owner

        if not self._expected or not hmac.compare_digest(
            (given or "").encode(), self._expected.encode()
        ):
            assert isinstance(address, TcpAddress)
            raise NotYours(address, None)


def proof_mac(secret: str, label: str, nonce: str, *words: str) -> str:
    """HMAC-SHA256 under ``secret`` of ``label``, ``nonce`` and ``words``, one per line: the
    client's (:data:`CLIENT_LABEL`, with the method and path) and the server's
    (:data:`SERVER_LABEL`) are made with different labels, so neither stands in for the other."""
    import hashlib  # deferred: only a loopback server's requests
    import hmac

    message = "\n".join((label, nonce, *words)).encode("ascii", "replace")
    return hmac.new(secret.encode("ascii"), message, hashlib.sha256).hexdigest()


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


def query_server(address: str, timeout: float = DEFAULT_TIMEOUT) -> ServerReport:
    """``GET /api/status`` from one server and classify the answer. Never raises."""
    try:
        target = parse_server_address(address)
    except UsageError as exc:
        return ServerReport(address, "error", None, exc.message)
    return with_executable(_ask_status(target, timeout))


def _ask_status(target: ServerAddress, timeout: float) -> ServerReport:
    display = target.display
    # deferred (+0.6 ms, 1 module, on the cached check): only now that there is a server to
    # ask, the protocol (its records); tests/test_imports.py holds it to that
    from updater.protocol import STATUS_PATH, StatusLineError, parse_status_line

    peer = Peer()

    def report(state: ServerState, detail: str, status: StatusLine | None = None) -> ServerReport:
        return ServerReport(display, state, status, detail, peer_pid=peer.pid)

    deadline = time.monotonic() + timeout
    try:
        code, body = http_request(target, "GET", STATUS_PATH, timeout=timeout, peer=peer)
        if code == 503 and b'"stopping": true' in body and time.monotonic() < deadline:
            # A server that stopped as we asked, as a restart's new one takes over beside
            # it: a new connection reaches the new one (or nobody).
            left = deadline - time.monotonic()
            code, body = http_request(target, "GET", STATUS_PATH, timeout=left, peer=peer)
    except TimeoutError:
        return report("hung", f"no answer within {timeout:g}s")
    except BlockingIOError:
        # A Unix socket whose listen queue is full refuses at once (EAGAIN): someone listens
        # and does not accept, which is a hung server, never a dead one. No connection means
        # no peer credentials: the process that holds the socket's lock is the server.
        if isinstance(target, UnixAddress):
            peer.pid = socket_lock_holder(target.path)
        return report("hung", "its listen queue is full: it accepts no connection")
    except FileNotFoundError:
        return report("stale", "no such socket")
    except ConnectionRefusedError:
        return report("stale", "nobody listens")
    except NotYours as exc:
        return report("not-yours", str(exc))
    except NotHttp as exc:
        return report("garbage", f"answer is not HTTP ({exc})")
    except OSError as exc:
        return report("error", exc.strerror or str(exc))
    except Exception as exc:  # never let a strange server crash a status query
        return report("error", f"{exc.__class__.__name__}: {exc}")
    if code in (401, 403) and isinstance(target, TcpAddress):
        return report("error", refused_detail(target, code, STATUS_PATH))
    if code != 200:
        return report("garbage", f"HTTP {code} for {STATUS_PATH}")
    if len(body) > MAX_STATUS_BYTES:
        return report("garbage", "status line is larger than 64 KiB")
    try:
        strict_json(body)
    except NonStandardJson as exc:
        return report("garbage", f"not JSON ({exc})")
    except (ValueError, UnicodeDecodeError, RecursionError):
        pass  # parse_status_line says what is wrong with it
    try:
        line = parse_status_line(body)
    except StatusLineError as exc:
        state: ServerState = "garbage"
        if exc.kind == "foreign":
            state = "foreign"
        elif exc.kind == "no-protocol":
            state = "no-protocol"
        return report(state, str(exc))
    return report("live", f"mux {line.version}, protocol {line.protocol_version}", line)


def refused_detail(target: TcpAddress, code: int, path: str) -> str:
    """Why a loopback server refused a request: it answers only its owner."""
    try:
        where = tcp_secret_path(target.port)
    except MuxError:
        where = f"tcp-{target.port}{SECRET_SUFFIX} in the runtime dir"
    return (
        f"HTTP {code} for {path}: the server answers only the user who started it, whose "
        f"secret is in {where}"
    )


def socket_lock_holder(socket_path: str | Path) -> int | None:
    """The process holding the lock a server keeps beside its socket (``<socket>.lock``), as
    the OS says (Linux ``/proc/locks``); None when it does not say."""

    holders = lock_holders(f"{socket_path}{SOCKET_LOCK_SUFFIX}")
    return holders[0] if len(holders) == 1 else None


def with_executable(report: ServerReport) -> ServerReport:
    """Fill in which build the server runs from: its status line's word, else the OS's."""
    status = report.status
    if status is not None and status.executable:
        exists = os.path.exists(status.executable)
        return report._replace(
            executable=status.executable,
            executable_source="status-line",
            build_installed=exists,
        )
    pid = report.pid
    if pid is None or report.state in ("stale", "error"):
        return report
    found = process_executable(pid)
    if found is None:
        return report
    path, exists = found
    return report._replace(executable=path, executable_source="os", build_installed=exists)


def query_all(
    addresses: Iterable[str] | None = None, timeout: float = DEFAULT_TIMEOUT
) -> list[ServerReport]:
    """Query every address at once (one thread each): N hung servers cost one timeout.

    ``addresses`` defaults to :func:`discover_server_addresses` (which may raise
    :class:`UsageError` for a malformed ``MUX_SERVER_URL``). Reports keep the input order.
    """
    targets = discover_server_addresses() if addresses is None else list(addresses)
    if len(targets) <= 1:
        return [query_server(address, timeout) for address in targets]
    # deferred: this module is on a fast path (docs/build.md)
    import threading

    reports: list[ServerReport | None] = [None] * len(targets)

    def run(index: int, address: str) -> None:
        reports[index] = query_server(address, timeout)

    threads = [
        threading.Thread(target=run, args=(i, address), daemon=True, name=f"mux-status-{i}")
        for i, address in enumerate(targets)
    ]
    for thread in threads:
        thread.start()
    # Each query bounds itself; the slack only covers thread scheduling.
    deadline = time.monotonic() + timeout + 0.5
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [
        report
        if report is not None
        else ServerReport(address, "hung", None, f"no answer within {timeout:g}s")
        for address, report in zip(targets, reports, strict=True)
    ]
