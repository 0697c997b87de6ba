"""The verification layers of a release, in order, each failing closed.

1. **signature**: ``SHA256SUMS`` is authentic: its minisign signature verifies with a trusted key.
2. **manifest / digest**: the files are what was published: ``manifest.json`` matches its
   ``SHA256SUMS`` line and its tag; the download's streamed SHA-256 equals its ``SHA256SUMS``
   line, its manifest entry and GitHub's asset digest when there is one.
3. **attestation**: our release workflow built it: the Sigstore attestation verifies against
   the identity.
4. **archive**: the archive is safe to unpack: members stay in their folder, sizes are capped,
   the ``mux`` executable is there.
5. **smoke-test**: the new build runs here and says it is what the manifest says.

The order is encoded once, in two phases: :func:`verify_release_metadata` (layers 1-2 on the
small documents) and :func:`verify_release_files` (layers 2-5 on one archive). ``mux update``
and ``mux-release verify`` both run exactly these. Every failure raises
:class:`VerificationError` naming the layer; nothing is executed or extracted before the
layers before it passed.

Layer 3 does not wait for the download: the digest it attests is the one the signed
``SHA256SUMS`` gives, known before the first byte arrives, so a worker thread fetches the
bundle while the archive streams in, and Sigstore verifies it in a child process
(:mod:`updater.trust.attestation_worker`) that ``mux update`` started when it began, which has
imported sigstore (most of the layer's time) by then. The layers still pass in order for the
bytes on disk: the streamed digest must equal the signed one (layer 2) and the attested one,
and nothing is unpacked before the child's answer is in (:class:`AttestationInBackground`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from updater.errors import NetworkError
from updater.formats import models
from updater.timestamps import utc_text
from updater.trust.attestation_worker import start
from updater.trust.attested import AttestationInBackground
from updater.trust.layers import (
    LAYER_API_DIGEST,
    LAYER_ARCHIVE,
    LAYER_SMOKE_TEST,
    LAYER_TUF,
    VerificationLog,
    VerifiedFiles,
    VerifiedRelease,
    layer_failure,
)
from updater.trust.policy import TrustPolicy
from updater.trust.smoke import Expected, smoke_test
from updater.trust.sums import signed_digest, verify_download, verify_manifest, verify_sums
from updater.trust.unpack import unpack

if TYPE_CHECKING:
    from collections.abc import Callable

    from updater.net.download import Progress
    from updater.sources.base import ReleaseSource
    from updater.trust.attestation_worker import AttestationWorker


def verify_release_metadata(
    source: ReleaseSource, tag: str, policy: TrustPolicy, log: VerificationLog
) -> VerifiedRelease:
    """Layers 1 and 2 for ``SHA256SUMS`` and ``manifest.json`` of the release ``tag``.

    The signature's trusted comment must name this release (``version:``, equal to the tag
    and, below, to the manifest's version: no mix of releases) and its signed time, which the
    caller compares with the installed release's and records.

    From a TUF source (layer 0, ``tuf``), the tag is one the verified targets list, each
    document is checked against its signed length and sha256 before it is parsed
    (:meth:`updater.sources.base.ReleaseSource.fetch`), and the manifest must say the
    protocol its target says.
    """
    if source.tuf is not None:
        targets = source.tuf.targets()
        log.ok(
            LAYER_TUF,
            f"{tag} listed by the TUF repository {targets.location} ({targets.describe()}, "
            f"timestamp valid until {utc_text(int(targets.versions.timestamp_expires))}); each file "
            "is checked against its signed length and sha256",
        )
    signed = verify_sums(
        source.fetch(tag, models.SUMS_NAME),
        source.fetch_optional(tag, models.SUMS_SIGNATURE_NAME),
        policy,
        log,
        tag=tag,
        signature_url=source.file_url(tag, models.SUMS_SIGNATURE_NAME),
    )
    manifest = verify_manifest(source.fetch(tag, models.MANIFEST_NAME), signed.sums, tag, log)
    signed_manifest = source.signed_file(tag, models.MANIFEST_NAME)
    if signed_manifest is not None:
        said = signed_manifest.facts.get("protocol_version")
        if said != manifest.protocol_version:
            raise layer_failure(
                LAYER_TUF,
                f"manifest.json of {tag} says protocol {manifest.protocol_version}, its signed "
                f"target says {str(said)[:40]}",
                hint="the release's files do not agree with the signed metadata; report it",
            )
    return VerifiedRelease(tag, signed.sums, manifest, signed.timestamp)


def verify_release_files(
    source: ReleaseSource,
    release: VerifiedRelease,
    asset: models.ManifestAsset,
    policy: TrustPolicy,
    log: VerificationLog,
    *,
    download_dir: Path,
    unpack_dir: Path,
    smoke_target: str | None,
    smoke_timeout: float,
    progress: Progress | None = None,
    check_unpacked: Callable[[Path], None] | None = None,
    on_unpacked_file: Callable[[str], None] | None = None,
    attestation_worker: AttestationWorker | None = None,
) -> VerifiedFiles:
    """Layers 2 to 5 for one archive of a release that passed :func:`verify_release_metadata`.

    The archive streams into ``download_dir`` (hashed as it goes, removed afterwards) and is
    unpacked into the empty folder ``unpack_dir``. ``check_unpacked`` (``mux-release verify``:
    the SBOM) then inspects the unpacked files, before anything in them runs. The build is run
    for the smoke test when it is built for ``smoke_target`` (the target this machine runs);
    otherwise that layer is reported skipped.

    Layer 3's Sigstore check runs in ``attestation_worker`` (a child process the caller
    started early and closes), else in one started and closed here.
    """
    published = _published_digest(source, release.tag, asset.name, policy, log)
    signed = signed_digest(asset.name, sums=release.sums, manifest=release.manifest)
    _check_signed_archive(source, release.tag, asset, signed)
    owned = None
    if attestation_worker is None and not policy.skip_attestation:
        attestation_worker = owned = start()
    attesting = AttestationInBackground(source, release, signed, policy, attestation_worker)
    try:
        fetched = source.download(
            release.tag,
            asset.name,
            download_dir,
            size=asset.size,
            max_size=asset.size,
            progress=progress,
        )
        try:
            verify_download(
                asset.name,
                fetched.sha256,
                fetched.size,
                signed=signed,
                expected_size=asset.size,
                api_digest=published,
                log=log,
            )
            attesting.finish(fetched.sha256, log)
            unpacked = unpack(
                fetched.path,
                unpack_dir,
                top=models.archive_folder(asset.target),
                on_file=on_unpacked_file,
            )
        finally:
            fetched.path.unlink(missing_ok=True)
    finally:
        attesting.wait()  # a failure elsewhere still outlives the worker (see the class)
        if owned is not None:
            owned.close()
    log.ok(LAYER_ARCHIVE, f"{asset.name}: members confined to its folder; mux executable present")
    if check_unpacked is not None:
        check_unpacked(unpack_dir)
    manifest = release.manifest
    if asset.target != smoke_target:
        log.skipped(LAYER_SMOKE_TEST, f"{asset.name}: built for another target ({asset.target})")
    else:
        smoke_test(
            unpack_dir,
            Expected(manifest.version, manifest.protocol_version, asset.target),
            timeout=smoke_timeout,
        )
        log.ok(
            LAYER_SMOKE_TEST,
            f"{asset.name}: `mux version --json` reports {manifest.version} for {asset.target}",
        )
    return VerifiedFiles(asset, fetched.sha256, unpack_dir, unpacked)


def _check_signed_archive(
    source: ReleaseSource, tag: str, asset: models.ManifestAsset, signed: str
) -> None:
    """From a TUF source, the archive's target must give the length, the sha256 and the
    target triple the manifest and ``SHA256SUMS`` give (wrong software for this target, or a
    digest nobody signed in TUF, is refused before a byte is downloaded)."""
    target = source.signed_file(tag, asset.name)
    if target is None:
        return
    if target.sha256 != signed or target.length != asset.size:
        raise layer_failure(
            LAYER_TUF,
            f"{asset.name} of {tag}: its signed target gives {target.length} bytes, sha256 "
            f"{target.sha256}; SHA256SUMS and manifest.json give {asset.size} bytes, sha256 "
            f"{signed}",
            hint="the release's files do not agree with the signed metadata; do not install it",
        )
    if target.facts.get("target") != asset.target:
        raise layer_failure(
            LAYER_TUF,
            f"{asset.name} of {tag} is signed as a build for "
            f"{str(target.facts.get('target'))[:80]}, not {asset.target}",
            hint="wrong software for this target; do not install it, and report it",
        )


def _published_digest(
    source: ReleaseSource, tag: str, name: str, policy: TrustPolicy, log: VerificationLog
) -> str | None:
    """GitHub's own digest of ``name``, when the source lists one."""
    try:
        listing = source.listing(tag)
    except NetworkError as exc:
        if policy.require_api_digests:
            raise
        log.skipped(LAYER_API_DIGEST, f"GitHub's asset digest unavailable: {exc.message}")
        return None
    published = listing.assets.get(name) if listing else None
    return published.sha256 if published else None
