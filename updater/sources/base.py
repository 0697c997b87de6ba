"""Where releases come from: the one interface every source implements.

Every source is a :class:`ReleaseSource`: it finds tags, reads a release's small files,
downloads its archives and, where it can, lists GitHub's asset digests and finds attestations
by digest. It also declares what a trust policy must demand of its releases
(:attr:`~ReleaseSource.signature_required`, :attr:`~ReleaseSource.attestation_required`).
What the trust layers read of it is :class:`updater.trust.source.ReleaseFiles`, the interface
beside them, which this base implements (the records it lists assets in live there too).
Nothing outside :mod:`updater.sources` opens an HTTP client for releases or asks which kind
a source is: :func:`updater.sources.opener.open_source` picks one.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from updater.core.hints import not_found_hint
from updater.errors import (
    NetworkError,
)
from updater.files import NotReadable, TooLarge, read_small_file
from updater.formats import models
from updater.net.client import HttpClient
from updater.net.download import Downloaded, download
from updater.trust.layers import LAYER_TUF, layer_failure
from updater.trust.source import ReleaseListing

if TYPE_CHECKING:
    from updater.core.request import ReleaseRequest
    from updater.formats.lifecycle import SignedLifecycle
    from updater.net.progress import Progress
    from updater.sources.feed_index import VerifiedIndex
    from updater.sources.tuf_index import TufIndex
    from updater.trust.tuf_targets import SignedFile


SMALL_FILE_LIMIT = 8 * 1024 * 1024
BUNDLE_LIMIT = 16 * 1024 * 1024

# Checks that a string is a release tag (raises ParseError when not).
TagRule = Callable[[str], object]


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
    def read_file(self, tag: str, name: str, *, max_size: int = SMALL_FILE_LIMIT) -> bytes:
        """A small file of the release as the source serves it, read whole
        (:class:`NetworkError` when it cannot be); :meth:`fetch` is the checked way in."""

    # The TUF repository the releases are read through (updater.sources.tuf_index); None for
    # a build that trusts no TUF root: then a feed's signed index or GitHub decides.
    tuf: TufIndex | None = None

    def fetch(self, tag: str, name: str, *, max_size: int = SMALL_FILE_LIMIT) -> bytes:
        """A small file of the release, read whole. From a TUF source it must be a target of
        the verified metadata, and it is read no further than its signed length and checked
        against its signed sha256 before anyone parses it."""
        signed = self.signed_file(tag, name)
        if signed is None:
            return self.read_file(tag, name, max_size=max_size)
        data = self.read_file(tag, name, max_size=signed.length)
        check_signed(data, signed, name, tag, self.location)
        return data

    def signed_file(self, tag: str, name: str) -> SignedFile | None:
        """What the verified TUF targets say of a release file (None from a source without
        TUF); a file they do not list is refused (exit 3)."""
        if self.tuf is None:
            return None
        signed = self.tuf.file(tag, name)
        if signed is None:
            raise layer_failure(
                LAYER_TUF,
                f"{name} of {tag} is not a target of the signed metadata of {self.tuf.location}",
                hint="the release is incomplete on this source, or the file was added to it",
            )
        return signed

    def signed_until(self) -> float | None:
        """Until when the answer this source gave may be reused: its TUF timestamp's expiry,
        a feed index's ``expires``; None when nothing signed says (GitHub without TUF)."""
        if self.tuf is not None:
            return self.tuf.targets().versions.timestamp_expires
        index = self.verified_index()
        return None if index is None or index.expired else float(index.comment.expires)

    # The request resolved named a version (--version): a 404's hint names it then.
    asked_version = False

    def not_found(self, exc: NetworkError, *, index: bool = False) -> NetworkError:
        """``exc`` with the hint a 404 from this source needs (what applies, only)."""
        if exc.status == 404 and exc.hint is None:
            exc.hint = not_found_hint(self.kind, asked_version=self.asked_version, index=index)
        return exc

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

        try:
            return download(
                self.file_url(tag, name),
                into,
                size=size,
                max_size=max_size,
                client=self._files_client,
                label=name,
                progress=progress,
            )
        except NetworkError as exc:
            raise self.not_found(exc) from None

    def listing(self, tag: str) -> ReleaseListing | None:
        """The release's assets as its host lists them; None where there is no such list."""
        return None

    def verified_index(self) -> VerifiedIndex | None:
        """The signed index this source decided from (a feed's), once it was read; None for a
        source without one. Its ``seq`` is recorded once the command's answer stands
        (:func:`updater.sources.feed_index.remember`)."""
        return None

    # Why lifecycle() is None here, for reports (``--check --json``: lifecycle unavailable).
    lifecycle_unavailable = "this source carries no signed lifecycle state"

    def lifecycle(self) -> SignedLifecycle | None:
        """Every release this source's signed data lists, with its lifecycle record (staged
        rollout, halt, withdrawal, critical, minimum version, notes: the seam of
        :mod:`updater.formats.lifecycle`), once that data verified; None where the source has
        no signed data to carry it (nothing is ever guessed from unsigned data). From a TUF
        source: its verified targets (every source kind alike)."""
        return self.tuf.lifecycle() if self.tuf is not None else None

    def attestation_bundles(self, sha256: str) -> list[bytes]:
        """Attestation bundles for ``sha256`` (only where :attr:`attestation_lookup`)."""
        return []

    def close(self) -> None:  # noqa: B027 - a source without a connection has nothing to close
        """Release the connection (a local source holds none)."""

    def resolve(self, request: ReleaseRequest, *, parse: TagRule = models.parse_tag) -> str:
        """The tag ``request`` names, or this source's newest for it (from a TUF source: what
        its verified targets list)."""
        self.asked_version = request.exact
        if self.tuf is not None:
            return self.tuf.resolve(request)
        return request.tag() or self.latest_tag(include_pre=request.include_pre, parse=parse)

    def fetch_optional(
        self, tag: str, name: str, *, max_size: int = SMALL_FILE_LIMIT
    ) -> bytes | None:
        """A file the release may lack: None when it cannot be read (or, from a TUF source,
        when the signed targets do not list it)."""
        if self.tuf is not None and self.tuf.file(tag, name) is None:
            return None
        try:
            return self.fetch(tag, name, max_size=max_size)
        except NetworkError:
            return None

    def __enter__(self) -> ReleaseSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def check_signed(data: bytes, signed: SignedFile, name: str, tag: str, location: str) -> None:
    """``data`` must be exactly the target the TUF metadata signed (length, then sha256)."""
    if len(data) != signed.length:
        raise layer_failure(
            LAYER_TUF,
            f"{name} of {tag} from {location} is {len(data)} bytes, its signed length is "
            f"{signed.length}",
            hint="the source altered or truncated it; do not install from it",
        )
    actual = hashlib.sha256(data).hexdigest()
    if actual != signed.sha256:
        raise layer_failure(
            LAYER_TUF,
            f"{name} of {tag} from {location} has sha256 {actual}, the signed TUF targets say "
            f"{signed.sha256}",
            hint="the source altered or swapped it; do not install from it, and report it",
        )


# -- local files -------------------------------------------------------------------------------


def read_local(path: Path, max_size: int) -> bytes:
    """A local source's file, at most ``max_size`` bytes: read by
    :func:`~updater.files.read_small_file`, so a FIFO or a device in its place cannot hang it."""
    try:
        data = read_small_file(str(path), max_size)
    except TooLarge:
        raise NetworkError(f"{path} is larger than {max_size} bytes; refusing it") from None
    except NotReadable as exc:
        raise NetworkError(f"cannot read {path}: {exc}") from None
    if data is None:
        raise NetworkError(f"cannot read {path}: it does not exist")
    return data
