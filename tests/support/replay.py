"""Replay recorded GitHub responses from a loopback server (tests/fixtures/github-recorded).

Each corpus file holds one or more exchanges as they were recorded (status, headers, body),
with where they come from and under which licence. :class:`Replay` is a real HTTP server on
127.0.0.1 that answers a path with a chosen exchange, byte for byte, except that links back
to ``https://api.github.com`` in ``Link`` and ``Location`` headers point at the server
itself (as recording proxies do), and that it sets its own ``Content-Length``. It records
what the client sent. The client code under test is the real one: the HTTP client, the
GitHub source, or a whole ``mux`` process.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from release.rehearsal.serve import serving, url_of

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "github-recorded"
GITHUB_API = "https://api.github.com"


@dataclass(frozen=True)
class Exchange:
    recorded: str  # "GET https://api.github.com/…" as it was recorded
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


def recorded(name: str) -> list[Exchange]:
    """The exchanges of ``<corpus>/<name>.json``."""
    doc = json.loads((CORPUS / f"{name}.json").read_text(encoding="utf-8"))
    return [
        Exchange(
            recorded=item["recorded"],
            status=int(item["status"]),
            headers=tuple((str(k), str(v)) for k, v in item["headers"]),
            body=item["body"].encode("utf-8"),
        )
        for item in doc["exchanges"]
    ]


@dataclass
class Seen:
    path: str  # with its query
    headers: dict[str, str]


# A route answers a request (its path with query, and its headers) with an exchange.
Route = Callable[[str, dict[str, str]], Exchange | None]


@dataclass
class Replay:
    routes: dict[str, Exchange | Route] = field(default_factory=dict)  # path (no query) ->
    exact: dict[str, Exchange] = field(default_factory=dict)  # path with query ->
    seen: list[Seen] = field(default_factory=list)
    url: str = ""

    def answer(self, target: str, headers: dict[str, str]) -> Exchange | None:
        if target in self.exact:
            return self.exact[target]
        route = self.routes.get(urlsplit(target).path)
        if route is None or isinstance(route, Exchange):
            return route
        return route(target, headers)

    def local(self, url: str) -> str:
        """A recorded absolute URL on the API host, as the same path on this server."""
        return url.replace(GITHUB_API, self.url)


@contextmanager
def serve_replay(replay: Replay) -> Iterator[Replay]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            headers = dict(self.headers.items())
            replay.seen.append(Seen(self.path, headers))
            exchange = replay.answer(self.path, headers)
            if exchange is None:
                self.send_response(599, "not in the recording")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(exchange.status)
            for key, value in exchange.headers:
                if key.lower() in ("link", "location"):
                    value = replay.local(value)
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(exchange.body)))
            self.end_headers()
            self.wfile.write(exchange.body)

    with serving(Handler) as server:
        replay.url = url_of(server)
        yield replay
