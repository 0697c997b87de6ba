"""Serve a release feed folder over HTTP on loopback (the rehearsal, tests, local mirrors)."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serve_handler(handler: Callable[..., http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on 127.0.0.1 (a free port); yields ``http://127.0.0.1:<port>``.

    Requests run in daemon threads, so leaving never waits for a handler that still talks
    (a test's slow or endless one); the server itself is shut down and joined.
    """
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever, args=(0.05,), name="serve_handler", daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@contextmanager
def serve_directory(path: Path) -> Iterator[str]:
    """Serve ``path`` on 127.0.0.1 (a free port); yields ``http://127.0.0.1:<port>``."""
    with serve_handler(functools.partial(_QuietHandler, directory=str(path))) as url:
        yield url
