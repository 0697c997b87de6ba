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
each other's socket. A folder other users can write is refused, and the lock (like the log
``mux server start`` opens) is never opened through a link
(:func:`updater.servers.control.check_socket_folder`, ``open_own_file``).

A loopback TCP port (``--url http://127.0.0.1:PORT``) is also possible, for
``MUX_SERVER_URL=http://...`` setups. Every user of the machine can reach it, so it answers
only its owner: at its start the server writes a new random secret into
``<runtime dir>/tcp-<port>.secret`` (0600, created with ``O_EXCL|O_NOFOLLOW`` in the private
runtime dir, removed when it stops), and a request must carry it
(``Authorization: Bearer <secret>``, compared in constant time); others get ``401``. Browser
requests are refused before that (``403``: an ``Origin`` or ``Sec-Fetch-*`` header, or a
non-loopback ``Host``), since a web page can reach loopback ports.

Connections are read by one thread, within bounds (:mod:`updater.daemon.connections`); the
log says what an operator needs, bounded (:mod:`updater.daemon.serverlog`).

Which executable runs a started server: see :func:`current_mux_command`."""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import hmac
import os
import re
import signal
import socket
import stat
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from updater.config import buildinfo
from updater.config.buildinfo import current_mux_command
from updater.config.settings import Settings, load_for
from updater.core.verdicts import restart_command_for
from updater.daemon.connections import (
    MAX_PENDING,
    Connections,
    Reply,
    Request,
    descriptor_budget,
    http_head,
    json_answer,
)
from updater.daemon.hub import MAX_WATCHERS, WatchHub
from updater.daemon.notices import ServerNotices
from updater.daemon.serverlog import LOG_LIMIT, ServerLog
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
from updater.servers import owner
from updater.servers.addresses import TcpAddress, UnixAddress, connect_host
from updater.servers.control import (
    ANSWERING,
    DIRECTORY_MODE,
    SHARES_PORT,
    AddressHeld,
    answering_error,
    as_address,
    check_socket_folder,
    ensure_private_directory,
    held_by,
    lock_path,
    open_own_file,
    write_secret_file,
)
from updater.servers.proof import (
    AUTHORIZATION,
    CHALLENGE_HEADER,
    CLIENT_LABEL,
    PROOF_HEADER,
    PROOF_SCHEME,
    SERVER_LABEL,
    proof_mac,
)
from updater.servers.runtime import read_tcp_secret, runtime_dir, tcp_secret_path
from updater.servers.status import query_server
from updater.servers.wire import DEFAULT_TIMEOUT
from updater.timestamps import rfc3339
from updater.urls import is_loopback_host

SOCKET_MODE = 0o600
SECRET_MODE = 0o600
# Connections the kernel queues before the server accepts them. socketserver's default of
# 5 made a burst of clients (a sidebar, status queries while the server is busy or stopped)
# fail at once with EAGAIN; a full queue still reads as hung, never as gone.
LISTEN_BACKLOG = 128
# What only a browser sends: a web page can reach a loopback port, and must get nothing.
_BROWSER_HEADERS = ("origin", "sec-fetch-site", "sec-fetch-mode", "sec-fetch-dest")
_NONCE = re.compile(r"[0-9a-f]{32}")  # a client's challenge: 16 random bytes, in hex
MAX_NONCES = 4096  # proofs remembered against a replay (each nonce is new: none repeats)
_WATCH_HEAD = http_head(200, {"Content-Type": WATCH_CONTENT_TYPE, "Cache-Control": "no-store"})


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


class _Service:
    """What the server answers: the status line, a watch stream, the shutdown request."""

    def __init__(
        self,
        fields: dict[str, Any],
        stopper: _Stopper,
        hub: WatchHub,
        log: ServerLog,
        *,
        secret: str | None,
    ) -> None:
        self._fields = fields
        self._status = json_answer(200, fields)
        self._stopper = stopper
        self._hub = hub
        self._log = log
        self._secret = secret  # a TCP server's: every request must carry it
        self._nonces = _SeenNonces()
        self.notices: ServerNotices | None = None

    def respond(self, request: Request) -> Reply:
        if self._secret is None:
            return self._route(request, _WATCH_HEAD)
        refused = self._refused(request)
        if refused is not None:
            return refused
        # The client's nonce, signed: how a server proves it is this user's where the
        # kernel does not say who owns the port (updater.servers.proof.Proof).
        nonce = request.header(CHALLENGE_HEADER)
        if nonce is None or not _NONCE.fullmatch(nonce):
            return self._route(request, _WATCH_HEAD)
        proof = f"{PROOF_HEADER}: {proof_mac(self._secret, SERVER_LABEL, nonce)}\r\n".encode()
        reply = self._route(request, _with_header(_WATCH_HEAD, proof))
        reply.data = _with_header(reply.data, proof) if reply.data else reply.data
        return reply

    def _route(self, request: Request, watch_head: bytes) -> Reply:
        route = request.path
        if route == STATUS_PATH and request.method == "GET":
            return Reply(self._status)
        if route == WATCH_PATH and request.method == "GET":
            return self._watch(watch_head)
        if route == SHUTDOWN_PATH and request.method == "POST":
            return Reply(
                json_answer(SHUTDOWN_ACCEPTED, {"shutting_down": True}),
                then=lambda: self._stopper.request("shutdown request"),
            )
        if route in (STATUS_PATH, WATCH_PATH, SHUTDOWN_PATH):
            return Reply(json_answer(405, {"error": f"{request.method[:20]} is not allowed"}))
        return Reply(json_answer(404, {"error": f"no such endpoint: {route[:200]}"}))

    def _refused(self, request: Request) -> Reply | None:
        """On a TCP port: refuse what a web page could send (cross-site or DNS rebinding),
        then anyone without the owner's secret."""
        host = request.header("Host")  # a browser always sends one; nc and curl -0 may not
        try:
            foreign_host = host is not None and not is_loopback_host(urlsplit_host(host))
        except ValueError:
            foreign_host = True
        if foreign_host or any(name in request.headers for name in _BROWSER_HEADERS):
            self._log.noisy("browser", "refused a browser request on the loopback port")
            return Reply(json_answer(403, {"error": "browser requests are refused"}))
        if not self._authorized(request):
            self._log.noisy(
                "unauthorized",
                "refused a request without its owner's secret on the loopback port "
                "(another user, or a client that cannot read the secret file)",
            )
            return Reply(
                json_answer(401, {"error": "this server answers only the user who started it"})
            )
        return None

    def _authorized(self, request: Request) -> bool:
        """The owner's secret itself (``Bearer``), or its HMAC of a nonce never seen before
        with this request's method and path (``Mux-Proof``: a client that could not ask the
        kernel who listens sends no secret to an unproven listener)."""
        assert self._secret is not None
        given = (request.header(AUTHORIZATION) or "").encode("latin-1", "replace")
        if hmac.compare_digest(given, f"Bearer {self._secret}".encode()):
            return True
        scheme, _, rest = given.decode("latin-1").partition(" ")
        nonce, _, mac = rest.partition(" ")
        if scheme != PROOF_SCHEME or not _NONCE.fullmatch(nonce) or nonce in self._nonces:
            return False
        expected = proof_mac(self._secret, CLIENT_LABEL, nonce, request.method, request.path)
        if not hmac.compare_digest(mac.encode("latin-1", "replace"), expected.encode()):
            return False
        self._nonces.add(nonce)  # a proof is good once: a copy of it is no proof
        return True

    def _watch(self, head: bytes) -> Reply:
        if self.notices is not None:
            self.notices.refresh_policy()  # what a new watcher is told follows the policy
        watcher = self._hub.admit(self._fields)
        if watcher is None:
            return Reply(
                json_answer(503, {"error": "too many watchers, or the server is stopping"})
            )
        hub = self._hub
        return Reply(takeover=lambda connection: hub.start(connection, watcher, head))


def _with_header(answer: bytes, header: bytes) -> bytes:
    """``answer`` (a whole HTTP head, or head and body) with ``header`` after its status line."""
    status_line, _, rest = answer.partition(b"\r\n")
    return status_line + b"\r\n" + header + rest


class _SeenNonces:
    """The client nonces this server has taken, the newest :data:`MAX_NONCES` of them."""

    def __init__(self) -> None:
        self._order: collections.deque[str] = collections.deque()
        self._seen: set[str] = set()

    def __contains__(self, nonce: str) -> bool:
        return nonce in self._seen

    def add(self, nonce: str) -> None:
        self._order.append(nonce)
        self._seen.add(nonce)
        if len(self._order) > MAX_NONCES:
            self._seen.discard(self._order.popleft())


def urlsplit_host(value: str) -> str:
    """The host name of a ``Host`` header (``host``, ``host:port``, ``[v6]:port``)."""
    from urllib.parse import urlsplit  # (stdlib; a TCP server's requests only)

    return urlsplit("//" + value).hostname or ""


def _acquire_lock(socket_path: Path, timeout: float) -> int:
    """Take the socket's lock, waiting a little for a server that is on its way out."""
    fd = open_own_file(lock_path(socket_path))
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


def _same_file(path: Path | str, identity: tuple[int, int]) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (info.st_dev, info.st_ino) == identity


def _bind_unix(
    socket_path: Path, cleanup: contextlib.ExitStack, lock_timeout: float, log: ServerLog
) -> socket.socket:
    ensure_private_directory(socket_path.parent)
    check_socket_folder(socket_path.parent)
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
        log(f"replacing stale socket {socket_path}")
        socket_path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)  # the socket is created 0600, with no window of a looser mode
    try:
        listener.bind(str(socket_path))
    except OSError as exc:
        listener.close()
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
    cleanup.callback(listener.close)  # runs first: stop listening, then unlink
    listener.listen(LISTEN_BACKLOG)
    return listener


def _bind_tcp(
    address: TcpAddress, cleanup: contextlib.ExitStack, replacing: int | None
) -> tuple[socket.socket, int, str]:
    """Listen on a loopback port; (the listener, its port, the owner's secret).

    On Linux the listener shares its port with later listeners of this same user only
    (``SO_REUSEPORT``: the kernel refuses every other uid), so that a restart starts the new
    server beside this one and the port is never free for another user to take
    (:mod:`updater.servers.takeover`). A server started without ``replacing`` still refuses
    an address where one of this user's servers listens. Another user's socket there is
    :class:`AddressHeld` (exit 6), never a failed start."""
    host = connect_host(address)
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    cleanup.callback(listener.close)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if SHARES_PORT:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listener.bind((host, address.port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            held = held_by(address)
            raise AddressHeld(
                f"cannot listen on {address.display}: it is held by "
                f"{held or 'a socket that does not listen'}"
            ) from None
        raise MuxError(f"cannot listen on {address.display}: {exc.strerror or exc}") from None
    port = int(listener.getsockname()[1])
    if replacing is None and address.port != 0 and owner.listeners(host, port, with_pids=False):
        # Bound, not yet listening: any listener the kernel names is another server's.
        raise answering_error(query_server(address.display, timeout=DEFAULT_TIMEOUT))
    other = "::1" if ":" not in host else "127.0.0.1"
    if replacing is None and any(
        holder.uid == os.geteuid() for holder in owner.listeners(other, port, with_pids=False) or []
    ):
        raise MuxError(
            f"cannot listen on {address.display}: a socket of yours listens on port {port} of "
            f"{other}, and two servers on one port number would share one secret file",
            hint="use another port",
        )
    secret = _write_secret(port, cleanup)  # before it listens: nothing is answered without
    listener.listen(LISTEN_BACKLOG)
    return listener, port, secret


def _write_secret(port: int, cleanup: contextlib.ExitStack) -> str:
    """A new secret for this server, in ``<runtime dir>/tcp-<port>.secret`` (0600, only this
    user's private runtime dir), removed when the server stops."""
    directory = runtime_dir()
    ensure_private_directory(directory)
    info = os.lstat(directory)
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != os.geteuid()
        or stat.S_IMODE(info.st_mode) != DIRECTORY_MODE
    ):
        raise MuxError(
            f"cannot keep a loopback server's secret in {directory}: it is not a private "
            "folder of this user's (mode 0700)"
        )
    path = tcp_secret_path(port)
    secret = os.urandom(32).hex()
    try:
        identity = write_secret_file(port, secret)
    except OSError as exc:
        raise MuxError(f"cannot write {path}: {exc.strerror or exc}") from None

    def remove_secret() -> None:
        # Only our own: a server that replaced this one wrote its own file (renamed into
        # place while ours still existed, so never under our inode) with its own secret.
        if _same_file(path, identity) and read_tcp_secret(port) == secret:
            with contextlib.suppress(OSError):
                os.unlink(path)

    cleanup.callback(remove_secret)
    return secret


def _install_signal_handlers(stopper: _Stopper, cleanup: contextlib.ExitStack) -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # signals are only delivered to the main thread
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous = signal.signal(
            signum, lambda number, _frame: stopper.request(signal.Signals(number).name)
        )
        cleanup.callback(signal.signal, signum, previous)


def _log_thread_errors(log: ServerLog, cleanup: contextlib.ExitStack) -> None:
    """An error in a thread of the server is one line of its log, not a traceback."""
    previous = threading.excepthook

    def hook(args: Any) -> None:
        if args.exc_type is SystemExit:
            return
        name = args.thread.name if args.thread is not None else "a thread"
        log(f"unexpected error in {name}: {args.exc_type.__name__}: {args.exc_value}")

    threading.excepthook = hook
    cleanup.callback(setattr, threading, "excepthook", previous)


def _connection_limits() -> tuple[int, int]:
    """(connections read at once, watchers): within the descriptors this process may open,
    so that a crowd of clients never runs the server out of them."""
    budget = descriptor_budget()
    pending = max(2, min(MAX_PENDING, budget // 4))
    return pending, max(1, min(MAX_WATCHERS, budget - pending))


def serve(
    address: Path | str,
    *,
    status_override: Mapping[str, Any] | None = None,
    lock_timeout: float = 5.0,
    log_limit: int = LOG_LIMIT,
    replacing: int | None = None,
) -> None:
    """Serve the control surface in the foreground until a shutdown request or SIGTERM/SIGINT.

    ``address`` is a socket path (``Path``, a path string or ``unix:///...``) or a loopback
    ``http://127.0.0.1:PORT`` (port 0 picks a free one; the log line names it). Refuses to
    start when something answers on the socket; replaces a stale socket file.
    ``status_override`` replaces status line fields: for tests that need another protocol;
    ``log_limit`` is the most the log (stderr, when it is a file) may grow to;
    ``replacing`` is the pid of this user's server that a restart replaces on a TCP port
    (:func:`_bind_tcp`).
    """
    target = as_address(address)
    started_at = rfc3339()
    log = ServerLog(limit=log_limit)
    stopper = _Stopper()
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(stopper.close)
        secret: str | None = None
        if isinstance(target, UnixAddress):
            listener = _bind_unix(target.path, cleanup, lock_timeout, log)
            display = target.display
        else:
            listener, port, secret = _bind_tcp(target, cleanup, replacing)
            display = TcpAddress(target.host, port).display
            secret_file = tcp_secret_path(port)
        fields = status_fields(started_at, status_override)
        max_pending, max_watchers = _connection_limits()
        hub = WatchHub(max_watchers=max_watchers)
        service = _Service(fields, stopper, hub, log, secret=secret)
        _install_signal_handlers(stopper, cleanup)
        _log_thread_errors(log, cleanup)
        log(
            f"mux server {fields.get('version')} (protocol {fields.get('protocol_version')}) "
            f"listening on {display}, pid {os.getpid()}, from {fields.get('executable')}"
        )
        if secret is not None:
            log(f"answering only its owner, who can read {secret_file}")
        service.notices = _start_notices(hub, fields, display, log)
        log.keep_head()
        connections = Connections(listener, service.respond, log, max_pending=max_pending)
        try:
            connections.run(stopper.wake_fd, lambda: stopper.requested)
        finally:
            log.flush()  # how many refusals and such went untold
            log(f"stopping on {stopper.reason or 'an error'}")
            hub.close(f"the server is stopping ({stopper.reason or 'an error'})")
            if service.notices is not None:
                service.notices.stop()


def _start_notices(
    hub: WatchHub, fields: Mapping[str, Any], display: str, log: Callable[[str], None]
) -> ServerNotices | None:
    """Watch the mux link and check for releases in the background (never fatal)."""

    info = buildinfo.current()

    def settings_now(*, say: bool = False) -> Settings:
        # A broken config.toml: each background check says so (in this log) until it is
        # fixed, and this server still watches its link and reads the policy meanwhile.
        try:
            return load_for(info)
        except ConfigError as exc:
            if say:
                log(exc.message)
            return load_for(info, user_config=False)

    try:
        settings = settings_now(say=True)
        notices = ServerNotices(
            hub,
            server_version=str(fields.get("version")),
            server_protocol=int(fields.get("protocol_version") or 0),
            restart_command=restart_command_for(display),
            settings=settings,
            reload=settings_now,
            development=info.development,
            check_command=current_mux_command,
            log=log,
            surface=display,
        )
        notices.start()
    except Exception as exc:  # the server serves its status line whatever happens here
        log(f"no update notices: {exc.__class__.__name__}: {exc}")
        return None
    if notices.layout is not None:
        log(f"watching {notices.layout.link} for updates")
    return notices
