"""A static feed as a release source: a folder or an ``https://`` URL (docs/contracts.md).

It holds ``releases.json`` with its signature and one folder per tag; the verified index
alone says which releases exist and which is newest (:mod:`updater.sources.feed_index`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit

from updater.config.settings import HttpSettings
from updater.core.hints import did_you_mean, listed_versions
from updater.errors import (
    MuxError,
    NetworkError,
    UsageError,
    VerificationError,
)
from updater.formats import models
from updater.formats.trusted_comments import FEED_SIGNATURE_NAME
from updater.net.client import HttpClient
from updater.net.hosts import HostPolicy
from updater.sources.base import (
    SMALL_FILE_LIMIT,
    ReleaseSource,
    TagRule,
    read_local,
)
from updater.sources.etags import ConditionalCache, etag_cache_dir
from updater.sources.feed_index import INDEX_LIMIT, verify_feed_index
from updater.sources.tuf_index import TufIndex
from updater.urls import (
    check_url_scheme,
    url_origin,
)

if TYPE_CHECKING:
    from updater.core.request import ReleaseRequest
    from updater.formats.lifecycle import SignedLifecycle
    from updater.sources.feed_index import IndexPolicy, VerifiedIndex
    from updater.sources.tuf_index import TufSpec


SOURCE_FORMS = "use 'github', an https:// feed URL or a feed directory"


class FeedSource(ReleaseSource):
    """A static feed: ``releases.json`` plus one folder per tag, in a directory or at a URL.

    With an ``index`` policy (what :func:`open_source` gives a mux feed of a build without a
    TUF root), the index is believed only once verified
    (:func:`updater.sources.feed_index.verify_feed_index`): it alone says which releases exist,
    which is the newest, and a release asked for by tag must be listed. With ``tuf`` (a
    build that trusts a TUF root), the feed's own ``metadata/`` says all of that instead
    (:mod:`updater.sources.tuf_index`), and ``releases.json`` is not read.
    """

    kind = "feed"
    lifecycle_unavailable = "an unsigned artifact mirror carries no lifecycle state"
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
        tuf: TufSpec | None = None,
        lock_wait: float = 10.0,
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
                meant = did_you_mean(location)
                raise UsageError(
                    f"release feed {location} is not a directory or a URL",
                    hint=f"did you mean {meant}?" if meant else SOURCE_FORMS,
                )
            self._directory = path.resolve()
            self.location = str(self._directory)
        else:
            raise UsageError(
                f"unsupported release source {location}",
                hint=SOURCE_FORMS,
            )
        if tuf is not None:
            self.tuf = TufIndex(
                tuf._replace(metadata_url=f"{self.location}/metadata"),
                client=self._client,
                lock_wait=lock_wait,
            )

    def close(self) -> None:
        if self._client:
            self._client.close()

    def _read(self, relative: str, max_size: int) -> bytes:
        if self._directory is not None:
            return read_local(self._directory / relative, max_size)
        assert self._client is not None
        try:
            return self._client.get(f"{self.location}/{relative}", max_size=max_size).content
        except NetworkError as exc:
            raise self.not_found(exc) from None

    def _read_index(self, *, conditional: bool = True) -> bytes:
        """``releases.json``; over HTTP a conditional request (an unchanged index costs a 304;
        what it stands for is verified all the same, against a signature fetched every time).
        ``conditional=False`` asks for the whole body again (and stores it)."""

        if self._client is None:
            return self._read(models.FEED_INDEX_NAME, INDEX_LIMIT)
        url = f"{self.location}/{models.FEED_INDEX_NAME}"
        store = ConditionalCache(etag_cache_dir())
        try:
            if not conditional:
                return store.get_fresh(self._client, url, {}, INDEX_LIMIT)
            return store.get(self._client, url, {}, INDEX_LIMIT)
        except NetworkError as exc:
            raise self.not_found(exc, index=True) from None

    def verified_index(self) -> VerifiedIndex | None:
        return self._verified

    def lifecycle(self) -> SignedLifecycle | None:
        if self.tuf is not None:
            return super().lifecycle()  # a TUF build never reads the index
        if self._index_policy is None:
            return None  # an unsigned artifact mirror carries no lifecycle
        return self._index().lifecycle()

    def _index(self) -> VerifiedIndex:
        """The feed's index, verified (read once per source)."""

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
        if self.tuf is not None:
            return super().resolve(request, parse=parse)
        tag = request.tag()
        if tag is not None and self._index_policy is not None and not self._index().lists(tag):
            releases = sorted(self._index().releases, key=lambda r: r.version, reverse=True)
            raise MuxError(
                f"the signed release list of {self.location} does not list {tag}",
                hint=listed_versions(str(release.version) for release in releases),
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

    def read_file(self, tag: str, name: str, *, max_size: int = SMALL_FILE_LIMIT) -> bytes:
        return self._read(f"{tag}/{name}", max_size)
