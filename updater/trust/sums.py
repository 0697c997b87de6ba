"""Layers 1 and 2 on the small documents: the signed ``SHA256SUMS`` and what it vouches for.

Layer 1 checks ``SHA256SUMS.minisig`` with the trusted keys and reads its trusted comment
(``version:`` must name this release, ``timestamp:`` is its signed time); layer 2 checks the
manifest against its ``SHA256SUMS`` line and its tag, and the downloaded archive's streamed
digest against the signed one (and GitHub's asset digest when there is one).
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from updater.errors import ParseError, VerificationError
from updater.formats import minisign, models
from updater.formats.trusted_comments import ReleaseComment
from updater.timestamps import utc_text
from updater.trust.layers import (
    LAYER_DIGEST,
    LAYER_MANIFEST,
    LAYER_SIGNATURE,
    VerificationLog,
    layer_failure,
)
from updater.trust.trust_policy import TrustPolicy


class SignedSums(NamedTuple):
    """``SHA256SUMS``, parsed, and what its verified signature says (None: not checked)."""

    sums: dict[str, str]
    timestamp: int | None = None


def verify_sums(
    sums: bytes,
    signature: bytes | None,
    policy: TrustPolicy,
    log: VerificationLog,
    *,
    tag: str,
    signature_url: str = models.SUMS_SIGNATURE_NAME,
) -> SignedSums:
    """Layer 1, then parse ``SHA256SUMS``.

    A verified signature must be for the release ``tag`` (its ``version:``) and carry its
    signed time (``timestamp:``), as install.sh demands.
    """

    timestamp = None
    if not policy.minisign_keys:
        if policy.require_signature:
            raise layer_failure(
                LAYER_SIGNATURE,
                "no trusted minisign key to check SHA256SUMS.minisig with",
                hint="give the mirror's public key: mux update --trust-key KEY "
                "(mux-release verify --key KEY)",
            )
        log.skipped(LAYER_SIGNATURE, "this build trusts no minisign key")
    else:
        if signature is None:
            raise layer_failure(LAYER_SIGNATURE, f"the release has no {models.SUMS_SIGNATURE_NAME}")
        try:
            keys = [minisign.PublicKey.parse(k) for k in policy.minisign_keys]
        except ParseError as exc:
            raise layer_failure(
                LAYER_SIGNATURE, f"a trusted key is unusable: {exc.message}"
            ) from None
        try:
            verified = minisign.verify(sums, signature, keys)
        except VerificationError as exc:
            raise layer_failure(
                LAYER_SIGNATURE, f"SHA256SUMS: {exc.message}", hint=exc.hint
            ) from None
        comment_text = verified.trusted_comment[:200]
        try:
            comment = ReleaseComment.parse(verified.trusted_comment)
        except ParseError as exc:
            raise layer_failure(
                LAYER_SIGNATURE, f"the signature {signature_url}: {exc.message}"
            ) from None
        if comment.version is None or models.tag_for(comment.version) != tag:
            raise layer_failure(
                LAYER_SIGNATURE,
                f"the signature {signature_url} is for another version "
                f"({comment.version or 'none named'}, not {tag.removeprefix('v')}; "
                f"its trusted comment: {comment_text})",
                hint="the mirror serves files of different releases together; "
                "do not install from it",
            )
        if comment.timestamp is None:
            raise layer_failure(
                LAYER_SIGNATURE,
                f"the signature {signature_url} has no signed timestamp "
                f"(its trusted comment: {comment_text})",
                hint="the release was not signed by mux-release; report it",
            )
        timestamp = comment.timestamp
        log.ok(
            LAYER_SIGNATURE,
            f"SHA256SUMS signed by minisign key {verified.key_id} "
            f"(mux {comment.version}, signed {utc_text(timestamp)})",
        )
    try:
        return SignedSums(models.parse_sha256sums(sums), timestamp)
    except ParseError as exc:
        raise layer_failure(LAYER_DIGEST, exc.message) from None


def verify_manifest(
    raw: bytes, sums: dict[str, str], tag: str, log: VerificationLog
) -> models.Manifest:
    """Layer 2 for ``manifest.json``: listed in the signed sums, and about this tag."""
    listed = sums.get(models.MANIFEST_NAME)
    actual = hashlib.sha256(raw).hexdigest()
    if listed is None:
        raise layer_failure(LAYER_MANIFEST, "SHA256SUMS does not list manifest.json")
    if listed != actual:
        raise layer_failure(
            LAYER_MANIFEST, f"manifest.json has sha256 {actual}, SHA256SUMS says {listed}"
        )
    try:
        manifest = models.parse_manifest(raw)
    except ParseError as exc:
        raise layer_failure(LAYER_MANIFEST, exc.message) from None
    if models.tag_for(manifest.version) != tag:  # exactly, as install.sh compares them
        raise layer_failure(
            LAYER_MANIFEST,
            f"manifest.json says version {manifest.version}, expected "
            f"{tag.removeprefix('v')} (tag {tag})",
            hint="the mirror serves files of different releases together; do not install from it",
        )
    log.ok(LAYER_MANIFEST, f"manifest.json matches SHA256SUMS and tag {tag}")
    return manifest


# -- layer 2 for the archive, and layer 3 ----------------------------------------------------


def signed_digest(name: str, *, sums: dict[str, str], manifest: models.Manifest) -> str:
    """Layer 2 before the download: the sha256 the signed ``SHA256SUMS`` gives for ``name``,
    which its manifest entry must repeat. This is the digest layer 3 attests while the archive
    downloads; :func:`verify_download` then holds the bytes on disk to it."""
    asset = next((a for a in manifest.assets if a.name == name), None)
    if asset is None:
        raise layer_failure(LAYER_DIGEST, f"manifest.json does not list {name}")
    listed = sums.get(name)
    if listed is None:
        raise layer_failure(LAYER_DIGEST, f"SHA256SUMS does not list {name}")
    if asset.sha256 != listed:
        raise layer_failure(
            LAYER_DIGEST, f"manifest.json gives {name} sha256 {asset.sha256}, SHA256SUMS {listed}"
        )
    return listed


def verify_download(
    name: str,
    sha256: str,
    size: int,
    *,
    signed: str,
    expected_size: int,
    api_digest: str | None,
    log: VerificationLog,
) -> None:
    """Layer 2 for the archive: the streamed bytes have the size the manifest gives and the
    digest :func:`signed_digest` took from the signed ``SHA256SUMS`` (which the manifest
    repeats), and GitHub's asset digest when there is one."""
    if size != expected_size:
        raise layer_failure(
            LAYER_DIGEST, f"{name} is {size} bytes, the manifest says {expected_size}"
        )
    if sha256 != signed:
        raise layer_failure(LAYER_DIGEST, f"{name} has sha256 {sha256}, SHA256SUMS says {signed}")
    sources = "SHA256SUMS and manifest.json"
    if api_digest is not None:
        if sha256 != api_digest:
            raise layer_failure(
                LAYER_DIGEST, f"{name} has sha256 {sha256}, GitHub's asset digest is {api_digest}"
            )
        sources += " and GitHub's asset digest"
    log.ok(LAYER_DIGEST, f"{name} sha256 {sha256} matches {sources}")
