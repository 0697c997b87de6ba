"""updater.sources.etags: an unchanged document costs a 304, its body and ``Link`` kept; what
cannot be stored or read back is a miss, never a failure. Over httpx's MockTransport, the
client's own seam (the HTTP rules are the client's, tested in test_http_client.py)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from updater.config.settings_record import HttpSettings
from updater.net.client import HttpClient
from updater.sources.etags import ConditionalCache

URL = "https://api.github.com/repos/acme/mux/releases"
QUICK = HttpSettings(retries=0, backoff=0.0)


def client_answering(answers: list[httpx.Response], seen: list[httpx.Request]) -> HttpClient:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers.pop(0)

    return HttpClient(transport=httpx.MockTransport(handler), settings=QUICK)


def test_an_unchanged_document_is_answered_from_the_store_by_a_304(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []
    link = '<https://api.github.com/repos/acme/mux/releases?page=2>; rel="next"'
    client = client_answering(
        [
            httpx.Response(200, content=b"[1]", headers={"ETag": '"abc"', "Link": link}),
            httpx.Response(304),
            httpx.Response(200, content=b"[2]", headers={"ETag": '"def"'}),
        ],
        seen,
    )
    cache = ConditionalCache(tmp_path)
    assert cache.get_with_link(client, URL, {}, 1000) == (b"[1]", link)
    assert "If-None-Match" not in seen[0].headers
    assert cache.get_with_link(client, URL, {}, 1000) == (b"[1]", link)  # a 304 keeps the Link
    assert seen[1].headers["If-None-Match"] == '"abc"'
    assert cache.get(client, URL, {}, 1000) == b"[2]"  # changed: the new body, stored
    assert cache.load(URL) == ({"If-None-Match": '"def"'}, b"[2]", None)


def test_last_modified_is_asked_with_if_modified_since(tmp_path: Path) -> None:
    cache = ConditionalCache(tmp_path)
    cache.store(URL, {"last-modified": "Sun, 06 Dec 2026 09:00:00 GMT"}, b"{}")
    headers, body, _ = cache.load(URL) or ({}, b"", None)
    assert headers == {"If-Modified-Since": "Sun, 06 Dec 2026 09:00:00 GMT"} and body == b"{}"


def test_what_has_no_validator_or_cannot_be_read_back_is_a_miss(tmp_path: Path) -> None:
    cache = ConditionalCache(tmp_path / "store")
    cache.store(URL, {}, b"[]")  # nothing to ask "changed since?" with: not kept
    assert cache.load(URL) is None
    cache.store(URL, {"etag": '"x"'}, b"\xff\xfe")  # not text: not kept, and no failure
    assert cache.load(URL) is None
    cache.store(URL, {"etag": '"x"'}, b"[]")
    (entry,) = (tmp_path / "store").iterdir()
    for garbage in (b"{", b"[]", json.dumps({"etag": '"x"'}).encode(), b"[" * 100_000):
        entry.write_bytes(garbage)
        assert cache.load(URL) is None


def test_get_fresh_asks_without_validators_and_stores_the_answer(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []
    client = client_answering([httpx.Response(200, content=b"[3]", headers={"ETag": '"g"'})], seen)
    cache = ConditionalCache(tmp_path)
    cache.store(URL, {"etag": '"old"'}, b"[0]")
    assert cache.get_fresh(client, URL, {}, 1000) == b"[3]"
    assert "If-None-Match" not in seen[0].headers
    assert cache.load(URL) == ({"If-None-Match": '"g"'}, b"[3]", None)
