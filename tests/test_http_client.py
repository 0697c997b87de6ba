"""HttpClient's own rules, through its in-process seam (an httpx transport, as httpx's
MockTransport): redirects checked hop by hop, the token only where it may go, retries,
caps and resumed downloads. No process or socket adds anything to these rules; the
budgets that live in the sockets are tested against real servers (test_update.py)."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Iterator

import httpx
import pytest

from updater.config.settings import HttpSettings
from updater.errors import NetworkError, VerificationError
from updater.net.client import HttpClient
from updater.net.hosts import HostPolicy
from updater.urls import url_origin

Handler = Callable[[httpx.Request], httpx.Response]
QUICK = HttpSettings(retries=2, backoff=0.0)


class Silent:
    def advance(self, done: int) -> None:
        pass


def client(handler: Handler, **kwargs: object) -> HttpClient:
    return HttpClient(transport=httpx.MockTransport(handler), settings=QUICK, **kwargs)  # type: ignore[arg-type]


def test_a_redirect_off_the_allowed_hosts_is_refused_without_its_query() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(302, headers={"Location": "https://evil.example/x?sig=SECRET"})

    policy = HostPolicy(allowed_hosts=frozenset({"releases.example"}))
    with client(handler, policy=policy) as http, pytest.raises(NetworkError) as caught:
        http.get("https://releases.example/feed.json")
    assert seen == ["https://releases.example/feed.json"]  # the refused hop is never asked
    message = caught.value.message
    assert "evil.example is not an allowed release host" in message
    assert "redirected from https://releases.example/feed.json" in message
    assert "SECRET" not in str(caught.value)


def test_the_token_goes_only_to_its_hosts_and_a_401_is_retried_without_it() -> None:
    asked: list[tuple[str, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        auth = request.headers.get("Authorization")
        asked.append((request.url.host, auth))
        if request.url.host == "api.example" and auth:
            return httpx.Response(401)
        if request.url.host == "api.example":
            return httpx.Response(302, headers={"Location": "https://blobs.example/b"})
        return httpx.Response(200, content=b"body")

    # Token hosts are origins (scheme, host and effective port), as the sources give them.
    policy = HostPolicy(token_hosts=frozenset({url_origin("https://api.example")}))
    with client(handler, policy=policy, token="t0ken") as http:
        assert http.get("https://api.example/a").content == b"body"
        asked.clear()
        # Another port of the same host is another origin: it never sees the token.
        assert http.get("https://api.example:8443/a").content == b"body"
        assert asked == [("api.example", None), ("blobs.example", None)]
        asked.clear()
        assert http.get("https://api.example/a").content == b"body"
    assert asked == [
        ("api.example", "Bearer t0ken"),  # stale: 401
        ("api.example", None),  # the same request, anonymous
        ("blobs.example", None),  # a token host's redirect never carries it on
    ]


def test_5xx_answers_are_retried_as_many_times_as_settings_say() -> None:
    statuses = iter([503, 502, 200])

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(next(statuses), content=b"ok")

    with client(handler) as http:
        assert http.get("https://releases.example/x").content == b"ok"

    def always_down(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, content=b"down " * 100_000)

    with client(always_down) as http, pytest.raises(NetworkError) as caught:
        http.get("https://releases.example/x")
    assert "503" in caught.value.message
    assert len(caught.value.message) < 400  # the error page is quoted capped, never whole


def test_a_document_over_its_cap_is_refused() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"x" * 2048)

    with client(handler) as http, pytest.raises(NetworkError, match="larger than 1024 bytes"):
        http.get("https://releases.example/x", max_size=1024)


def test_plain_http_is_refused_except_to_loopback() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"local")

    with client(handler) as http:
        assert http.get("http://127.0.0.1:9/x").content == b"local"
        with pytest.raises(NetworkError):
            http.get("http://releases.example/x")


def test_too_many_redirects_is_one_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"Location": "/again"})

    with client(handler) as http, pytest.raises(NetworkError, match="too many redirects"):
        http.get("https://releases.example/start")


class Dropping(httpx.SyncByteStream):
    """A body that breaks after ``keep`` bytes, as a dropped connection does."""

    def __init__(self, body: bytes, keep: int) -> None:
        self.body, self.keep = body, keep

    def __iter__(self) -> Iterator[bytes]:
        yield self.body[: self.keep]
        raise httpx.ReadError("connection reset")


BODY = bytes(range(256)) * 64


def test_a_dropped_download_resumes_with_range_and_hashes_the_whole() -> None:
    ranges: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        wanted = request.headers.get("Range")
        ranges.append(wanted)
        if wanted is None:
            return httpx.Response(200, stream=Dropping(BODY, 5000))
        start = int(wanted.removeprefix("bytes=").rstrip("-"))
        return httpx.Response(206, content=BODY[start:])

    out = io.BytesIO()
    with client(handler) as http:
        size, digest = http.download_into(
            "https://releases.example/a.tar.gz",
            out,
            size=len(BODY),
            max_size=len(BODY),
            label="a.tar.gz",
            progress=Silent(),
        )
    assert ranges == [None, "bytes=5000-"]
    assert (size, digest) == (len(BODY), hashlib.sha256(BODY).hexdigest())
    assert out.getvalue() == BODY


def test_a_server_ignoring_range_starts_the_file_again() -> None:
    calls = iter([Dropping(BODY, 3000), None])

    def handler(request: httpx.Request) -> httpx.Response:
        stream = next(calls)
        if stream is not None:
            return httpx.Response(200, stream=stream)
        return httpx.Response(200, content=BODY)  # Range ignored: the whole body again

    out = io.BytesIO()
    with client(handler) as http:
        _, digest = http.download_into(
            "https://releases.example/a",
            out,
            size=len(BODY),
            max_size=len(BODY),
            label="a",
            progress=Silent(),
        )
    assert out.getvalue() == BODY and digest == hashlib.sha256(BODY).hexdigest()


def test_a_download_longer_than_its_size_is_refused() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=BODY + b"extra")

    with client(handler) as http, pytest.raises(VerificationError, match="larger than"):
        http.download_into(
            "https://releases.example/a",
            io.BytesIO(),
            size=len(BODY),
            max_size=len(BODY) * 2,
            label="a",
            progress=Silent(),
        )
