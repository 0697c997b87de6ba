"""Where releases come from: GitHub, a static feed, or one release folder.

Every source is a :class:`ReleaseSource`: it finds tags, reads a release's small files,
downloads its archives and, where it can, lists GitHub's asset digests and finds attestations
by digest. It also declares what a trust policy must demand of its releases
(:attr:`~ReleaseSource.signature_required`, :attr:`~ReleaseSource.attestation_required`).
Nothing outside this module opens an HTTP client or asks which kind a source is.

The GitHub source keeps off the rate-limited API for everything it can: the latest tag comes
from the ``/releases/latest`` redirect and release files from ``/releases/download/<tag>/``;
the API is asked only for what only it has (asset digests, the release list for ``--pre``,
attestations), with ``If-None-Match``.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import quote, unquote, urlsplit

from updater.config.settings import DOWNLOAD_HOSTS_ENV, HttpSettings
from updater.errors import (
    MuxError,
    NetworkError,
    ParseError,
    RateLimitError,
    UsageError,
    VerificationError,
)
from updater.formats import models
from updater.net.client import Fetched, HttpClient
from updater.net.hosts import HostPolicy
from updater.net.refusals import RateLimits
from updater.urls import check_url_scheme, is_loopback_host, parse_download_host, url_origin

if TYPE_CHECKING:
    from collections.abc import Sequence

    from updater.config.settings import Settings
    from updater.core.request import ReleaseRequest
    from updater.net.download import Downloaded, Progress
    from updater.sources.feed_index import IndexPolicy, VerifiedIndex

GITHUB_WEB = "https://github.com"
GITHUB_API = "https://api.github.com"
GITHUB_DOWNLOAD_HOSTS = (
    "github.com",
    "objects.githubusercontent.com",
    "release-assets.githubusercontent.com",
)
SMALL_FILE_LIMIT = 8 * 1024 * 1024
BUNDLE_LIMIT = 16 * 1024 * 1024
PROVENANCE = "https://slsa.dev/provenance/v1"
RELEASES_PER_PAGE = 100  # GitHub's largest page
MAX_RELEASE_PAGES = 10  # the newest 1000 releases: a bound, not a limit anyone meets

# Checks that a string is a release tag (raises ParseError when not).
TagRule = Callable[[str], object]


class PublishedAsset(NamedTuple):
    """An asset as the release page lists it (GitHub's API), before anything is downloaded."""

    name: str
    size: int | None
    sha256: str | None  # GitHub's own digest (absent on releases made before 2025-06)


class ReleaseListing(NamedTuple):
    tag: str
    draft: bool
    assets: Mapping[str, PublishedAsset]


class ReleaseSource(ABC):
    kind: str  # "github" | "feed" | "folder": for reports; decisions use the properties below
    location: str
    # A release from here must carry a SHA256SUMS.minisig that a trusted key signed.
    signature_required: bool
    # A release from here must carry a verifiable build attestation.
    attestation_required: bool
    # attestation_bundles() can find attestations by digest (GitHub's attestations API).
    attestation_lookup: bool

    @abstractmethod
    def latest_tag(self, *, include_pre: bool, parse: TagRule = models.parse_tag) -> str:
        """The newest release's tag (pre-releases only with ``include_pre``), checked by
        ``parse`` (mux's ``vX.Y.Z`` by default; ``mux-release repin`` passes its pins' rule)."""

    @abstractmethod
    def release_page(self, tag: str) -> str: ...

    @abstractmethod
    def file_url(self, tag: str, name: str) -> str: ...

    @abstractmethod
    def fetch(self, tag: str, name: str, *, max_size: int = SMALL_FILE_LIMIT) -> bytes:
        """A small file of the release, read whole (:class:`NetworkError` when it cannot be)."""

    # Where download() gets file_url()s from: an HTTP client, or None for local paths.
    _files_client: HttpClient | None = None

    def download(
        self,
        tag: str,
        name: str,
        into: Path,
        *,
        size: int | None,
        max_size: int,
        progress: Progress | None = None,
    ) -> Downloaded:
        """A release file into a temporary file in ``into`` (see :mod:`updater.net.download`)."""
        from updater.net.download import download  # (not at the top: the check downloads nothing)

        return download(
            self.file_url(tag, name),
            into,
            size=size,
            max_size=max_size,
            client=self._files_client,
            label=name,
            progress=progress,
        )

    def listing(self, tag: str) -> ReleaseListing | None:
        """The release's assets as its host lists them; None where there is no such list."""
        return None

    def verified_index(self) -> VerifiedIndex | None:
        """The signed index this source decided from (a feed's), once it was read; None for a
        source without one. Its ``seq`` is recorded once the command's answer stands
        (:func:`updater.sources.feed_index.remember`)."""
        return None

    def attestation_bundles(self, sha256: str) -> list[bytes]:
        """Attestation bundles for ``sha256`` (only where :attr:`attestation_lookup`)."""
        return []

    def close(self) -> None:  # noqa: B027 - a source without a connection has nothing to close
        """Release the connection (a local source holds none)."""

    def resolve(self, request: ReleaseRequest, *, parse: TagRule = models.parse_tag) -> str:
        """The tag ``request`` names, or this source's newest for it."""
        return request.tag() or self.latest_tag(include_pre=request.include_pre, parse=parse)

    def fetch_optional(
        self, tag: str, name: str, *, max_size: int = SMALL_FILE_LIMIT
    ) -> bytes | None:
        """A file the release may lack: None when it cannot be read."""
        try:
            return self.fetch(tag, name, max_size=max_size)
        except NetworkError:
            return None

    def __enter__(self) -> ReleaseSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def open_source(
    settings: Settings,
    *,
    spec: str | None = None,
    build_keys: Sequence[str] = (),
    unsigned_index: bool = False,
) -> ReleaseSource:
    """``spec`` (default ``settings.source``): ``github``, a feed URL or a feed directory.

    A feed's index must be signed by one of ``build_keys`` or the keys the settings add
    (:meth:`~updater.config.settings.Settings.trusted_keys`), fresh and not rolled back
    (:mod:`updater.sources.feed_index`). ``unsigned_index`` reads it unchecked: only for a mirror of
    another project's artifacts (``mux-release repin``), whose files are checked one by one.
    """
    chosen = spec or settings.source
    try:
        if chosen == "github":
            github = settings.github
            return GitHubSource(
                github.repo,
                web_url=github.web_url,
                api_url=github.api_url,
                token=github.token,
                http=settings.http,
                download_hosts=github.download_hosts,
            )
        index = None if unsigned_index else index_policy(settings, build_keys)
        return FeedSource(chosen, http=settings.http, index=index)
    except ValueError as exc:  # urllib's word on a malformed URL (a bad port, a bad [host])
        what = "MUX_GITHUB_URL / MUX_GITHUB_API_URL" if chosen == "github" else chosen[:200]
        raise UsageError(f"invalid release source URL in {what}: {exc}") from None


def index_policy(settings: Settings, build_keys: Sequence[str]) -> IndexPolicy:
    """What a feed's index must satisfy under ``settings`` (keys, expiry, the seq state)."""
    from updater.sources.feed_index import IndexPolicy
    from updater.sources.feed_seq import state_path

    return IndexPolicy(
        keys=settings.trusted_keys(build_keys),
        allow_expired=settings.allow_expired_feed,
        state_file=state_path(settings.state_dir),
    )


def github_identity_url(web_url: str | None) -> str:
    """The GitHub whose workflows sign mux's attestations: a configured GitHub Enterprise,
    else github.com (a loopback ``MUX_GITHUB_URL`` is an impersonator for tests: the
    attestations it serves still name github.com)."""
    if not web_url:
        return GITHUB_WEB
    try:
        host = urlsplit(web_url).hostname
    except ValueError:
        raise UsageError(f"MUX_GITHUB_URL is not a URL: {web_url[:200]!r}") from None
    return GITHUB_WEB if is_loopback_host(host) else web_url.rstrip("/")


def attestation_identity(web_url: str | None, repo: str, build_repo: str) -> tuple[str, str]:
    """Whose release workflow must have attested a release found on this GitHub: its web
    URL and ``owner/name``.

    On github.com, the repository updated from (``MUX_REPO`` may name a fork). An Enterprise
    server holds mirrors of the build's own releases (their Sigstore bundle asset copied
    along): GitHub Enterprise Server has no artifact attestations at all, and a build
    expects github.com's OIDC issuer, never a GHE.com tenant's. So a release found there must
    be attested by the build's repository on github.com, whatever the mirror is called."""
    url = github_identity_url(web_url)
    if url == GITHUB_WEB:
        return url, repo
    return GITHUB_WEB, build_repo or repo


# -- GitHub ------------------------------------------------------------------------------------


def next_link(header: str | None) -> str | None:
    """The ``rel="next"`` URL of an RFC 8288 ``Link`` header, as GitHub paginates."""
    import re

    for match in re.finditer(r"<([^<>]*)>((?:\s*;\s*[^;,]*)*)", header or ""):
        params = match.group(2)
        if re.search(r';\s*rel\s*=\s*"?(?:[^";,]*\s)?next(?:\s[^";,]*)?"?', params):
            return match.group(1)
    return None


def github_download_url(web: str, repo: str, tag: str, name: str) -> str:
    """Where GitHub serves a release file (off the rate-limited API)."""
    return f"{web.rstrip('/')}/{repo}/releases/download/{quote(tag)}/{quote(name)}"


def _etag_cache_dir() -> Path:
    from updater.commands.cache import cache_dir

    return cache_dir() / "http"


@dataclass
class _Conditional:
    """A tiny store of validators (ETag, Last-Modified) and bodies, so that asking again for
    an unchanged document is answered by a free 304 (GitHub's API, a feed's releases.json)."""

    directory: Path

    def _path(self, url: str) -> Path:
        import hashlib

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
        from updater.files import atomic_write

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


class GitHubSource(ReleaseSource):
    kind = "github"
    # The build trusts a key or not (the policy decides); the release workflow attests all.
    signature_required = False
    attestation_required = True
    attestation_lookup = True

    def __init__(
        self,
        repo: str,
        *,
        web_url: str | None = None,
        api_url: str | None = None,
        token: str | None = None,
        http: HttpSettings | None = None,
        download_hosts: Sequence[str] = (),
    ) -> None:
        if not repo or repo.count("/") != 1:
            raise UsageError(
                "no GitHub repository to update from (a development build has none)",
                hint="set MUX_REPO=owner/name, or use --source with a feed",
            )
        self.repo = repo
        self.web = (web_url or GITHUB_WEB).rstrip("/")
        from updater.urls import github_api_for

        # An Enterprise server's API is its own (as gh finds it), never api.github.com.
        self.api = (api_url or github_api_for(self.web)).rstrip("/")
        for base in (self.web, self.api):
            check_url_scheme(base)
        self.location = f"{self.web}/{repo}"
        configured = {url_origin(self.web), url_origin(self.api)}
        # The token is for the server it belongs to: github.com's hosts see it only when
        # the web URL is github.com, never an Enterprise token (nor one after a redirect).
        on_github_com = url_origin(self.web) == "github.com"
        github_com = {"github.com", "api.github.com"} if on_github_com else set()
        # An Enterprise server may send downloads to its storage host: allowed only when
        # named (MUX_GITHUB_DOWNLOAD_HOSTS or the policy), and never a token host.
        storage = set()
        for entry in download_hosts:
            host = parse_download_host(entry)
            if host is None:
                raise UsageError(
                    f"{DOWNLOAD_HOSTS_ENV}: {entry[:100]!r} is not a host name (host or host:port)",
                    hint="list exact hosts, without a scheme, path or wildcard",
                )
            storage.add(host)
        self.policy = HostPolicy(
            allowed_hosts=frozenset(
                {*GITHUB_DOWNLOAD_HOSTS, "api.github.com", *configured, *storage}
            ),
            token_hosts=frozenset({*github_com, *configured}),
            advice=f"a GitHub Enterprise storage host can be allowed with {DOWNLOAD_HOSTS_ENV}",
        )
        self._http = http or HttpSettings()
        self._client = HttpClient(
            policy=self.policy,
            token=token,
            settings=self._http,
            rate_limits=RateLimits(_etag_cache_dir() / "rate-limits.json"),
        )
        self._files_client = self._client
        self._conditional = _Conditional(_etag_cache_dir())
        self._release_docs: dict[str, dict[str, Any]] = {}

    def close(self) -> None:
        self._client.close()

    def latest_tag(self, *, include_pre: bool, parse: TagRule = models.parse_tag) -> str:
        if include_pre:
            return self._latest_from_api(parse)
        url = f"{self.web}/{self.repo}/releases/latest"
        with self._client.stream(url, follow_redirects=False) as response:
            location = response.headers.get("location", "")
        _, found, tag = location.rstrip("/").rpartition("/releases/tag/")
        if response.status_code not in (301, 302, 303, 307, 308) or not found or not tag:
            raise NetworkError(
                f"{self.location} has no published release ({url} did not redirect to one)",
                hint="check MUX_REPO, or pass --pre to include pre-releases",
            )
        tag_name = unquote(tag)
        if getattr(parse(tag_name), "is_prerelease", False):
            # GitHub's "latest" is a flag on the release page, signed by nobody: the version
            # string decides the channel (install.sh refuses the same release).
            version = tag_name.removeprefix("v")
            raise VerificationError(
                f"GitHub's latest release of {self.repo} is {tag_name}, a pre-release by its "
                "version",
                hint=f"to take it: --version {version} (or --pre for the newest pre-release)",
            )
        return tag_name

    def _api_json(self, path: str) -> Any:
        return self._api_page(f"{self.api}{path}")[0]

    def _api_page(self, url: str) -> tuple[Any, str | None]:
        """One API answer as JSON, and the URL of its next page (``Link: <…>; rel="next"``)."""
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
        body, link = self._conditional.get_with_link(self._client, url, headers, 16 * 1024 * 1024)
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            raise NetworkError(f"{url} answered something that is not JSON") from None
        return doc, next_link(link)

    def _latest_from_api(self, parse: TagRule) -> str:
        """The newest release by version among every page of the release list (GitHub lists
        them newest first, 100 a page; at most :data:`MAX_RELEASE_PAGES` pages are read)."""
        url: str | None = f"{self.api}/repos/{self.repo}/releases?per_page={RELEASES_PER_PAGE}"
        seen: set[str] = set()
        candidates: list[tuple[Any, str]] = []  # (what `parse` makes of the tag, the tag)
        while url is not None and len(seen) < MAX_RELEASE_PAGES:
            if url in seen:
                break  # a Link that leads back: every page was read
            if url_origin(url) != url_origin(self.api) or not url.startswith(self.api):
                raise NetworkError(
                    f"{self.api} pointed the next page of releases elsewhere ({url[:200]})"
                )
            seen.add(url)
            releases, url = self._api_page(url)
            if not isinstance(releases, list):
                raise NetworkError(f"{self.api}/repos/{self.repo}/releases did not answer a list")
            for doc in releases:
                if not isinstance(doc, dict) or doc.get("draft"):
                    continue
                tag = doc.get("tag_name")
                try:
                    candidates.append((parse(str(tag)), str(tag)))
                except ParseError:
                    continue
                self._release_docs[str(tag)] = doc
        if not candidates:
            raise NetworkError(f"{self.location} has no published release")
        return max(candidates, key=lambda candidate: candidate[0])[1]

    def release_page(self, tag: str) -> str:
        return f"{self.web}/{self.repo}/releases/tag/{quote(tag)}"

    def file_url(self, tag: str, name: str) -> str:
        return github_download_url(self.web, self.repo, tag, name)

    def fetch(self, tag: str, name: str, *, max_size: int = SMALL_FILE_LIMIT) -> bytes:
        return self._client.get(self.file_url(tag, name), max_size=max_size).content

    def listing(self, tag: str) -> ReleaseListing:
        """The release as GitHub's API lists it (one request per tag, with its ETag).

        A ``sha256:`` digest GitHub publishes must be well formed: a malformed one fails
        closed (:class:`VerificationError`), it is never skipped.
        """
        doc = self._release_docs.get(tag)
        if doc is None:
            found = self._api_json(f"/repos/{self.repo}/releases/tags/{quote(tag, safe='')}")
            if not isinstance(found, dict):
                raise NetworkError(f"{self.api} did not answer a release object for {tag}")
            doc = self._release_docs[tag] = found
        assets: dict[str, PublishedAsset] = {}
        for asset in doc.get("assets") or []:
            if not isinstance(asset, dict):
                continue
            name = str(asset.get("name"))
            size = asset.get("size")
            digest = asset.get("digest")
            sha256 = None
            if isinstance(digest, str) and digest.startswith("sha256:"):
                sha256 = digest.removeprefix("sha256:").lower()
                if not models.is_sha256(sha256):
                    raise VerificationError(
                        f"verification failed (digest): GitHub gave a malformed digest "
                        f"for {name[:80]}"
                    )
            assets[name] = PublishedAsset(
                name=name,
                size=size if isinstance(size, int) and not isinstance(size, bool) else None,
                sha256=sha256,
            )
        return ReleaseListing(tag=tag, draft=doc.get("draft") is True, assets=assets)

    def attestation_bundles(self, sha256: str) -> list[bytes]:
        """The SLSA provenance bundles GitHub lists for ``sha256``, one JSON line each.

        An item carries its bundle inline (``{"bundle": {...}}``) or, since 2026-07-16, as
        ``"bundle": null`` (or no ``bundle`` at all) plus a ``bundle_url``: a pre-signed blob
        of snappy-compressed JSON (see docs/design.md), fetched by :meth:`_download_bundle`.
        The list may hold other attestations of the same digest (GitHub's immutable-release
        attestation beside the build provenance): only bundles whose statement is an SLSA
        provenance with ``sha256`` among its subjects are returned, for the verifier to pick
        the one whose identity matches. An item that cannot be read is skipped when another
        one can; when none can, this raises a :class:`NetworkError` naming the URL that
        failed. An API that refuses anonymous requests is said so, with what to do.
        """
        from urllib.parse import urlencode

        path = f"/repos/{self.repo}/attestations/sha256:{sha256}"
        query = urlencode({"predicate_type": PROVENANCE})
        try:
            doc = self._api_json(f"{path}?{query}")
        except RateLimitError:
            raise
        except NetworkError as exc:
            if exc.status in (401, 403) and not self._client.token:
                raise NetworkError(
                    f"GitHub's attestations API refused an anonymous request ({exc.message})",
                    hint="set MUX_GITHUB_TOKEN (or GITHUB_TOKEN); a release that ships its "
                    "Sigstore bundle as an asset needs no API",
                    status=exc.status,
                ) from None
            raise
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
            if isinstance(kind, str) and kind != PROVENANCE:
                continue  # e.g. GitHub's immutable-release attestation, if the filter is ignored
            try:
                if isinstance(entry.get("bundle"), dict):
                    bundle = json.dumps(entry["bundle"]).encode()
                elif isinstance(entry.get("bundle_url"), str):
                    bundle = self._download_bundle(entry["bundle_url"])
                else:
                    raise NetworkError(
                        f"{self.api}{path} listed an attestation with neither a bundle "
                        "nor a bundle_url"
                    )
            except NetworkError as exc:
                failures.append(exc.message)
                continue
            if _attests_provenance_of(bundle, sha256) is not False:
                bundles.append(bundle)  # (an unreadable statement: the verifier says why)
        if failures and not bundles:
            more = f" (and {len(failures) - 1} more failed)" if len(failures) > 1 else ""
            raise NetworkError(failures[0] + more)
        return bundles

    def _download_bundle(self, url: str, *, max_size: int = BUNDLE_LIMIT) -> bytes:
        """One ``bundle_url`` blob as a one-line JSON bundle.

        The blob lives on another host (Azure storage for github.com), so it is fetched by a
        client of its own: no GitHub token, only that URL's host (HTTPS, or loopback HTTP),
        at most ``max_size`` bytes. It is snappy (block or framed) or plain JSON, and it
        decompresses to at most ``max_size`` bytes. Errors name the URL without its query,
        which carries the pre-signed access signature.
        """
        import httpx

        from updater.formats import snappy

        try:
            shown = urlsplit(url)._replace(query="", fragment="").geturl()
            policy = HostPolicy(allowed_hosts=frozenset({url_origin(url)}))
            with HttpClient(policy=policy, token=None, settings=self._http) as client:
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


def _attests_provenance_of(bundle: bytes, sha256: str) -> bool | None:
    """Whether a bundle's in-toto statement is an SLSA provenance naming ``sha256`` as a
    subject, read without verifying anything (to choose among several attestations of one
    digest; the verifier checks the one it is given); None when it cannot be read."""
    import base64
    import binascii

    try:
        envelope = json.loads(bundle).get("dsseEnvelope")
        statement = json.loads(base64.b64decode(envelope["payload"], validate=True))
        subjects = statement["subject"]
        predicate = statement["predicateType"]
        digests = {str(s["digest"]["sha256"]).lower() for s in subjects if "sha256" in s["digest"]}
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError, binascii.Error):
        return None
    return predicate == PROVENANCE and sha256.lower() in digests


# -- local files -------------------------------------------------------------------------------


def _read_local(path: Path, max_size: int) -> bytes:
    try:
        with path.open("rb") as handle:
            data = handle.read(max_size + 1)
    except OSError as exc:
        raise NetworkError(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > max_size:
        raise NetworkError(f"{path} is larger than {max_size} bytes; refusing it")
    return data


# -- a static feed -----------------------------------------------------------------------------


class FeedSource(ReleaseSource):
    """A static feed: ``releases.json`` plus one folder per tag, in a directory or at a URL.

    With an ``index`` policy (what :func:`open_source` always gives a mux feed), the index is
    believed only once verified (:func:`updater.sources.feed_index.verify_feed_index`): it alone says
    which releases exist, which is the newest, and a release asked for by tag must be listed.
    """

    kind = "feed"
    # A mirror is trusted only through the release key; attestations are checked when the
    # feed carries them (it has no API to look them up by digest).
    signature_required = True
    attestation_required = False
    attestation_lookup = False

    def __init__(
        self,
        location: str,
        *,
        http: HttpSettings | None = None,
        index: IndexPolicy | None = None,
    ) -> None:
        self.location = location.rstrip("/") or location
        self._directory: Path | None = None
        self._client: HttpClient | None = None
        self._index_policy = index
        self._verified: VerifiedIndex | None = None
        parts = urlsplit(location)
        if parts.scheme in ("http", "https"):
            check_url_scheme(location)
            # A feed is not GitHub: it never sees a GitHub token.
            self._client = self._files_client = HttpClient(
                policy=HostPolicy(allowed_hosts=frozenset({url_origin(location)})),
                token=None,
                settings=http,
                plain_loopback_only=parts.scheme == "http",  # check_url_scheme: loopback only
            )
        elif parts.scheme in ("", "file"):
            path = Path(parts.path if parts.scheme == "file" else location).expanduser()
            if not path.is_dir():
                raise UsageError(f"release feed {location} is not a directory or a URL")
            self._directory = path.resolve()
            self.location = str(self._directory)
        else:
            raise UsageError(
                f"unsupported release source {location}",
                hint="use 'github', an https:// feed URL or a feed directory",
            )

    def close(self) -> None:
        if self._client:
            self._client.close()

    def _read(self, relative: str, max_size: int) -> bytes:
        if self._directory is not None:
            return _read_local(self._directory / relative, max_size)
        assert self._client is not None
        return self._client.get(f"{self.location}/{relative}", max_size=max_size).content

    def _read_index(self, *, conditional: bool = True) -> bytes:
        """``releases.json``; over HTTP a conditional request (an unchanged index costs a 304;
        what it stands for is verified all the same, against a signature fetched every time).
        ``conditional=False`` asks for the whole body again (and stores it)."""
        from updater.sources.feed_index import INDEX_LIMIT

        if self._client is None:
            return self._read(models.FEED_INDEX_NAME, INDEX_LIMIT)
        url = f"{self.location}/{models.FEED_INDEX_NAME}"
        store = _Conditional(_etag_cache_dir())
        if not conditional:
            return store.get_fresh(self._client, url, {}, INDEX_LIMIT)
        return store.get(self._client, url, {}, INDEX_LIMIT)

    def verified_index(self) -> VerifiedIndex | None:
        return self._verified

    def _index(self) -> VerifiedIndex:
        """The feed's index, verified (read once per source)."""
        from updater.formats.trusted_comments import FEED_SIGNATURE_NAME
        from updater.sources.feed_index import INDEX_LIMIT, verify_feed_index

        assert self._index_policy is not None
        if self._verified is None:
            index = self._read_index()
            signature, missing = None, ""
            try:
                signature = self._read(FEED_SIGNATURE_NAME, INDEX_LIMIT)
            except NetworkError as exc:
                missing = exc.message
            try:
                self._verified = verify_feed_index(
                    self.location, index, signature, self._index_policy, missing_signature=missing
                )
            except VerificationError:
                if self._client is None or signature is None:
                    raise
                # The stored body a 304 confirmed may be older than the signature: a server
                # whose Last-Modified has one-second steps answers 304 for an index rewritten
                # within the second it was last read, for ever. Read it whole, once, and judge
                # that (a forged list fails again).
                fresh = self._read_index(conditional=False)
                if fresh == index:
                    raise
                self._verified = verify_feed_index(
                    self.location, fresh, signature, self._index_policy, missing_signature=""
                )
        return self._verified

    def resolve(self, request: ReleaseRequest, *, parse: TagRule = models.parse_tag) -> str:
        tag = request.tag()
        if tag is not None and self._index_policy is not None and not self._index().lists(tag):
            raise MuxError(
                f"the signed release list of {self.location} does not list {tag}",
                hint="choose a version it lists (run without --version for the newest), or "
                "check the source (--source / MUX_UPDATE_SOURCE)",
            )
        return super().resolve(request, parse=parse)

    def latest_tag(self, *, include_pre: bool, parse: TagRule = models.parse_tag) -> str:
        if self._index_policy is None:
            # An artifact mirror's list (mux-release repin): read as it is, checked per file.
            releases = models.parse_releases_json(self._read_index())
            listed = [r for r in releases if include_pre or not r.version.is_prerelease]
            newest = max(listed, key=lambda r: r.version).tag if listed else None
        else:
            newest = self._index().newest(include_pre=include_pre)
        if newest is None:
            what = "release" if include_pre else "stable release"
            raise MuxError(
                f"the release list {self.location}/{models.FEED_INDEX_NAME} names no {what}",
                hint="pass --version X (or --pre) to take a pre-release, or check the feed",
            )
        return newest

    def release_page(self, tag: str) -> str:
        return f"{self.location}/{quote(tag)}/"

    def file_url(self, tag: str, name: str) -> str:
        if self._directory is not None:
            return str(self._directory / tag / name)
        return f"{self.location}/{quote(tag)}/{quote(name)}"

    def fetch(self, tag: str, name: str, *, max_size: int = SMALL_FILE_LIMIT) -> bytes:
        return self._read(f"{tag}/{name}", max_size)


# -- one release folder ------------------------------------------------------------------------


class ReleaseFolderSource(ReleaseSource):
    """The files of one release in a folder, as ``mux-release package`` writes them.

    Its only tag is ``tag``, else ``v`` + its manifest's version. A release about to be
    published must pass every layer, so both its signature and its attestation are required.
    """

    kind = "folder"
    signature_required = True
    attestation_required = True
    attestation_lookup = False

    def __init__(self, folder: Path, *, tag: str | None = None) -> None:
        folder = Path(folder)
        if not (folder / models.MANIFEST_NAME).is_file():
            raise UsageError(f"{folder} holds no {models.MANIFEST_NAME}; is it a release folder?")
        self.folder = folder
        self.location = str(folder)
        if tag is None:
            manifest = models.parse_manifest(self.fetch("", models.MANIFEST_NAME))
            tag = models.tag_for(manifest.version)
        self.tag = tag

    def latest_tag(self, *, include_pre: bool, parse: TagRule = models.parse_tag) -> str:
        return self.tag

    def release_page(self, tag: str) -> str:
        return str(self.folder)

    def file_url(self, tag: str, name: str) -> str:
        return str(self.folder / name)

    def fetch(self, tag: str, name: str, *, max_size: int = SMALL_FILE_LIMIT) -> bytes:
        return _read_local(self.folder / name, max_size)
