"""The verification layers' names, their log, and what passing them yields.

Every layer failure is a :class:`~updater.errors.VerificationError` made by
:func:`layer_failure`, naming the layer; :class:`VerificationLog` keeps the layers that passed
(or were skipped, and why) for the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from updater.errors import VerificationError
from updater.formats import models

if TYPE_CHECKING:
    from updater.core.transfer import Transfer
    from updater.install.layout import UnpackedFiles


LAYER_TUF = "tuf"  # the TUF repository: which releases exist, every file's length and digest
LAYER_SIGNATURE = "signature"
LAYER_MANIFEST = "manifest"
LAYER_DIGEST = "digest"
LAYER_API_DIGEST = "api-digest"
LAYER_ATTESTATION = "attestation"
LAYER_ARCHIVE = "archive"
LAYER_SMOKE_TEST = "smoke-test"


class LayerResult(NamedTuple):
    layer: str
    status: str  # "ok" | "skipped"
    detail: str


class VerificationLog:
    """The layers that passed (or were skipped, and why), for the report."""

    def __init__(self, layers: list[LayerResult] | None = None) -> None:
        self.layers: list[LayerResult] = [] if layers is None else layers

    def ok(self, layer: str, detail: str) -> None:
        self.layers.append(LayerResult(layer, "ok", detail))

    def skipped(self, layer: str, detail: str) -> None:
        self.layers.append(LayerResult(layer, "skipped", detail))


def layer_failure(layer: str, message: str, hint: str | None = None) -> VerificationError:
    return VerificationError(f"verification failed ({layer}): {message}", hint=hint)


# -- the pipeline ----------------------------------------------------------------------------


class VerifiedRelease(NamedTuple):
    """Layers 1 and 2 on the small documents: the signed sums and the manifest they vouch for."""

    tag: str
    sums: dict[str, str]
    manifest: models.Manifest
    # The signed time of SHA256SUMS.minisig (its trusted comment's timestamp); None when no
    # signature was checked (a build that trusts no key, from GitHub).
    signed_at: int | None = None


class VerifiedFiles(NamedTuple):
    """One archive's tree that passed every layer, in ``folder`` (unpacked from the archive,
    or built from a kept version and a delta: ``transfer`` says which, and what was
    downloaded); ``unpacked``: the files written there with their digests (for the
    install's file list)."""

    asset: models.ManifestAsset
    archive_sha256: str
    folder: Path
    unpacked: UnpackedFiles | None = None
    transfer: Transfer | None = None
