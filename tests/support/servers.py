"""Real mux servers and misbehaving fakes on real Unix sockets, for tests.

- :func:`start_mux_server` runs a real server process (``updater.daemon.server.serve``),
  optionally answering another protocol version, and waits until it is live.
- :func:`start_fake_server` listens on a real Unix socket in a thread and misbehaves in one
  chosen way (hangs, drips, answers garbage, another service, no protocol_version, ...).
- :func:`make_stale_socket` leaves the socket file of a server that died.
- :func:`write_fake_mux` writes an executable that plays "another mux build" for
  ``start``/``restart(executable=...)``.
- The :func:`mux_runtime_dir` fixture (import it into a test module) points
  ``XDG_RUNTIME_DIR`` at a fresh private directory and stops everything afterwards.

Everything started here is also stopped at interpreter exit.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

from updater.servers.runtime import runtime_dir
from updater.servers.status import query_server

FakeKind = Literal[
    "hung",  # listens, never accepts: the connection succeeds, no answer ever comes
    "drip",  # answers a valid status line one byte at a time, slower than any timeout
    "drip-until-close",  # the same without Content-Length: the body ends when the socket does
    "garbage",  # HTTP 200 with an HTML body
    "not-http",  # answers bytes that are not HTTP at all
    "http-error",  # HTTP 500
    "huge",  # HTTP 200 with a 100 KiB body
    "foreign",  # another service's JSON; refuses POST /api/shutdown with 404
    "no-protocol",  # a mux status line without protocol_version
    "raw",  # answers exactly the given payload bytes
    "old-mux",  # a protocol-1 mux: a status line, and 404 for anything else (no watch stream)
]

SERVE_SCRIPT = (
    "import json, sys\n"
    "from updater.daemon.server import serve\n"
    "serve(sys.argv[1], status_override=json.loads(sys.argv[2]), **json.loads(sys.argv[3]))\n"
)

_processes: list[subprocess.Popen[bytes]] = []
_fakes: list[FakeServer] = []


def wait_until(condition: Any, timeout: float = 20.0, what: str = "a condition") -> None:
    """Poll ``condition`` (backing off to 0.2 s) until it holds; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def _override(protocol_version: int | None, version: str | None) -> dict[str, Any]:
    override: dict[str, Any] = {}
    if protocol_version is not None:
        override["protocol_version"] = protocol_version
    if version is not None:
        override["version"] = version
    return override


def _spawn_server(
    address: str,
    override: dict[str, Any],
    log_path: Path,
    env: dict[str, str] | None = None,
    *,
    serve_args: dict[str, Any] | None = None,
    preexec_fn: Any = None,
) -> subprocess.Popen[bytes]:
    with log_path.open("w+b") as log:  # read and write, as `mux server start` opens it
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                SERVE_SCRIPT,
                address,
                json.dumps(override),
                json.dumps(serve_args or {}),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env=env,
            preexec_fn=preexec_fn,
        )
    _processes.append(process)
    return process


def _check_alive(process: subprocess.Popen[bytes], log_path: Path) -> None:
    if process.poll() is not None:
        raise AssertionError(
            f"test server exited with {process.returncode}: {log_path.read_text(errors='replace')}"
        )


def server_log(runtime_dir: Path, name: str) -> Path:
    """Where a server started by this module logs: beside ``runtime_dir``, not in it, so
    that a test may remove the runtime dir and let the server create it."""
    logs = runtime_dir.parent / f"{runtime_dir.name}-test-logs"
    logs.mkdir(exist_ok=True)
    return logs / f"{name}.log"


def start_mux_server(
    runtime_dir: Path,
    name: str,
    *,
    protocol_version: int | None = None,
    version: str | None = None,
    timeout: float = 15.0,
    env: dict[str, str] | None = None,
    serve_args: dict[str, Any] | None = None,
    preexec_fn: Any = None,
    **fields: Any,
) -> tuple[int, Path]:
    """Run a real server on ``runtime_dir/<name>.sock``; return (pid, socket path) once live.

    ``protocol_version``/``version`` (and any other status line ``fields``, e.g.
    ``executable=None`` for a server that does not say) make it answer as another mux build
    would; ``env`` is its environment (default: this process's); ``serve_args`` more
    arguments of ``serve`` (``log_limit``); ``preexec_fn`` runs in the child before it
    starts (a lower descriptor limit).
    """
    socket_path = runtime_dir / f"{name}.sock"
    log_path = server_log(runtime_dir, name)
    override = {**_override(protocol_version, version), **fields}
    process = _spawn_server(
        str(socket_path), override, log_path, env, serve_args=serve_args, preexec_fn=preexec_fn
    )

    def live() -> bool:
        _check_alive(process, log_path)
        return query_server(str(socket_path)).state == "live"

    wait_until(live, timeout, f"a mux server on {socket_path}")
    return process.pid, socket_path


def start_mux_server_url(
    log_dir: Path,
    *,
    protocol_version: int | None = None,
    timeout: float = 15.0,
    serve_args: dict[str, Any] | None = None,
) -> tuple[int, str]:
    """Run a real server on a free loopback TCP port; return (pid, ``http://127.0.0.1:PORT``).

    The server picks the port (port 0) and the helper reads it from the server's log line.
    Its log is :func:`tcp_server_log` of the URL.
    """
    log_path = server_log(log_dir, f"tcp-{len(_processes)}")
    process = _spawn_server(
        "http://127.0.0.1:0", _override(protocol_version, None), log_path, serve_args=serve_args
    )
    found: list[str] = []

    def listening() -> bool:
        _check_alive(process, log_path)
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", log_path.read_text())
        if match:
            found[:] = [match.group(1)]
        return bool(found) and query_server(found[0]).state == "live"

    wait_until(listening, timeout, "a mux server on a loopback port")
    _tcp_logs[found[0]] = log_path
    return process.pid, found[0]


_tcp_logs: dict[str, Path] = {}


def tcp_server_log(url: str) -> Path:
    """The log of the server :func:`start_mux_server_url` started on ``url``."""
    return _tcp_logs[url]


def tcp_secret(url: str) -> str:
    """The owner secret of this user's server on ``url`` (what mux's clients send)."""
    port = int(url.rsplit(":", 1)[1])
    return (runtime_dir() / f"tcp-{port}.secret").read_text().strip()


class FakeServer:
    """A misbehaving server on a real Unix socket, run by threads of the test process."""

    def __init__(self, kind: FakeKind, socket_path: Path, payload: bytes = b"") -> None:
        self.kind = kind
        self.socket_path = socket_path
        self.payload = payload
        self._closed = threading.Event()
        self._connections: list[socket.socket] = []
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(socket_path))
        self._listener.listen(64)
        if kind != "hung":
            threading.Thread(target=self._accept_loop, daemon=True).start()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            self._connections.append(connection)
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _read_request(self, connection: socket.socket) -> bytes:
        connection.settimeout(5.0)
        data = b""
        with contextlib.suppress(OSError):
            while b"\r\n\r\n" not in data and len(data) < 65536:
                chunk = connection.recv(4096)
                if not chunk:
                    break
                data += chunk
        return data

    def _response(self, request: bytes) -> bytes:
        def http(status: str, body: bytes, content_type: str = "application/json") -> bytes:
            head = f"HTTP/1.0 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
            return head.encode() + body

        if self.kind == "raw":
            return self.payload
        if self.kind == "old-mux":
            if request.startswith(b"GET /api/status "):
                line = b'{"service": "mux", "protocol_version": 1, "version": "0.9.0", "pid": 1}'
                return http("200 OK", line)
            return http("404 Not Found", b'{"error": "no such endpoint"}')
        if self.kind == "not-http":
            return b"SSH-2.0-OpenSSH_9.6\r\n"
        if request.startswith(b"POST"):
            return http("404 Not Found", b'{"error": "no such endpoint"}')
        if self.kind == "garbage":
            return http("200 OK", b"<html>not a status line</html>", "text/html")
        if self.kind == "http-error":
            return http("500 Internal Server Error", b"")
        if self.kind == "huge":
            return http("200 OK", b"[" + b"0," * 50_000 + b"0]")
        if self.kind == "foreign":
            return http("200 OK", b'{"service": "tmux", "protocol_version": 3, "version": "3.4"}')
        if self.kind == "no-protocol":
            return http("200 OK", b'{"service": "mux", "version": "0.0.9", "pid": 1}')
        raise AssertionError(f"no canned answer for {self.kind}")

    def _answer(self, connection: socket.socket) -> None:
        with contextlib.suppress(OSError):
            request = self._read_request(connection)
            if self.kind in ("drip", "drip-until-close"):
                body = b'{"service": "mux", "protocol_version": 1, "version": "0.0.1"}'
                length = b"Content-Length: %d\r\n" % len(body) if self.kind == "drip" else b""
                answer = b"HTTP/1.0 200 OK\r\n" + length + b"\r\n" + body
                for byte in answer:
                    if self._closed.wait(0.1):  # a slow sender, not test synchronisation
                        break
                    connection.sendall(bytes([byte]))
            else:
                connection.sendall(self._response(request))
            connection.shutdown(socket.SHUT_WR)
        connection.close()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self._listener.close()
        for connection in self._connections:
            with contextlib.suppress(OSError):
                connection.close()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()


def start_fake_server(kind: FakeKind, socket_path: Path, *, payload: bytes = b"") -> FakeServer:
    """Listen on ``socket_path`` and misbehave as ``kind`` says; closed by :func:`stop_all`."""
    fake = FakeServer(kind, socket_path, payload)
    _fakes.append(fake)
    return fake


def make_stale_socket(path: Path) -> Path:
    """The socket file of a dead server: bound, then closed without listening or unlinking."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()
    return path


def write_fake_mux(directory: Path, *, protocol_version: int, version: str) -> Path:
    """An executable that runs ``mux server run --socket P`` as another mux build would."""
    path = directory / f"mux-{version}"
    path.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "from updater.daemon.server import serve\n"
        "args = sys.argv[1:]\n"
        "assert args[:3] == ['server', 'run', '--socket'], args\n"
        f"serve(args[3], status_override={{'protocol_version': {protocol_version}, 'version': {version!r}}})\n"
    )
    path.chmod(0o755)
    return path


def stop_servers_in(directory: Path) -> None:
    """SIGTERM every live mux server whose socket is in ``directory`` (e.g. ones start() left)."""
    if not directory.is_dir():
        return
    for socket_path in directory.glob("*.sock"):
        report = query_server(str(socket_path), timeout=0.5)
        if report.state == "live" and report.status and report.status.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(report.status.pid, signal.SIGTERM)
            wait_until(
                lambda path=socket_path: query_server(str(path), timeout=0.5).state != "live",
                10.0,
                f"the server on {socket_path} to stop",
            )


def stop_all() -> None:
    """Stop every process and fake server this module started."""
    while _fakes:
        _fakes.pop().close()
    while _processes:
        process = _processes.pop()
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


atexit.register(stop_all)


@pytest.fixture
def mux_runtime_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private ``XDG_RUNTIME_DIR`` for this test; yields mux's runtime dir inside it.

    The directory is short (under /tmp) because a Unix socket path must fit in ~104 bytes.
    """
    base = Path(tempfile.mkdtemp(prefix="mux-t-", dir="/tmp" if Path("/tmp").is_dir() else None))
    base.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base))
    monkeypatch.delenv("MUX_SERVER_URL", raising=False)
    directory = runtime_dir()
    directory.mkdir(mode=0o700)
    try:
        yield directory
    finally:
        stop_all()
        stop_servers_in(directory)
        shutil.rmtree(base, ignore_errors=True)
