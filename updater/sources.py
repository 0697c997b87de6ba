"""Where releases come from: GitHub, or a static feed (mirror, air-gapped network, tests).

Both implement :class:`ReleaseSource`. The GitHub source keeps off the rate-limited API for
everything it can: the latest tag comes from the ``/releases/latest`` redirect and release
files from ``/releases/download/<tag>/``; the API is asked only for what only it has (asset
digests, the release list for ``--pre``, attestations), with ``If-None-Match``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, unquote, urlsplit

from . import models
from .errors import NetworkError, ParseError, UsageError, VerificationError
from .http import Fetched, HostPolicy, HttpClient
from .urls import check_url_scheme, url_origin

GITHUB_WEB = "https://github.com"
GITHUB_API = "https://api.github.com"
GITHUB_DOWNLOAD_HOSTS = (
    "github.com",
    "objects.githubusercontent.com",
    "release-assets.githubusercontent.com",
)
SMALL_FILE_LIMIT = 8 * 1024 * 1024


class ReleaseSource(Protocol):
    kind: str
    location: str
    policy: HostPolicy

    def latest_tag(self, *, include_pre: bool) -> str: ...

    def release_page(self, tag: str) -> str: ...

    def file_url(self, tag: str, name: str) -> str: ...

    def fetch(self, tag: str, name: str, *, max_size: int = SMALL_FILE_LIMIT) -> bytes: ...

    def asset_digests(self, tag: str) -> dict[str, str]: ...

    def attestation_bundles(self, sha256: str) -> list[bytes]: ...

    def close(self) -> None: ...


def github_token() -> str | None:
    return os.environ.get("MUX_GITHUB_TOKEN") or os.environ.get("GITHUB_TOKEN") or None


def _cache_dir() -> Path:
    from .cache import cache_dir

    return cache_dir() / "http"


@dataclass
class _Conditional:
    """A tiny ETag store so repeated API calls can be answered by a free 304."""

    directory: Path

    def _path(self, url: str) -> Path:
        import hashlib

        return self.directory / (hashlib.sha256(url.encode()).hexdigest()[:32] + ".json")

    def load(self, url: str) -> tuple[str, bytes] | None:
        try:
            doc = json.loads(self._path(url).read_bytes())
            return str(doc["etag"]), str(doc["body"]).encode()
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            return None

    def store(self, url: str, etag: str, body: bytes) -> None:
        from .files import atomic_write

        try:
            doc = {"url": url, "etag": etag, "body": body.decode()}
            atomic_write(self._path(url), json.dumps(doc).encode())
        except (OSError, UnicodeDecodeError):
            pass  # the ETag cache is an optimisation; never fail a check over it


class GitHubSource:
    kind = "github"

    def __init__(
        self,
        repo: str,
        *,
        web_url: str | None = None,
        api_url: str | None = None,
        token: str | None = None,
    ) -> None:
        if not repo or repo.count("/") != 1:
            raise UsageError(
                "no GitHub repository to update from (a development build has none)",
                hint="set MUX_REPO=owner/name, or use --source with a feed",
            )
        self.repo = repo
        self.web = (web_url or os.environ.get("MUX_GITHUB_URL") or GITHUB_WEB).rstrip("/")
        self.api = (api_url or os.environ.get("MUX_GITHUB_API_URL") or GITHUB_API).rstrip("/")
        for base in (self.web, self.api):
            check_url_scheme(base)
        self.location = f"{self.web}/{repo}"
        configured = {url_origin(self.web), url_origin(self.api)}
        self.policy = HostPolicy(
            allowed_hosts=frozenset({*GITHUB_DOWNLOAD_HOSTS, "api.github.com", *configured}),
            token_hosts=frozenset({"github.com", "api.github.com", *configured}),
        )
        self.client = HttpClient(
            policy=self.policy, token=token if token is not None else github_token()
        )
        self._conditional = _Conditional(_cache_dir())
        self._release_docs: dict[str, dict[str, Any]] = {}

    def close(self) -> None:
        self.client.close()

    def latest_tag(self, *, include_pre: bool) -> str:
        if include_pre:
            return self._latest_from_api()
        url = f"{self.web}/{self.repo}/releases/latest"
        with self.client.stream(url, follow_redirects=False) as response:
            location = response.headers.get("location", "")
        tag = location.rstrip("/").rsplit("/releases/tag/", 1)
        if response.status_code not in (301, 302, 303, 307, 308) or len(tag) != 2:
            raise NetworkError(
                f"{self.location} has no published release ({url} did not redirect to one)",
                hint="check MUX_REPO, or pass --pre to include pre-releases",
            )
        tag_name = unquote(tag[1])
        models.parse_tag(tag_name)
        return tag_name

    def _api_json(self, path: str) -> Any:
        url = f"{self.api}{path}"
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
        cached = self._conditional.load(url)
        if cached:
            headers["If-None-Match"] = cached[0]
        response: Fetched = self.client.get(url, headers=headers)
        if response.status == 304 and cached:
            body = cached[1]
        else:
            body = response.content
            etag = response.headers.get("etag")
            if etag:
                self._conditional.store(url, etag, body)
        try:
            return json.loads(body)
        except (ValueError, RecursionError):
            raise NetworkError(f"{url} answered something that is not JSON") from None

    def _latest_from_api(self) -> str:
        releases = self._api_json(f"/repos/{self.repo}/releases?per_page=30")
        if not isinstance(releases, list):
            raise NetworkError(f"{self.api}/repos/{self.repo}/releases did not answer a list")
        candidates = []
        for doc in releases:
            if not isinstance(doc, dict) or doc.get("draft"):
                continue
            try:
                candidates.append((models.parse_tag(str(doc.get("tag_name"))), doc["tag_name"]))
            except (ParseError, KeyError):
                continue
            self._release_docs[str(doc["tag_name"])] = doc
        if not candidates:
            raise NetworkError(f"{self.location} has no published release")
        return str(max(candidates)[1])

    def release_page(self, tag: str) -> str:
        return f"{self.web}/{self.repo}/releases/tag/{quote(tag)}"

    def file_url(self, tag: str, name: str) -> str:
        return f"{self.web}/{self.repo}/releases/download/{quote(tag)}/{quote(name)}"

    def fetch(self, tag: str, name: str, *, max_size: int = SMALL_FILE_LIMIT) -> bytes:
        return self.client.get(self.file_url(tag, name), max_size=max_size).content

    def asset_digests(self, tag: str) -> dict[str, str]:
        """GitHub's own ``sha256:`` asset digests (absent on releases made before 2025-06)."""
        doc = self._release_docs.get(tag)
        if doc is None:
            found = self._api_json(f"/repos/{self.repo}/releases/tags/{quote(tag)}")
            if not isinstance(found, dict):
                return {}
            doc = found
        digests = {}
        for asset in doc.get("assets") or []:
            if not isinstance(asset, dict):
                continue
            digest = asset.get("digest")
            if isinstance(digest, str) and digest.startswith("sha256:"):
                value = digest.removeprefix("sha256:").lower()
                if not models.is_sha256(value):
                    # Fail closed: a digest GitHub publishes must be usable, never skipped.
                    raise VerificationError(
                        f"verification failed (digest): GitHub gave a malformed digest "
                        f"for {str(asset.get('name'))[:80]}"
                    )
                digests[str(asset.get("name"))] = value
        return digests

    def attestation_bundles(self, sha256: str) -> list[bytes]:
        """The SLSA provenance bundles GitHub lists for ``sha256``, one JSON line each.

        An item carries its bundle inline (``{"bundle": {...}}``) or, since 2026-07-16, as
        ``"bundle": null`` (or no ``bundle`` at all) plus a ``bundle_url``: a pre-signed blob
        of snappy-compressed JSON (notes §1.4), fetched by :meth:`_download_bundle`. An item
        that cannot be read is skipped when another one can; when none can, this raises a
        :class:`NetworkError` naming the URL that failed.
        """
        from urllib.parse import urlencode

        provenance = "https://slsa.dev/provenance/v1"
        path = f"/repos/{self.repo}/attestations/sha256:{sha256}"
        query = urlencode({"predicate_type": provenance})
        doc = self._api_json(f"{path}?{query}")
        entries = doc.get("attestations", []) if isinstance(doc, dict) else None
        if not isinstance(entries, list):
            raise NetworkError(f"{self.api}{path} did not answer a list of attestations")
        bundles: list[bytes] = []
        failures: list[str] = []
        for entry in entries[:30]:  # the API's default page; the verifier takes at most 32
            if not isinstance(entry, dict):
                failures.append(f"{self.api}{path} listed an attestation that is not an object")
                continue
            kind = entry.get("predicate_type")
            if isinstance(kind, str) and kind != provenance:
                continue  # e.g. GitHub's immutable-release attestation, if the filter is ignored
            try:
                if isinstance(entry.get("bundle"), dict):
                    bundles.append(json.dumps(entry["bundle"]).encode())
                elif isinstance(entry.get("bundle_url"), str):
                    bundles.append(self._download_bundle(entry["bundle_url"]))
                else:
                    raise NetworkError(
                        f"{self.api}{path} listed an attestation with neither a bundle "
                        "nor a bundle_url"
                    )
            except NetworkError as exc:
                failures.append(exc.message)
        if failures and not bundles:
            more = f" (and {len(failures) - 1} more failed)" if len(failures) > 1 else ""
            raise NetworkError(failures[0] + more)
        return bundles

    @staticmethod
    def _download_bundle(url: str, *, max_size: int = 16 * 1024 * 1024) -> bytes:
        """One ``bundle_url`` blob as a one-line JSON bundle.

        The blob lives on another host (Azure storage for github.com), so it is fetched by a
        client of its own: no GitHub token, only that URL's host (HTTPS, or loopback HTTP),
        at most ``max_size`` bytes. It is snappy (block or framed) or plain JSON, and it
        decompresses to at most ``max_size`` bytes. Errors name the URL without its query,
        which carries the pre-signed access signature.
        """
        from urllib.parse import urlsplit

        import httpx

        from . import snappy

        try:
            shown = urlsplit(url)._replace(query="", fragment="").geturl()
            policy = HostPolicy(allowed_hosts=frozenset({url_origin(url)}))
            with HttpClient(policy=policy, token=None) as client:
                blob = client.get(url, max_size=max_size).content
            stored_plain = blob.lstrip()[:1] == b"{"  # an uncompressed blob is JSON as it is
            text = blob if stored_plain else snappy.decompress(blob, max_size=max_size)
        except (NetworkError, ParseError) as exc:
            message = exc.message.replace(url, shown)
            raise NetworkError(
                f"cannot read the attestation bundle at {shown}: {message}"
            ) from None
        except (ValueError, httpx.InvalidURL):  # what urlsplit and httpx say of a broken URL
            raise NetworkError(f"GitHub listed a malformed bundle_url {url[:200]!r}") from None
        try:
            document = json.loads(text)
        except (ValueError, RecursionError):
            raise NetworkError(f"the attestation bundle at {shown} is not valid JSON") from None
        if not isinstance(document, dict):
            raise NetworkError(f"the attestation bundle at {shown} is not a JSON object")
        # One line: the verifier reads several bundles joined by newlines as JSON lines.
        return json.dumps(document).encode()


class FeedSource:
    """A static feed: ``releases.json`` plus one folder per tag, in a directory or at a URL."""

    kind = "feed"

    def __init__(self, location: str) -> None:
        self.location = location.rstrip("/") or location
        self._directory: Path | None = None
        self.client: HttpClient | None = None
        parts = urlsplit(location)
        if parts.scheme in ("http", "https"):
            check_url_scheme(location)
            self.policy = HostPolicy(allowed_hosts=frozenset({url_origin(location)}))
            # A feed is not GitHub: it never sees a GitHub token.
            self.client = HttpClient(
                policy=self.policy,
                token=None,
                plain_loopback_only=parts.scheme == "http",  # check_url_scheme: loopback only
            )
        elif parts.scheme in ("", "file"):
            path = Path(parts.path if parts.scheme == "file" else location).expanduser()
            if not path.is_dir():
                raise UsageError(f"release feed {location} is not a directory or a URL")
            self._directory = path.resolve()
            self.location = str(self._directory)
            self.policy = HostPolicy()
        else:
            raise UsageError(
                f"unsupported release source {location}",
                hint="use 'github', an https:// feed URL or a feed directory",
            )

    def close(self) -> None:
        if self.client:
            self.client.close()

    def _read(self, relative: str, max_size: int) -> bytes:
        if self._directory is not None:
            path = self._directory / relative
            try:
                with path.open("rb") as handle:
                    data = handle.read(max_size + 1)
            except OSError as exc:
                raise NetworkError(f"cannot read {path}: {exc.strerror}") from None
            if len(data) > max_size:
                raise NetworkError(f"{path} is larger than {max_size} bytes; refusing it")
            return data
        assert self.client is not None
        return self.client.get(f"{self.location}/{relative}", max_size=max_size).content

    def latest_tag(self, *, include_pre: bool) -> str:
        releases = models.parse_releases_json(self._read(models.FEED_INDEX_NAME, SMALL_FILE_LIMIT))
        candidates = [r for r in releases if include_pre or not r.prerelease]
        if not candidates:
            raise NetworkError(f"the feed {self.location} lists no release")
        return max(candidates, key=lambda r: r.version).tag

    def release_page(self, tag: str) -> str:
        return f"{self.location}/{quote(tag)}/"

    def file_url(self, tag: str, name: str) -> str:
        if self._directory is not None:
            return str(self._directory / tag / name)
        return f"{self.location}/{quote(tag)}/{quote(name)}"

    def fetch(self, tag: str, name: str, *, max_size: int = SMALL_FILE_LIMIT) -> bytes:
        return self._read(f"{tag}/{name}", max_size)

    def asset_digests(self, tag: str) -> dict[str, str]:
        return {}

    def attestation_bundles(self, sha256: str) -> list[bytes]:
        return []


def open_source(spec: str | None, *, repo: str) -> ReleaseSource:
    """``--source`` / ``MUX_UPDATE_SOURCE``: ``github`` (default), a feed URL or directory."""
    chosen = spec or os.environ.get("MUX_UPDATE_SOURCE") or "github"
    try:
        if chosen == "github":
            return GitHubSource(repo)
        return FeedSource(chosen)
    except ValueError as exc:  # urllib's word on a malformed URL (a bad port, a bad [host])
        what = "MUX_GITHUB_URL / MUX_GITHUB_API_URL" if chosen == "github" else chosen[:200]
        raise UsageError(f"invalid release source URL in {what}: {exc}") from None
