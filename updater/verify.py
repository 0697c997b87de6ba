"""The verification layers of a release, in order, each failing closed.

1. ``SHA256SUMS`` is authentic: its minisign signature verifies with a trusted key.
2. The files are what was published: ``manifest.json`` matches its ``SHA256SUMS`` line and
   its tag; the download's streamed SHA-256 equals its ``SHA256SUMS`` line, its manifest
   entry and GitHub's asset digest when there is one.
3. Our release workflow built it: the Sigstore attestation verifies against the identity.

Layers 4 (the archive is safe to unpack) and 5 (the new build runs) happen while installing
(:mod:`updater.install`). ``mux update`` and ``mux-release verify`` both run exactly this code.
Every failure raises :class:`VerificationError` naming the layer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import models
from .errors import MuxError, NetworkError, ParseError, VerificationError

LAYER_SIGNATURE = "signature"
LAYER_MANIFEST = "manifest"
LAYER_DIGEST = "digest"
LAYER_ATTESTATION = "attestation"
LAYER_ARCHIVE = "archive"
LAYER_SMOKE_TEST = "smoke-test"


@dataclass(frozen=True)
class LayerResult:
    layer: str
    status: str  # "ok" | "skipped"
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"layer": self.layer, "status": self.status, "detail": self.detail}


@dataclass(frozen=True)
class TrustPolicy:
    """What must hold before anything is installed."""

    minisign_keys: tuple[str, ...]
    require_signature: bool
    repository: str  # owner/name whose release workflow must have built the release
    signer_workflow: str
    oidc_issuer: str
    require_attestation: bool
    skip_attestation: bool = False
    github_url: str = "https://github.com"
    trusted_root: Path | None = None

    def identity(self, tag: str) -> Any:
        from .attestation import AttestationIdentity

        return AttestationIdentity(
            repository=self.repository,
            signer_workflow=self.signer_workflow,
            ref=f"refs/tags/{tag}",
            issuer=self.oidc_issuer,
            github_url=self.github_url,
        )


@dataclass
class VerificationLog:
    """The layers that passed (or were skipped, and why), for the report."""

    layers: list[LayerResult] = field(default_factory=list)

    def ok(self, layer: str, detail: str) -> None:
        self.layers.append(LayerResult(layer, "ok", detail))

    def skipped(self, layer: str, detail: str) -> None:
        self.layers.append(LayerResult(layer, "skipped", detail))

    def to_json(self) -> list[dict[str, str]]:
        return [layer.to_json() for layer in self.layers]


def _fail(layer: str, message: str, hint: str | None = None) -> VerificationError:
    return VerificationError(f"verification failed ({layer}): {message}", hint=hint)


def verify_sums(
    sums: bytes, signature: bytes | None, policy: TrustPolicy, log: VerificationLog
) -> dict[str, str]:
    """Layer 1, then parse ``SHA256SUMS``."""
    from . import minisign

    if not policy.minisign_keys:
        if policy.require_signature:
            raise _fail(
                LAYER_SIGNATURE,
                "no trusted minisign key to check SHA256SUMS.minisig with",
                hint="give the mirror's public key: mux update --trust-key KEY "
                "(mux-release verify --key KEY)",
            )
        log.skipped(LAYER_SIGNATURE, "this build trusts no minisign key")
    else:
        if signature is None:
            raise _fail(LAYER_SIGNATURE, f"the release has no {models.SUMS_SIGNATURE_NAME}")
        try:
            keys = [minisign.PublicKey.parse(k) for k in policy.minisign_keys]
        except ParseError as exc:
            raise _fail(LAYER_SIGNATURE, f"a trusted key is unusable: {exc.message}") from None
        try:
            verified = minisign.verify(sums, signature, keys)
        except VerificationError as exc:
            raise _fail(LAYER_SIGNATURE, f"SHA256SUMS: {exc.message}", hint=exc.hint) from None
        log.ok(LAYER_SIGNATURE, f"SHA256SUMS signed by minisign key {verified.key_id}")
    try:
        return models.parse_sha256sums(sums)
    except ParseError as exc:
        raise _fail(LAYER_DIGEST, exc.message) from None


def verify_manifest(
    raw: bytes, sums: dict[str, str], tag: str, log: VerificationLog
) -> models.Manifest:
    """Layer 2 for ``manifest.json``: listed in the signed sums, and about this tag."""
    listed = sums.get(models.MANIFEST_NAME)
    actual = hashlib.sha256(raw).hexdigest()
    if listed is None:
        raise _fail(LAYER_MANIFEST, "SHA256SUMS does not list manifest.json")
    if listed != actual:
        raise _fail(LAYER_MANIFEST, f"manifest.json has sha256 {actual}, SHA256SUMS says {listed}")
    try:
        manifest = models.parse_manifest(raw)
    except ParseError as exc:
        raise _fail(LAYER_MANIFEST, exc.message) from None
    if models.parse_version(manifest.version) != models.parse_tag(tag):
        raise _fail(LAYER_MANIFEST, f"manifest.json says version {manifest.version}, tag is {tag}")
    log.ok(LAYER_MANIFEST, f"manifest.json matches SHA256SUMS and tag {tag}")
    return manifest


def verify_download(
    name: str,
    sha256: str,
    size: int,
    *,
    sums: dict[str, str],
    manifest: models.Manifest,
    api_digest: str | None,
    log: VerificationLog,
) -> None:
    """Layer 2 for the archive: every published digest agrees with the streamed one."""
    asset = next((a for a in manifest.assets if a.name == name), None)
    if asset is None:
        raise _fail(LAYER_DIGEST, f"manifest.json does not list {name}")
    listed = sums.get(name)
    if listed is None:
        raise _fail(LAYER_DIGEST, f"SHA256SUMS does not list {name}")
    if size != asset.size:
        raise _fail(LAYER_DIGEST, f"{name} is {size} bytes, the manifest says {asset.size}")
    for source, expected in (("SHA256SUMS", listed), ("manifest.json", asset.sha256)):
        if sha256 != expected:
            raise _fail(LAYER_DIGEST, f"{name} has sha256 {sha256}, {source} says {expected}")
    sources = "SHA256SUMS and manifest.json"
    if api_digest is not None:
        if sha256 != api_digest:
            raise _fail(
                LAYER_DIGEST, f"{name} has sha256 {sha256}, GitHub's asset digest is {api_digest}"
            )
        sources += " and GitHub's asset digest"
    log.ok(LAYER_DIGEST, f"{name} sha256 {sha256} matches {sources}")


def verify_release_attestation(
    tag: str,
    sha256: str,
    policy: TrustPolicy,
    log: VerificationLog,
    *,
    release_bundle: Callable[[], bytes | None],
    api_bundles: Callable[[], list[bytes]],
    source_kind: str,
) -> None:
    """Layer 3: the bundle shipped with the release first, the attestations API second."""
    if policy.skip_attestation:
        log.skipped(LAYER_ATTESTATION, "skipped by --insecure-skip-attestation")
        return
    if not policy.repository:
        if policy.require_attestation:
            raise _fail(
                LAYER_ATTESTATION,
                "no repository to check the attestation against (this build has none)",
                hint="set MUX_REPO=owner/name",
            )
        log.skipped(LAYER_ATTESTATION, "no repository identity to check against")
        return
    bundles: list[bytes] = []
    origin = "release asset"
    try:
        shipped = release_bundle()
    except NetworkError:
        shipped = None
    if shipped is not None:
        bundles.append(shipped)
    else:
        origin = "attestations API"
        try:
            bundles.extend(api_bundles())
        except MuxError as exc:
            if policy.require_attestation:
                raise _fail(LAYER_ATTESTATION, f"no attestation found ({exc.message})") from None
    if not bundles:
        if policy.require_attestation:
            raise _fail(
                LAYER_ATTESTATION,
                f"no attestation for sha256 {sha256}",
                hint="only --insecure-skip-attestation installs an unattested release",
            )
        log.skipped(LAYER_ATTESTATION, f"the {source_kind} publishes no attestation")
        return
    from .attestation import verify_attestation

    try:
        # The trust root: policy.trusted_root, else MUX_SIGSTORE_TRUSTED_ROOT, else Sigstore's.
        report = verify_attestation(
            bundles, sha256, policy.identity(tag), trusted_root=policy.trusted_root
        )
    except VerificationError as exc:
        raise _fail(LAYER_ATTESTATION, exc.message.removeprefix("attestation: ")) from None
    log.ok(
        LAYER_ATTESTATION,
        f"built by {report.signer_workflow}@{report.signer_ref} in {report.repository} "
        f"({origin}, transparency log index {report.log_index})",
    )
