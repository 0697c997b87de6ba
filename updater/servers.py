"""Find mux servers and read their status lines (the client side of the server status contract).

This module is on the fast path of ``mux update --check --max-age`` (a sidebar runs it every
few minutes), so it uses the standard library only and imports the costly parts late:
``http.client`` only when there is a server to ask, ``platformdirs`` only to locate the
runtime directory.

An *address* is either the filesystem path of a server's Unix socket or a loopback
``http://127.0.0.1:PORT`` URL. ``unix:///path.sock`` URLs are accepted wherever an address is
read and normalised to the plain path.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .errors import MuxError, UsageError
from .protocol import STATUS_PATH, StatusLine, StatusLineError, parse_status_line

if TYPE_CHECKING:
    import http.client
    from collections.abc import Callable, Iterable, Mapping, Sequence

ServerState = Literal["live", "stale", "hung", "garbage", "foreign", "no-protocol", "error"]

SERVER_URL_ENV = "MUX_SERVER_URL"
SOCKET_SUFFIX = ".sock"
SOCKET_LOCK_SUFFIX = ".lock"  # <socket>.lock: held by the server for as long as it serves
DEFAULT_SOCKET_NAME = "default"
DEFAULT_TIMEOUT = 1.0
# A status line is a few hundred bytes; never buffer whatever a confused server streams at us.
MAX_STATUS_BYTES = 64 * 1024


@dataclass(frozen=True)
class UnixAddress:
    """A server listening on a Unix socket."""

    path: Path

    @property
    def display(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class TcpAddress:
    """A server listening on a loopback TCP port (``MUX_SERVER_URL=http://127.0.0.1:PORT``)."""

    host: str
    port: int

    @property
    def display(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


ServerAddress = UnixAddress | TcpAddress


@dataclass(frozen=True)
class ServerReport:
    """What one address answered: its state and, when it is a mux server, its status line.

    ``executable`` is the resolved path of the build the server runs from: what its status
    line says, else what the operating system says of the process behind the socket (the
    kernel's peer credentials of a Unix socket, or the status line's pid), else None.
    ``build_installed`` says whether that build is still on disk (None: unknown).
    """

    address: str
    state: ServerState
    status: StatusLine | None
    detail: str
    peer_pid: int | None = None  # the process listening on a Unix socket, as the kernel says
    executable: str | None = None
    executable_source: Literal["status-line", "os"] | None = None
    build_installed: bool | None = None

    @property
    def pid(self) -> int | None:
        """The server's process: the kernel's word for a Unix socket, else the status line's."""
        if self.peer_pid is not None:
            return self.peer_pid
        return self.status.pid if self.status else None

    def to_json(self) -> dict[str, Any]:
        status = self.status
        return {
            "address": self.address,
            "state": self.state,
            "detail": self.detail,
            "status": status.to_json() if status else None,
            "version": status.version if status else None,
            "protocol_version": status.protocol_version if status else None,
            "pid": self.pid,
            "executable": self.executable or "unknown",
            "executable_source": self.executable_source,
            "build_installed": self.build_installed,
        }


def parse_server_address(text: str) -> ServerAddress:
    """Read ``unix:///path.sock``, ``http://127.0.0.1:PORT`` or a plain socket path.

    Raises :class:`UsageError` for anything else: plain ``http://`` is allowed only to a
    loopback address, since the status line and the shutdown request carry no authentication.
    """
    if "://" not in text:
        if not text:
            raise UsageError("empty server address")
        return UnixAddress(Path(text))
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
        return UnixAddress(Path(path))
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
    import warnings

    import platformdirs  # late: costly to import, and the --max-age path imports it anyway

    with warnings.catch_warnings():
        # platformdirs warns once when it falls back from a bad XDG_RUNTIME_DIR; the fallback
        # is the documented behaviour, so a status query stays quiet about it.
        warnings.simplefilter("ignore")
        try:
            return Path(platformdirs.user_runtime_dir("mux"))
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
    directory = runtime_dir()
    try:
        names = sorted(entry.name for entry in os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise MuxError(f"cannot list {directory}: {exc.strerror}") from None
    return [str(directory / name) for name in names if name.endswith(SOCKET_SUFFIX)]


class Peer:
    """The process behind a connected Unix socket, filled in when the connection is made."""

    pid: int | None = None


def peer_pid(sock: Any) -> int | None:
    """The pid of the process at the other end of a connected Unix socket, as the kernel
    tells it (``SO_PEERCRED`` on Linux, ``LOCAL_PEERPID`` on macOS); None elsewhere.

    For a listening server this is the process that listened, even before it accepts: a
    hung server is still known by it.
    """
    import socket
    import struct
    import sys

    try:
        if hasattr(socket, "SO_PEERCRED"):
            raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
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
    ``/proc`` and no libproc)."""
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
    if sys.platform == "darwin":
        import ctypes
        import ctypes.util

        try:
            libproc = ctypes.CDLL(ctypes.util.find_library("proc") or "libproc.dylib")
            buffer = ctypes.create_string_buffer(4096)
            length = libproc.proc_pidpath(pid, buffer, len(buffer))
        except (OSError, AttributeError):
            return None
        if length <= 0:
            return None
        path = buffer.raw[:length].decode(errors="replace")
        return path, os.path.exists(path)
    return None


def every_server_address(server_url: str | None) -> list[str]:
    """Every server on this machine that mux knows of: each socket in the runtime dir, and
    the one ``server_url`` names. What retention asks, so that ``MUX_SERVER_URL`` (which
    picks the server other commands talk to) never hides a server whose build must stay.

    Retention does not rest on this list (a server elsewhere holds its version's lock,
    :mod:`updater.inuse`); it names the servers in what is kept and places builds that take
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
        import http.client

        class UnixHTTPConnection(http.client.HTTPConnection):
            def __init__(self, socket_path: str, timeout: float, peer: Peer | None) -> None:
                super().__init__("localhost", timeout=timeout)
                self.socket_path = socket_path
                self.peer = peer

            def connect(self) -> None:
                import socket

                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.settimeout(self.timeout)
                    sock.connect(self.socket_path)
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
    if isinstance(address, UnixAddress):
        return _unix_connection_class()(str(address.path), timeout, peer)
    import http.client

    return http.client.HTTPConnection(address.host, address.port, timeout=timeout)


class Watchdog:
    """Cuts a connection at its deadline, so a server that drips bytes cannot outlast it.

    Socket timeouts bound each read, not the whole exchange; shutting the socket down wakes
    the blocked read, which then fails and is reported as a timeout.
    """

    def __init__(self, connection: http.client.HTTPConnection, timeout: float) -> None:
        import threading

        self.fired = False
        self._connection = connection
        self._timer = threading.Timer(timeout, self._cut)
        self._timer.daemon = True

    def _cut(self) -> None:
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


def http_request(
    address: ServerAddress, method: str, path: str, *, timeout: float, peer: Peer | None = None
) -> tuple[int, bytes]:
    """One request to a server; the whole exchange is bounded by ``timeout``.

    Returns (HTTP status, body up to :data:`MAX_STATUS_BYTES` + 1 bytes). Raises
    ``TimeoutError`` past the deadline, ``FileNotFoundError``/``ConnectionRefusedError`` when
    nobody listens, ``http.client.HTTPException`` when the answer is not HTTP, ``OSError``
    otherwise. ``peer`` (Unix sockets) learns the listening process once connected, even
    when no answer follows.
    """
    connection = open_connection(address, timeout, peer)
    try:
        with Watchdog(connection, timeout) as watchdog:
            try:
                connection.request(method, path, headers={"Accept": "application/json"})
                response = connection.getresponse()
                body = response.read(MAX_STATUS_BYTES + 1)
            except Exception as exc:
                if watchdog.fired:
                    raise TimeoutError(f"no complete answer within {timeout:g}s") from exc
                raise
            if watchdog.fired:  # a body read until close ends quietly when the watchdog cuts it
                raise TimeoutError(f"no complete answer within {timeout:g}s")
        return response.status, body
    finally:
        connection.close()


def query_server(address: str, timeout: float = DEFAULT_TIMEOUT) -> ServerReport:
    """``GET /api/status`` from one server and classify the answer. Never raises."""
    try:
        target = parse_server_address(address)
    except UsageError as exc:
        return ServerReport(address, "error", None, exc.message)
    return with_executable(_ask_status(target, timeout))


def _ask_status(target: ServerAddress, timeout: float) -> ServerReport:
    display = target.display
    import http.client

    peer = Peer()

    def report(state: ServerState, detail: str, status: StatusLine | None = None) -> ServerReport:
        return ServerReport(display, state, status, detail, peer_pid=peer.pid)

    try:
        code, body = http_request(target, "GET", STATUS_PATH, timeout=timeout, peer=peer)
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
    except http.client.HTTPException as exc:
        return report("garbage", f"answer is not HTTP ({exc.__class__.__name__})")
    except OSError as exc:
        return report("error", exc.strerror or str(exc))
    except Exception as exc:  # never let a strange server crash a status query
        return report("error", f"{exc.__class__.__name__}: {exc}")
    if code != 200:
        return report("garbage", f"HTTP {code} for {STATUS_PATH}")
    if len(body) > MAX_STATUS_BYTES:
        return report("garbage", "status line is larger than 64 KiB")
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


def socket_lock_holder(socket_path: str | Path) -> int | None:
    """The process holding the lock a server keeps beside its socket (``<socket>.lock``), as
    the OS says (Linux ``/proc/locks``); None when it does not say."""
    from .inuse import lock_holders

    holders = lock_holders(f"{socket_path}{SOCKET_LOCK_SUFFIX}")
    return holders[0] if len(holders) == 1 else None


def with_executable(report: ServerReport) -> ServerReport:
    """Fill in which build the server runs from: its status line's word, else the OS's."""
    from dataclasses import replace

    status = report.status
    if status is not None and status.executable:
        exists = os.path.exists(status.executable)
        return replace(
            report,
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
    return replace(report, executable=path, executable_source="os", build_installed=exists)


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
    return restart_command_for(report.address)


def restart_command_for(address: str) -> str:
    """``mux server restart --socket P`` (or ``--url U``): run through the mux link, it is the
    *installed* mux that stops the old server gracefully and starts a new one."""
    import shlex

    if address.startswith("http://"):
        return f"mux server restart --url {shlex.quote(address)}"
    return f"mux server restart --socket {shlex.quote(address)}"
