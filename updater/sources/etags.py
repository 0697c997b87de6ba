"""A tiny store of HTTP validators and bodies, so an unchanged document costs a free 304.

GitHub's API and a feed's ``releases.json`` answer ``If-None-Match`` / ``If-Modified-Since``
with 304 when nothing changed; the store keeps what they last said in the user's cache.
An optimisation only: a store that cannot be read or written never fails a check.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from updater.config.dirs import user_cache_dir
from updater.files import atomic_write
from updater.net.client import Fetched, HttpClient

if TYPE_CHECKING:
    pass


def etag_cache_dir() -> Path:
    return Path(user_cache_dir()) / "http"


@dataclass
class ConditionalCache:
    """A tiny store of validators (ETag, Last-Modified) and bodies, so that asking again for
    an unchanged document is answered by a free 304 (GitHub's API, a feed's releases.json)."""

    directory: Path

    def _path(self, url: str) -> Path:

        return self.directory / (hashlib.sha256(url.encode()).hexdigest()[:32] + ".json")

    def load(self, url: str) -> tuple[dict[str, str], bytes, str | None] | None:
        """The request headers that ask "changed since?", the body they would confirm, and
        its ``Link`` header (a 304 need not repeat it; the pages of a list hang on it)."""
        try:
            doc = json.loads(self._path(url).read_bytes())
            headers = {}
            if doc.get("etag"):
                headers["If-None-Match"] = str(doc["etag"])
            if doc.get("last_modified"):
                headers["If-Modified-Since"] = str(doc["last_modified"])
            link = doc.get("link")
            body = str(doc["body"]).encode()
            return (headers, body, link if isinstance(link, str) else None) if headers else None
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            return None

    def store(self, url: str, headers: Mapping[str, str], body: bytes) -> None:
        etag, modified = headers.get("etag"), headers.get("last-modified")
        if not (etag or modified):
            return
        try:
            doc = {
                "url": url,
                "etag": etag,
                "last_modified": modified,
                "link": headers.get("link"),
                "body": body.decode(),
            }
            atomic_write(self._path(url), json.dumps(doc).encode())
        except (OSError, UnicodeDecodeError):
            pass  # an optimisation; never fail a check over it

    def get(self, client: HttpClient, url: str, headers: Mapping[str, str], max_size: int) -> bytes:
        """GET ``url``, conditionally when a body is stored for it."""
        return self.get_with_link(client, url, headers, max_size)[0]

    def get_fresh(
        self, client: HttpClient, url: str, headers: Mapping[str, str], max_size: int
    ) -> bytes:
        """GET ``url`` unconditionally, and store what it answered."""
        response: Fetched = client.get(url, headers=headers, max_size=max_size)
        self.store(url, {k.lower(): v for k, v in response.headers.items()}, response.content)
        return response.content

    def get_with_link(
        self, client: HttpClient, url: str, headers: Mapping[str, str], max_size: int
    ) -> tuple[bytes, str | None]:
        """The same, with the answer's ``Link`` header (stored with the body)."""
        cached = self.load(url)
        response: Fetched = client.get(
            url, headers={**headers, **(cached[0] if cached else {})}, max_size=max_size
        )
        if response.status == 304 and cached:
            return cached[1], cached[2]
        lowered = {k.lower(): v for k, v in response.headers.items()}
        self.store(url, lowered, response.content)
        return response.content, lowered.get("link")
