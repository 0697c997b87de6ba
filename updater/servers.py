"""Find mux servers and read their status lines (the client side of the server status contract).

This module is on the fast path of ``mux update --check --max-age`` (a sidebar runs it every
few minutes), so it uses the standard library only, imports ``socket`` and the protocol only
when there is a server to ask, and speaks the little HTTP a status line needs over a plain
socket (``http.client``, with ``email`` and ``ssl`` behind it, cost more than the rest of the
check). Its records are NamedTuples (:mod:`updater._records`), and the runtime directory is
platformdirs' answer without importing platformdirs in the usual cases (:mod:`updater._dirs`).

An *address* is either the filesystem path of a server's Unix socket or a loopback
``http://127.0.0.1:PORT`` URL. ``unix:///path.sock`` URLs are accepted wherever an address is
read and normalised to the plain path.
"""

from __future__ import annotations

import os
import time

from ._records import NamedTuple
from .errors import MuxError, UsageError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    import socket
    from collections.abc import Iterable, Mapping
    from pathlib import Path
    from typing import Any, Literal

    from .protocol import StatusLine

    ServerState = Literal["live", "stale", "hung", "garbage", "foreign", "no-protocol", "error"]

SERVER_URL_ENV = "MUX_SERVER_URL"
SOCKET_SUFFIX = ".sock"
DEFAULT_SOCKET_NAME = "default"
DEFAULT_TIMEOUT = 1.0
# A status line is a few hundred bytes; never buffer whatever a confused server streams at us.
MAX_STATUS_BYTES = 64 * 1024


class UnixAddress(NamedTuple):
    """A server listening on a Unix socket."""

    socket_path: str  # a string: asking a server needs no pathlib

    @property
    def path(self) -> Path:
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


class ServerReport(NamedTuple):
    """What one address answered: its state and, when it is a mux server, its status line."""

    address: str
    state: ServerState
    status: StatusLine | None
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "state": self.state,
            "detail": self.detail,
            "status": self.status.to_json() if self.status else None,
        }


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

    from .urls import is_loopback_host

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
    from pathlib import Path

    return Path(_runtime_dir())


def _runtime_dir() -> str:
    from ._dirs import user_runtime_dir

    try:
        return user_runtime_dir()
    except (OSError, RuntimeError) as exc:
        raise MuxError(f"no usable runtime directory for mux servers: {exc}") from None


def default_socket_path(name: str = DEFAULT_SOCKET_NAME) -> Path:
    """``runtime_dir()/<name>.sock``."""
    return runtime_dir() / f"{name}{SOCKET_SUFFIX}"


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


class NotHttp(Exception):
    """What a server answered is not an HTTP response."""


# A status line's answer has a few headers; anything past this before the body is not one.
_MAX_HEAD_BYTES = 16 * 1024


def _connect(address: ServerAddress, timeout: float) -> socket.socket:
    import socket

    if isinstance(address, TcpAddress):
        return socket.create_connection((address.host, address.port), timeout=timeout)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(address.socket_path)
    except BaseException:
        sock.close()
        raise
    return sock


def http_request(
    address: ServerAddress, method: str, path: str, *, timeout: float
) -> tuple[int, bytes]:
    """One HTTP/1.0 request to a server; the whole exchange is bounded by ``timeout``.

    Returns (HTTP status, body up to :data:`MAX_STATUS_BYTES` + 1 bytes). Raises
    ``TimeoutError`` past the deadline (every read waits only for what is left of it, so a
    server that drips bytes cannot outlast it), ``FileNotFoundError``/
    ``ConnectionRefusedError`` when nobody listens, :class:`NotHttp` when the answer is not
    HTTP, ``OSError`` otherwise.
    """
    deadline = time.monotonic() + timeout
    host = (
        "localhost" if isinstance(address, UnixAddress) else address.display.removeprefix("http://")
    )
    request = (
        f"{method} {path} HTTP/1.0\r\nHost: {host}\r\nAccept: application/json\r\n"
        "Content-Length: 0\r\n\r\n"
    )
    with _connect(address, timeout) as sock:
        sock.sendall(request.encode("ascii"))
        received = b""
        status, length, head_end = 0, None, -1
        while True:
            if head_end < 0:
                head_end = received.find(b"\r\n\r\n")
                if head_end >= 0:
                    status = _status_code(received[:head_end])
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
    body = received[head_end + 4 :]
    if length is not None:
        body = body[:length]
    return status, body[: MAX_STATUS_BYTES + 1]


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
    display = target.display
    # Only now that there is a server to ask: the protocol (its records) and the socket.
    from .protocol import STATUS_PATH, StatusLineError, parse_status_line

    try:
        status, body = http_request(target, "GET", STATUS_PATH, timeout=timeout)
    except TimeoutError:
        return ServerReport(display, "hung", None, f"no answer within {timeout:g}s")
    except FileNotFoundError:
        return ServerReport(display, "stale", None, "no such socket")
    except ConnectionRefusedError:
        return ServerReport(display, "stale", None, "nobody listens")
    except NotHttp as exc:
        return ServerReport(display, "garbage", None, f"answer is not HTTP ({exc})")
    except OSError as exc:
        return ServerReport(display, "error", None, exc.strerror or str(exc))
    except Exception as exc:  # never let a strange server crash a status query
        return ServerReport(display, "error", None, f"{exc.__class__.__name__}: {exc}")
    if status != 200:
        return ServerReport(display, "garbage", None, f"HTTP {status} for {STATUS_PATH}")
    if len(body) > MAX_STATUS_BYTES:
        return ServerReport(display, "garbage", None, "status line is larger than 64 KiB")
    try:
        line = parse_status_line(body)
    except StatusLineError as exc:
        state: ServerState = "garbage"
        if exc.kind == "foreign":
            state = "foreign"
        elif exc.kind == "no-protocol":
            state = "no-protocol"
        return ServerReport(display, state, None, str(exc))
    return ServerReport(
        display, "live", line, f"mux {line.version}, protocol {line.protocol_version}"
    )


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


def restart_command(report: ServerReport) -> str:
    """The command that restarts the server behind ``report`` with the current mux."""
    import shlex

    if report.address.startswith("http://"):
        return f"mux server restart --url {shlex.quote(report.address)}"
    return f"mux server restart --socket {shlex.quote(report.address)}"
