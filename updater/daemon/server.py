"""mux's server: a small daemon that serves the status line, its events and a shutdown request.

It hosts no terminal sessions. It exists so that the server status contract
(:mod:`updater.protocol`) has a real implementation: ``mux server start | stop | restart``
run it, the tests and the rehearsal talk to it, and the restart command mux prints
(``mux server restart --socket P``) works against it.

- ``GET /api/status`` answers the status line: ``service``, ``protocol_version`` and
  ``version`` from :func:`updater.config.buildinfo.current`, ``pid``, ``started_at`` (RFC 3339),
  ``executable`` (the resolved build it runs from, :func:`updater.config.buildinfo.executable`).
- ``GET /api/watch`` streams the status line and then events, one JSON object per line
  (:mod:`updater.daemon.hub`, fed by :mod:`updater.daemon.notices`: the mux link moving, and the
  background update check).
- ``POST /api/shutdown`` answers 202, then the server ends every watch stream, closes its
  socket, removes the socket file and exits. SIGTERM and SIGINT do the same.

Each server listens on a Unix socket (mode 0600, in a 0700 directory) and holds an ``flock``
on ``<socket>.lock`` for its whole life, so two servers starting on one path cannot remove
each other's socket. A loopback TCP port (``--url http://127.0.0.1:PORT``) is also possible,
for ``MUX_SERVER_URL=http://...`` setups; it refuses browser requests (any ``Origin`` header
or a non-loopback ``Host``), since a web page can reach loopback ports.

Which executable runs a started server: see :func:`current_mux_command`."""

from __future__ import annotations

import contextlib
import fcntl
import http.server
import json
import os
import selectors
import signal
import socket
import socketserver
import stat
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from updater.config import buildinfo
from updater.config.buildinfo import current_mux_command
from updater.config.settings import load_for
from updater.core.verdicts import restart_command_for
from updater.daemon.hub import WatchHub
from updater.daemon.notices import ServerNotices
from updater.errors import ConfigError, MuxError
from updater.protocol import (
    SERVICE_NAME,
    SHUTDOWN_ACCEPTED,
    SHUTDOWN_PATH,
    STATUS_PATH,
    WATCH_CONTENT_TYPE,
    WATCH_PATH,
    StatusLine,
)
from updater.servers.client import (
    DEFAULT_TIMEOUT,
    TcpAddress,
    UnixAddress,
    query_server,
)
from updater.servers.control import (
    ANSWERING,
    answering_error,
    as_address,
    ensure_private_directory,
    lock_path,
)
from updater.text import safe_text
from updater.timestamps import rfc3339
from updater.urls import is_loopback_host

SOCKET_MODE = 0o600
# A client that connects and says nothing must not hold a handler thread forever.
REQUEST_TIMEOUT = 10.0
# A request body we read (and ignore) before answering; shutdown takes none.
MAX_BODY_BYTES = 64 * 1024


def _log(message: str) -> None:
    stamp = rfc3339()
    print(f"{stamp} {safe_text(message)}", file=sys.stderr, flush=True)


def status_fields(
    started_at: str, status_override: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The status line this process serves. ``status_override`` is for tests only."""
    info = buildinfo.current()
    # The wire shape is protocol.StatusLine's, so `mux-release protocol` fingerprints it.
    fields = StatusLine(
        service=SERVICE_NAME,
        protocol_version=info.protocol_version,
        version=info.version,
        pid=os.getpid(),
        started_at=started_at,
        executable=buildinfo.executable(),
    ).to_json()
    fields.update(status_override or {})
    return fields


class _Stopper:
    """A stop request from a handler thread or a signal handler, waking the accept loop.

    A flag and a self-pipe, not an Event: a signal handler must not take locks the
    interrupted main thread might hold.
    """

    def __init__(self) -> None:
        self.requested = False
        self.reason = ""
        self.wake_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)

    def request(self, reason: str) -> None:
        if not self.requested:
            self.reason = reason
            self.requested = True
        with contextlib.suppress(OSError):  # a full pipe already wakes the loop
            os.write(self._write_fd, b"\0")

    def close(self) -> None:
        os.close(self.wake_fd)
        os.close(self._write_fd)


@dataclass
class _Control:
    status_fields: dict[str, Any]
    stopper: _Stopper
    refuse_browsers: bool
    hub: WatchHub


# Connections the kernel queues before the server accepts them. socketserver's default of
# 5 made a burst of clients (a sidebar, status queries while the server is busy or stopped)
# fail at once with EAGAIN; a full queue still reads as hung, never as gone.
LISTEN_BACKLOG = 128


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False
    timeout = 1.0  # handle_request() never blocks longer, even if a connection vanished
    request_queue_size = LISTEN_BACKLOG
    control: _Control


class _TcpServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    timeout = 1.0
    request_queue_size = LISTEN_BACKLOG
    control: _Control


class _Tcp6Server(_TcpServer):
    address_family = socket.AF_INET6


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection
    server_version = "mux-server"
    timeout = REQUEST_TIMEOUT

    @property
    def _control(self) -> _Control:
        return cast(_UnixServer | _TcpServer, self.server).control

    def address_string(self) -> str:
        # A Unix socket peer has no address; the base class would index into "".
        return self.client_address[0] if isinstance(self.client_address, tuple) else "local"

    def log_message(self, format: str, *args: Any) -> None:
        _log(f"{self.address_string()} {format % args}")

    def _route(self) -> str:
        return self.path.split("?", 1)[0]

    def _send_json(self, code: int, doc: Mapping[str, Any]) -> None:
        body = json.dumps(doc, sort_keys=True).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _begin_stream(self, accepted: bool) -> None:
        if not accepted:
            self._send_json(503, {"error": "too many watchers, or the server is stopping"})
            return
        self.send_response(200)
        self.send_header("Content-Type", WATCH_CONTENT_TYPE)
        self.send_header("Cache-Control", "no-store")
        self.end_headers()

    def _browser_refused(self) -> bool:
        """On a TCP port, refuse what a web page could send (cross-site or DNS rebinding)."""
        if not self._control.refuse_browsers:
            return False
        try:
            hostname = urlsplit("//" + self.headers.get("Host", "")).hostname or ""
        except ValueError:
            hostname = ""
        if self.headers.get("Origin") is not None or not is_loopback_host(hostname):
            self._send_json(403, {"error": "browser requests are refused"})
            return True
        return False

    def do_GET(self) -> None:
        if self._browser_refused():
            return
        if self._route() == STATUS_PATH:
            self._send_json(200, self._control.status_fields)
        elif self._route() == WATCH_PATH:
            self._control.hub.serve(
                self.connection, self._begin_stream, self._control.status_fields
            )
        else:
            self._send_json(404, {"error": f"no such endpoint: {self._route()}"})

    def do_POST(self) -> None:
        # Read any body first: closing a TCP socket with unread input resets the connection
        # and can destroy the answer before the client reads it.
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        if 0 < length <= MAX_BODY_BYTES:
            self.rfile.read(length)
        if self._browser_refused():
            return
        if self._route() == SHUTDOWN_PATH:
            self._send_json(SHUTDOWN_ACCEPTED, {"shutting_down": True})
            self._control.stopper.request("shutdown request")
        else:
            self._send_json(404, {"error": f"no such endpoint: {self._route()}"})


def _acquire_lock(socket_path: Path, timeout: float) -> int:
    """Take the socket's lock, waiting a little for a server that is on its way out."""
    path = lock_path(socket_path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise MuxError(f"cannot open {path}: {exc.strerror}") from None
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                pass
            probe = query_server(str(socket_path), timeout=min(DEFAULT_TIMEOUT, timeout))
            if probe.state in ANSWERING:
                raise answering_error(probe)
            if time.monotonic() >= deadline:
                raise MuxError(
                    f"another mux server is starting or stopping on {socket_path}",
                    hint="try again in a moment",
                )
            time.sleep(0.02)
    except BaseException:
        os.close(fd)
        raise


def _same_file(path: Path, identity: tuple[int, int]) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (info.st_dev, info.st_ino) == identity


def _bind_unix(
    socket_path: Path, cleanup: contextlib.ExitStack, lock_timeout: float
) -> _UnixServer:
    ensure_private_directory(socket_path.parent)
    lock_fd = _acquire_lock(socket_path, lock_timeout)
    cleanup.callback(os.close, lock_fd)  # closing the descriptor releases the flock
    probe = query_server(str(socket_path), timeout=DEFAULT_TIMEOUT)
    if probe.state in ANSWERING:  # a listener that does not take our lock
        raise answering_error(probe)
    try:
        info = os.lstat(socket_path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(info.st_mode):
            raise MuxError(f"{socket_path} exists and is not a socket; refusing to replace it")
        # We hold the lock and nobody answers: the socket's server is gone.
        _log(f"replacing stale socket {socket_path}")
        socket_path.unlink(missing_ok=True)
    old_umask = os.umask(0o177)  # the socket is created 0600, with no window of a looser mode
    try:
        server = _UnixServer(str(socket_path), _Handler)
    except OSError as exc:
        raise MuxError(f"cannot listen on {socket_path}: {exc.strerror or exc}") from None
    finally:
        os.umask(old_umask)
    os.chmod(socket_path, SOCKET_MODE)
    info = os.lstat(socket_path)
    identity = (info.st_dev, info.st_ino)

    def remove_socket() -> None:
        # Only our own socket: never one that replaced it.
        if _same_file(socket_path, identity):
            socket_path.unlink(missing_ok=True)

    cleanup.callback(remove_socket)
    cleanup.callback(server.server_close)  # runs first: stop listening, then unlink
    return server


def _bind_tcp(address: TcpAddress, cleanup: contextlib.ExitStack) -> _TcpServer:
    host = "127.0.0.1" if address.host == "localhost" else address.host
    server_class = _Tcp6Server if ":" in host else _TcpServer
    try:
        server = server_class((host, address.port), _Handler)
    except OSError as exc:
        raise MuxError(f"cannot listen on {address.display}: {exc.strerror or exc}") from None
    cleanup.callback(server.server_close)
    return server


def _serve_until_stopped(server: _UnixServer | _TcpServer, stopper: _Stopper) -> None:
    # Our own loop instead of serve_forever(): that one polls for its shutdown flag, which
    # delays every stop by up to its poll interval; the self-pipe wakes us at once.
    with selectors.DefaultSelector() as selector:
        selector.register(server.fileno(), selectors.EVENT_READ, "listener")
        selector.register(stopper.wake_fd, selectors.EVENT_READ, "wake")
        while not stopper.requested:
            for key, _events in selector.select():
                if key.data == "listener" and not stopper.requested:
                    server.handle_request()


def _install_signal_handlers(stopper: _Stopper, cleanup: contextlib.ExitStack) -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # signals are only delivered to the main thread
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous = signal.signal(
            signum, lambda number, _frame: stopper.request(signal.Signals(number).name)
        )
        cleanup.callback(signal.signal, signum, previous)


def serve(
    address: Path | str,
    *,
    status_override: Mapping[str, Any] | None = None,
    lock_timeout: float = 5.0,
) -> None:
    """Serve the control surface in the foreground until a shutdown request or SIGTERM/SIGINT.

    ``address`` is a socket path (``Path``, a path string or ``unix:///...``) or a loopback
    ``http://127.0.0.1:PORT`` (port 0 picks a free one; the log line names it). Refuses to
    start when something answers on the socket; replaces a stale socket file.
    ``status_override`` replaces status line fields: for tests that need another protocol.
    """
    target = as_address(address)
    started_at = rfc3339()
    stopper = _Stopper()
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(stopper.close)
        server: _UnixServer | _TcpServer
        if isinstance(target, UnixAddress):
            server = _bind_unix(target.path, cleanup, lock_timeout)
            display = target.display
        else:
            server = _bind_tcp(target, cleanup)
            display = TcpAddress(target.host, server.server_address[1]).display
        fields = status_fields(started_at, status_override)
        hub = WatchHub()
        server.control = _Control(
            fields, stopper, refuse_browsers=isinstance(target, TcpAddress), hub=hub
        )
        _install_signal_handlers(stopper, cleanup)
        _log(
            f"mux server {fields.get('version')} (protocol {fields.get('protocol_version')}) "
            f"listening on {display}, pid {os.getpid()}, from {fields.get('executable')}"
        )
        notices = _start_notices(hub, fields, display)
        try:
            _serve_until_stopped(server, stopper)
        finally:
            _log(f"stopping on {stopper.reason or 'an error'}")
            hub.close(f"the server is stopping ({stopper.reason or 'an error'})")
            if notices is not None:
                notices.stop()


def _start_notices(hub: WatchHub, fields: Mapping[str, Any], display: str) -> Any:
    """Watch the mux link and check for releases in the background (never fatal)."""

    info = buildinfo.current()
    try:
        try:
            settings = load_for(info)
        except ConfigError as exc:
            # The user's config.toml is broken: each background check says so (in this log)
            # until it is fixed, and this server still watches its link meanwhile.
            _log(exc.message)
            settings = load_for(info, user_config=False)
        notices = ServerNotices(
            hub,
            server_version=str(fields.get("version")),
            server_protocol=int(fields.get("protocol_version") or 0),
            restart_command=restart_command_for(display),
            settings=settings,
            development=info.development,
            check_command=current_mux_command,
            log=_log,
            surface=display,
        )
        notices.start()
    except Exception as exc:  # the server serves its status line whatever happens here
        _log(f"no update notices: {exc.__class__.__name__}: {exc}")
        return None
    if notices.layout is not None:
        _log(f"watching {notices.layout.link} for updates")
    return notices
