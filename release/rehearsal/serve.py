"""Serve a release feed folder over HTTP on loopback (the rehearsal, tests, local mirrors)."""

from __future__ import annotations

import functools
import http.server
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up (a retry, a refused download, a test's timeout) is not the
        # server's error: said on stderr it lands in the output of whoever shares it (a mux
        # run in the same process). Anything else is printed as the stdlib does.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


@contextmanager
def serving(
    handler: Callable[..., http.server.BaseHTTPRequestHandler],
    *,
    port: int = 0,
    host: str = "127.0.0.1",
    tls: ssl.SSLContext | None = None,
    handshake_on_connect: bool = True,
) -> Iterator[http.server.ThreadingHTTPServer]:
    """Serve ``handler`` on ``host`` (a loopback address, default 127.0.0.1) and ``port``
    (default a free one), over TLS with ``tls``;
    yields the running server. The one lifecycle of every loopback server the rehearsal and
    the tests run.

    Requests run in daemon threads, so leaving never waits for a handler that still talks
    (a test's slow or endless one); the server itself is shut down and joined.
    ``handshake_on_connect=False`` does a TLS handshake in the handler's thread, not in the
    accepting one (a client that never speaks cannot stall the others).
    """
    server = _Server((host, port), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(
            server.socket, server_side=True, do_handshake_on_connect=handshake_on_connect
        )
    thread = threading.Thread(
        target=server.serve_forever, args=(0.05,), name="serve_handler", daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def url_of(server: http.server.ThreadingHTTPServer) -> str:
    """``http://<host>:<port>`` (``https://`` for a TLS server) of a :func:`serving` server."""
    scheme = "https" if hasattr(server.socket, "context") else "http"
    host, port = server.server_address[:2]
    return f"{scheme}://{host!s}:{port}"


@contextmanager
def serve_handler(handler: Callable[..., http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on 127.0.0.1 (a free port); yields ``http://127.0.0.1:<port>``."""
    with serving(handler) as server:
        yield url_of(server)


@contextmanager
def serve_directory(path: Path) -> Iterator[str]:
    """Serve ``path`` on 127.0.0.1 (a free port); yields ``http://127.0.0.1:<port>``."""
    with serve_handler(functools.partial(_QuietHandler, directory=str(path))) as url:
        yield url
