"""What the trust layer reads a release through: the interface, beside its user.

The layers take a release's files from a source they do not trust: :class:`ReleaseFiles` is
all they ask of it (read a small file, checked against the signed TUF targets where there are
some; download an archive; list GitHub's asset digests; find attestations by digest; say what
a trust policy must demand of it). It sits here, with the layers that use it, as httpx's
transport interface sits with its client: :class:`updater.sources.base.ReleaseSource`, the
base every source inherits, implements it (one idea at two layers: the sources say where the
files come from, this module what trust reads of them), and nothing here imports the sources.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    from updater.net.download import Downloaded
    from updater.net.progress import Progress
    from updater.trust.tuf_targets import SignedFile, SignedTargets


class PublishedAsset(NamedTuple):
    """An asset as the release page lists it (GitHub's API), before anything is downloaded."""

    name: str
    size: int | None
    sha256: str | None  # GitHub's own digest (absent on releases made before 2025-06)


class ReleaseListing(NamedTuple):
    tag: str
    draft: bool
    assets: Mapping[str, PublishedAsset]


class SignedRepository(Protocol):
    """A source's TUF repository, as far as the layers report on it."""

    def targets(self) -> SignedTargets: ...


class ReleaseFiles(Protocol):
    """A release source, as the trust layers read it (the members are read-only here)."""

    @property
    def kind(self) -> str: ...  # for reports only: nothing decides by it

    @property
    def location(self) -> str: ...

    @property
    def signature_required(self) -> bool: ...  # a SHA256SUMS.minisig a trusted key signed

    @property
    def attestation_required(self) -> bool: ...  # a verifiable build attestation

    @property
    def attestation_lookup(self) -> bool: ...  # attestation_bundles() can search by digest

    @property
    def tuf(self) -> SignedRepository | None: ...  # None: no TUF root is trusted

    def fetch(self, tag: str, name: str, *, max_size: int = ...) -> bytes:
        """A small file of the release, read whole (from a TUF source: checked against its
        signed length and sha256 before it is returned)."""
        ...

    def fetch_optional(self, tag: str, name: str, *, max_size: int = ...) -> bytes | None:
        """A file the release may lack: None when it cannot be read."""
        ...

    def file_url(self, tag: str, name: str) -> str: ...

    def signed_file(self, tag: str, name: str) -> SignedFile | None:
        """What the verified TUF targets say of a release file (None without TUF)."""
        ...

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
        """A release file into a temporary file in ``into``."""
        ...

    def listing(self, tag: str) -> ReleaseListing | None:
        """The release's assets as its host lists them; None where there is no such list."""
        ...

    def attestation_bundles(self, sha256: str) -> list[bytes]:
        """Attestation bundles for ``sha256`` (only where :attr:`attestation_lookup`)."""
        ...
