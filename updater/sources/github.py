"""GitHub as a release source, off the rate-limited API for everything it can.

Release files come from ``/releases/download/<tag>/``. Which releases exist and which is the
newest: for a build that trusts a TUF root, the verified TUF metadata of the project's
repository (its GitHub Pages, or what the machine policy names: :mod:`updater.sources.tuf_index`),
which also gives every file's signed length and digest; for a build of before TUF, the
``/releases/latest`` redirect, and for ``--pre`` the API's release list. The API is asked
only for what only it has (asset digests, attestations, and that release list), with
``If-None-Match`` (:mod:`updater.sources.etags`).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlencode

import httpx

from updater.config.settings import DOWNLOAD_HOSTS_ENV, HttpSettings
from updater.errors import (
    NetworkError,
    ParseError,
    RateLimitError,
    UsageError,
    VerificationError,
)
from updater.formats import models, snappy
from updater.net.client import HttpClient
from updater.net.hosts import HostPolicy
from updater.net.refusals import RateLimits
from updater.sources.base import BUNDLE_LIMIT, SMALL_FILE_LIMIT, ReleaseSource, TagRule
from updater.sources.etags import ConditionalCache, etag_cache_dir
from updater.sources.tuf_index import TufIndex
from updater.trust.source import PublishedAsset, ReleaseListing
from updater.urls import (
    GITHUB_WEB,
    check_url_scheme,
    github_api_for,
    parse_download_host,
    shown_url,
    url_origin,
)

if TYPE_CHECKING:
    from updater.sources.tuf_index import TufSpec


GITHUB_API = "https://api.github.com"
GITHUB_DOWNLOAD_HOSTS = (
    "github.com",
    "objects.githubusercontent.com",
    "release-assets.githubusercontent.com",
)
PROVENANCE = "https://slsa.dev/provenance/v1"
RELEASES_PER_PAGE = 100  # GitHub's largest page
MAX_RELEASE_PAGES = 10  # the newest 1000 releases: a bound, not a limit anyone meets


# -- GitHub ------------------------------------------------------------------------------------


def next_link(header: str | None) -> str | None:
    """The ``rel="next"`` URL of an RFC 8288 ``Link`` header, as GitHub paginates."""

    for match in re.finditer(r"<([^<>]*)>((?:\s*;\s*[^;,]*)*)", header or ""):
        params = match.group(2)
        if re.search(r';\s*rel\s*=\s*"?(?:[^";,]*\s)?next(?:\s[^";,]*)?"?', params):
            return match.group(1)
    return None


def github_download_url(web: str, repo: str, tag: str, name: str) -> str:
    """Where GitHub serves a release file (off the rate-limited API)."""
    return f"{web.rstrip('/')}/{repo}/releases/download/{quote(tag)}/{quote(name)}"


class GitHubSource(ReleaseSource):
    kind = "github"
    # The build trusts a key or not (the policy decides); the release workflow attests all.
    signature_required = False
    attestation_required = True
    attestation_lookup = True
    # A release page is not signed data: nothing on it may halt, withdraw or stage a release.
    lifecycle_unavailable = (
        "GitHub's release pages carry no signed lifecycle state (staged rollout, halt, "
        "withdrawal, critical, minimum version, notes); a build that trusts a TUF root reads "
        "it from the TUF targets, a feed carries it in its signed release list"
    )

    def __init__(
        self,
        repo: str,
        *,
        web_url: str | None = None,
        api_url: str | None = None,
        token: str | None = None,
        http: HttpSettings | None = None,
        download_hosts: Sequence[str] = (),
        tuf: TufSpec | None = None,
        lock_wait: float = 10.0,
    ) -> None:
        if not repo or repo.count("/") != 1:
            raise UsageError(
                "no GitHub repository to update from (a development build has none)",
                hint="set MUX_REPO=owner/name, or use --source with a feed",
            )
        self.repo = repo
        self.web = (web_url or GITHUB_WEB).rstrip("/")

        # An Enterprise server's API is its own (as gh finds it), never api.github.com.
        self.api = (api_url or github_api_for(self.web)).rstrip("/")
        for base in (self.web, self.api):
            check_url_scheme(base)
        self.location = f"{self.web}/{repo}"
        # Origins (scheme, host, effective port): a portless Enterprise URL is its :443 (or
        # loopback :80) and nothing else on that host, which may serve storage on another port.
        configured = {url_origin(self.web), url_origin(self.api)}
        # The token is for the server it belongs to: github.com's hosts see it only when
        # the web URL is github.com, never an Enterprise token (nor one after a redirect).
        on_github_com = url_origin(self.web) == url_origin(GITHUB_WEB)
        github_com = {url_origin(GITHUB_WEB), url_origin(GITHUB_API)} if on_github_com else set()
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
                {
                    *(url_origin(f"https://{host}") for host in GITHUB_DOWNLOAD_HOSTS),
                    url_origin(GITHUB_API),
                    *configured,
                    *storage,
                }
            ),
            token_hosts=frozenset({*github_com, *configured}),
            advice=f"a GitHub Enterprise storage host can be allowed with {DOWNLOAD_HOSTS_ENV}",
        )
        self._http = http or HttpSettings()
        self._client = HttpClient(
            policy=self.policy,
            token=token,
            settings=self._http,
            rate_limits=RateLimits(etag_cache_dir() / "rate-limits.json"),
        )
        self._files_client = self._client
        self._conditional = ConditionalCache(etag_cache_dir())
        self._release_docs: dict[str, dict[str, Any]] = {}
        # A build that trusts a TUF root learns the releases from its repository's metadata
        # (the project's Pages, or what the policy names), read by a client of its own that
        # never sends the GitHub token; the files still come from /releases/download/.
        self._metadata_client: HttpClient | None = None
        if tuf is not None:
            if "://" in tuf.metadata_url:
                check_url_scheme(tuf.metadata_url)
                self._metadata_client = HttpClient(
                    policy=HostPolicy(allowed_hosts=frozenset({url_origin(tuf.metadata_url)})),
                    token=None,
                    settings=self._http,
                    plain_loopback_only=tuf.metadata_url.startswith("http://"),
                )
            self.tuf = TufIndex(tuf, client=self._metadata_client, lock_wait=lock_wait)

    def close(self) -> None:
        self._client.close()
        if self._metadata_client is not None:
            self._metadata_client.close()

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
        try:
            body, link = self._conditional.get_with_link(self._client, url, headers, 16 << 20)
        except NetworkError as exc:
            raise self.not_found(exc) from None
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
                    f"{self.api} pointed the next page of releases elsewhere "
                    f"({shown_url(url)[:200]})"
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

    def read_file(self, tag: str, name: str, *, max_size: int = SMALL_FILE_LIMIT) -> bytes:
        try:
            return self._client.get(self.file_url(tag, name), max_size=max_size).content
        except NetworkError as exc:
            raise self.not_found(exc) from None

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

        try:
            shown = shown_url(url)
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
            raise NetworkError(
                f"GitHub listed a malformed bundle_url {shown_url(url)[:200]!r}"
            ) from None
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

    try:
        envelope = json.loads(bundle).get("dsseEnvelope")
        statement = json.loads(base64.b64decode(envelope["payload"], validate=True))
        subjects = statement["subject"]
        predicate = statement["predicateType"]
        digests = {str(s["digest"]["sha256"]).lower() for s in subjects if "sha256" in s["digest"]}
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError, binascii.Error):
        return None
    return predicate == PROVENANCE and sha256.lower() in digests
