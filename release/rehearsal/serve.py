"""Serve a release feed folder over HTTP on loopback (the rehearsal, tests, local mirrors)."""

from __future__ import annotations

import functools
import http.server
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


@contextmanager
def serving(
    handler: Callable[..., http.server.BaseHTTPRequestHandler],
    *,
    port: int = 0,
    tls: ssl.SSLContext | None = None,
    handshake_on_connect: bool = True,
) -> Iterator[http.server.ThreadingHTTPServer]:
    """Serve ``handler`` on 127.0.0.1 (``port``, default a free one), over TLS with ``tls``;
    yields the running server. The one lifecycle of every loopback server the rehearsal and
    the tests run.

    Requests run in daemon threads, so leaving never waits for a handler that still talks
    (a test's slow or endless one); the server itself is shut down and joined.
    ``handshake_on_connect=False`` does a TLS handshake in the handler's thread, not in the
    accepting one (a client that never speaks cannot stall the others).
    """
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
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
    """``http://127.0.0.1:<port>`` (``https://`` for a TLS server) of a :func:`serving` server."""
    scheme = "https" if hasattr(server.socket, "context") else "http"
    return f"{scheme}://127.0.0.1:{server.server_address[1]}"


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
