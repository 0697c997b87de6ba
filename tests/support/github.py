"""A loopback GitHub impersonator for end-to-end tests.

Three real HTTP servers on 127.0.0.1, like GitHub's three faces:

* ``web`` (``MUX_GITHUB_URL``): ``/<repo>/releases/latest`` answers a 302 to
  ``/<repo>/releases/tag/<tag>``; ``/<repo>/releases/download/<tag>/<name>`` answers a 302
  to the download host;
* ``api`` (``MUX_GITHUB_API_URL``): ``/repos/<repo>/releases`` and ``/releases/tags/<tag>``
  with asset ``digest`` fields and ETags (a matching ``If-None-Match`` gets a 304), and
  ``/repos/<repo>/attestations/sha256:<hex>``;
* ``downloads``: the release files themselves, served from the API server's host and port
  under ``/_dl/`` (a configured base, as GitHub Enterprise's would be).

Releases are folders ``<root>/<tag>/`` in the release layout (what tests/support/releases.py
builds). Knobs on :class:`FakeGitHub` make it misbehave: rate limiting, rejecting tokens,
redirecting downloads to a foreign host, truncating or hanging a download.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from release.rehearsal.serve import serving, url_of


@dataclass
class Request:
    server: str
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class FakeGitHub:
    root: Path
    repo: str = "acme/mux"
    prereleases: set[str] = field(default_factory=set)
    drafts: set[str] = field(default_factory=set)
    rate_limited: bool = False
    reject_token: str | None = None  # this token gets a 401 (a stale token)
    foreign_download_url: str | None = None  # redirect downloads there instead
    truncate: dict[str, int] = field(default_factory=dict)  # file name -> bytes sent
    lie_length: bool = False  # with truncate: announce the full length anyway
    truncate_once: bool = False  # with truncate: only the first response is cut short
    hang: set[str] = field(default_factory=set)  # file names whose download stalls
    fail_5xx: int = 0  # answer this many 503s before behaving
    api_digests: bool = True
    attestations: dict[str, bytes] = field(default_factory=dict)  # sha256 -> bundle json
    attestations_need_token: bool = False  # the attestations API refuses anonymous requests
    page_size: int | None = None  # the release list in pages this long, linked by Link
    listing_order: list[str] | None = None  # the release list's order (default: newest first)
    requests: list[Request] = field(default_factory=list)
    web_url: str = ""
    api_url: str = ""
    _release_hang: threading.Event = field(default_factory=threading.Event)

    # -- the releases -------------------------------------------------------------------

    def tags(self) -> list[str]:
        from packaging.version import Version

        tags = [p.name for p in self.root.iterdir() if p.is_dir() and p.name.startswith("v")]
        return sorted(tags, key=lambda t: Version(t[1:]), reverse=True)

    def latest(self) -> str | None:
        for tag in self.tags():
            if tag not in self.prereleases and tag not in self.drafts:
                return tag
        return None

    def release_doc(self, tag: str) -> dict[str, Any]:
        assets = []
        for path in sorted((self.root / tag).iterdir()):
            asset: dict[str, Any] = {
                "name": path.name,
                "size": path.stat().st_size,
                "browser_download_url": f"{self.web_url}/{self.repo}/releases/download/{tag}/{path.name}",
            }
            if self.api_digests:
                asset["digest"] = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
            assets.append(asset)
        return {
            "tag_name": tag,
            "name": tag,
            "draft": tag in self.drafts,
            "prerelease": tag in self.prereleases,
            "html_url": f"{self.web_url}/{self.repo}/releases/tag/{tag}",
            "assets": assets,
        }

    def requests_to(self, server: str) -> list[Request]:
        return [r for r in self.requests if r.server == server]


def _handler(fake: FakeGitHub, role: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None):
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, doc: Any) -> None:
            body = json.dumps(doc).encode()
            etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
            if self.headers.get("If-None-Match") == etag:
                self._send(304, headers={"ETag": etag})
                return
            self._send(200, body, {"Content-Type": "application/json", "ETag": etag})

        def do_GET(self) -> None:
            path = unquote(urlsplit(self.path).path)
            fake.requests.append(Request(role, "GET", self.path, dict(self.headers.items())))
            token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
            if fake.reject_token and token == fake.reject_token:
                self._send(401, b'{"message": "Bad credentials"}')
                return
            if fake.fail_5xx > 0:
                fake.fail_5xx -= 1
                self._send(503, b"unavailable")
                return
            if role == "web":
                self._web(path)
            else:
                self._api(path)

        def _web(self, path: str) -> None:
            prefix = f"/{fake.repo}/releases/"
            if not path.startswith(prefix):
                self._send(404)
                return
            rest = path[len(prefix) :]
            if rest == "latest":
                tag = fake.latest()
                if tag is None:
                    self._send(302, headers={"Location": f"{fake.web_url}/{fake.repo}/releases"})
                else:
                    location = f"{fake.web_url}/{fake.repo}/releases/tag/{tag}"
                    self._send(302, headers={"Location": location})
                return
            if rest.startswith("download/"):
                _, tag, name = rest.split("/", 2)
                if not (fake.root / tag / name).is_file() or tag in fake.drafts:
                    self._send(404)
                    return
                base = fake.foreign_download_url or f"{fake.api_url}/_dl"
                self._send(302, headers={"Location": f"{base}/{tag}/{name}"})
                return
            self._send(404)

        def _api(self, path: str) -> None:
            if path.startswith("/_dl/"):
                self._download(path[len("/_dl/") :])
                return
            if fake.rate_limited:
                reset = str(int(time.time()) + 1800)
                self._send(
                    403,
                    b'{"message": "API rate limit exceeded"}',
                    {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset},
                )
                return
            if path == "/repositories/1/releases":  # where GitHub's Link points for page 2+
                query = parse_qs(urlsplit(self.path).query)
                self._release_list(int(query.get("page", ["1"])[0]))
                return
            prefix = f"/repos/{fake.repo}/"
            if not path.startswith(prefix):
                self._send(404)
                return
            rest = path[len(prefix) :]
            if rest == "releases":
                self._release_list(1)
            elif rest.startswith("releases/tags/"):
                tag = rest.removeprefix("releases/tags/")
                if tag not in fake.tags() or tag in fake.drafts:
                    self._send(404)
                else:
                    self._json(fake.release_doc(tag))
            elif rest.startswith("attestations/sha256:"):
                if fake.attestations_need_token and not self.headers.get("Authorization"):
                    self._send(401, b'{"message": "Requires authentication"}')
                    return
                digest = rest.removeprefix("attestations/sha256:")
                bundle = fake.attestations.get(digest)
                if bundle is None:
                    self._send(404, b'{"message": "Not Found"}')
                else:
                    self._json({"attestations": [{"bundle": json.loads(bundle)}]})
            else:
                self._send(404)

        def _release_list(self, page: int) -> None:
            order = fake.listing_order or fake.tags()
            docs = [fake.release_doc(t) for t in order if t not in fake.drafts]
            if fake.page_size is None:
                self._json(docs)
                return
            size = fake.page_size
            chosen = docs[(page - 1) * size : page * size]
            body = json.dumps(chosen).encode()
            headers = {"Content-Type": "application/json"}
            if page * size < len(docs):
                headers["Link"] = (
                    f'<{fake.api_url}/repositories/1/releases?page={page + 1}>; rel="next", '
                    f'<{fake.api_url}/repositories/1/releases?page=1>; rel="first"'
                )
            self._send(200, body, headers)

        def _download(self, rest: str) -> None:
            path = fake.root / rest
            name = path.name
            if ".." in rest.split("/") or not path.is_file():
                self._send(404)
                return
            data = path.read_bytes()
            start = 0
            range_header = self.headers.get("Range", "")
            if range_header.startswith("bytes=") and range_header.endswith("-"):
                start = int(range_header[len("bytes=") : -1])
            if name in fake.hang:
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                fake._release_hang.wait(30)
                return
            limit = fake.truncate.get(name)
            if limit is not None and fake.truncate_once:
                del fake.truncate[name]
            body = data[start:]
            status = 206 if start else 200
            headers = {"Content-Type": "application/octet-stream"}
            if start:
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            if limit is not None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                announced = len(body) if fake.lie_length else min(limit, len(body))
                self.send_header("Content-Length", str(announced))
                self.end_headers()
                self.wfile.write(body[:limit])
                self.wfile.flush()
                self.close_connection = True
                return
            self._send(status, body, headers)

    return Handler


@contextmanager
def serve_github(fake: FakeGitHub) -> Iterator[FakeGitHub]:
    """Start the web and API servers on 127.0.0.1 and fill in their URLs."""
    with ExitStack() as servers:
        servers.callback(fake._release_hang.set)  # first thing on the way out: no handler waits
        fake.web_url = url_of(servers.enter_context(serving(_handler(fake, "web"))))
        fake.api_url = url_of(servers.enter_context(serving(_handler(fake, "api"))))
        yield fake


def github_env(fake: FakeGitHub) -> dict[str, str]:
    """The environment that points mux at the impersonator."""
    return {
        "MUX_GITHUB_URL": fake.web_url,
        "MUX_GITHUB_API_URL": fake.api_url,
        "MUX_REPO": fake.repo,
    }
