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

import hashlib
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from updater.core.transfer import DELTA, FULL, Transfer, choose_delta
from updater.errors import MuxError, NetworkError, ParseError, VerificationError
from updater.formats import models
from updater.formats.delta import MAX_FILE_LIST_BYTES, file_list_name, parse_file_list
from updater.install.layout import FILES_LIST_NAME, recorded_files
from updater.timestamps import utc_text
from updater.trust.attestation_worker import start
from updater.trust.attested import AttestationInBackground
from updater.trust.delta import DeltaUnusable, apply_delta
from updater.trust.layers import (
    LAYER_API_DIGEST,
    LAYER_ARCHIVE,
    LAYER_DIGEST,
    LAYER_SMOKE_TEST,
    LAYER_TUF,
    VerificationLog,
    VerifiedFiles,
    VerifiedRelease,
    layer_failure,
)
from updater.trust.smoke import Expected, smoke_test
from updater.trust.sums import signed_digest, verify_download, verify_manifest, verify_sums
from updater.trust.trust_policy import TrustPolicy
from updater.trust.unpack import unpack

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from updater.install.layout import KeptBuild, UnpackedFiles
    from updater.net.progress import Progress
    from updater.trust.attestation_worker import AttestationWorker
    from updater.trust.source import ReleaseFiles


def verify_release_metadata(
    source: ReleaseFiles, tag: str, policy: TrustPolicy, log: VerificationLog
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
    source: ReleaseFiles,
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
    on_unpacked: Callable[[Path], None] | None = None,
    attestation_worker: AttestationWorker | None = None,
    kept: Sequence[KeptBuild] = (),
    warn: Callable[[str], None] | None = None,
) -> VerifiedFiles:
    """Layers 2 to 5 for one archive of a release that passed :func:`verify_release_metadata`.

    The archive streams into ``download_dir`` (hashed as it goes, removed afterwards) and is
    unpacked into the empty folder ``unpack_dir``; ``on_unpacked_file`` is given each file as
    it is written and ``on_unpacked`` the folder once its tree is complete (an install makes
    them durable meanwhile). ``check_unpacked`` (``mux-release verify``: the SBOM) then
    inspects the unpacked files, before anything in them runs. The build is run
    for the smoke test when it is built for ``smoke_target`` (the target this machine runs);
    otherwise that layer is reported skipped.

    With ``kept`` (the versions the install keeps, :func:`updater.install.layout.kept_builds`)
    and a release that publishes a delta from one of them, the tree is built from that
    version's files and the delta instead (:func:`_via_delta`); anything wrong with it throws
    that tree away and the archive is installed in the same run, ``warn`` saying why in one
    line. The result's ``transfer`` says which was used and what was downloaded.

    Layer 3's Sigstore check runs in ``attestation_worker`` (a child process the caller
    started early and closes), else in one started and closed here.
    """
    fallback: str | None = None
    downloaded = 0
    if kept:
        try:
            built = _via_delta(
                source,
                release,
                asset,
                policy,
                kept,
                download_dir,
                unpack_dir,
                attestation_worker,
                on_file=on_unpacked_file,
                on_built=on_unpacked,
            )
        except DeltaUnusable as exc:
            fallback, downloaded = exc.message, exc.downloaded
            if exc.tried:
                _empty(unpack_dir)
                if warn is not None:
                    warn(f"the delta was not used ({exc.message}); downloading the full archive")
            if exc.asked_worker:
                attestation_worker = None  # asked once: the archive's layer 3 starts its own
        else:
            log.layers.extend(built.log.layers)
            log.ok(
                LAYER_ARCHIVE,
                f"{built.delta}: {asset.name}'s tree built from {built.base}'s files; "
                "every file matches the signed file list; mux executable present",
            )
            return _tested(
                VerifiedFiles(
                    asset,
                    asset.sha256,
                    unpack_dir,
                    built.unpacked,
                    Transfer(DELTA, built.downloaded, asset.size, built.base),
                ),
                release,
                log,
                smoke_target=smoke_target,
                smoke_timeout=smoke_timeout,
                check_unpacked=check_unpacked,
            )
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
            if on_unpacked is not None:
                on_unpacked(unpack_dir)
        finally:
            fetched.path.unlink(missing_ok=True)
    finally:
        attesting.wait()  # a failure elsewhere still outlives the worker (see the class)
        if owned is not None:
            owned.close()
    log.ok(LAYER_ARCHIVE, f"{asset.name}: members confined to its folder; mux executable present")
    transfer = Transfer(FULL, downloaded + fetched.size, asset.size, fallback=fallback)
    return _tested(
        VerifiedFiles(asset, fetched.sha256, unpack_dir, unpacked, transfer),
        release,
        log,
        smoke_target=smoke_target,
        smoke_timeout=smoke_timeout,
        check_unpacked=check_unpacked,
    )


def _tested(
    verified: VerifiedFiles,
    release: VerifiedRelease,
    log: VerificationLog,
    *,
    smoke_target: str | None,
    smoke_timeout: float,
    check_unpacked: Callable[[Path], None] | None,
) -> VerifiedFiles:
    """Layer 5 (after ``check_unpacked``) for a tree that passed layer 4."""
    asset, unpack_dir = verified.asset, verified.folder
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
    return verified


class _Built(NamedTuple):
    delta: str
    base: str
    unpacked: UnpackedFiles
    downloaded: int
    log: VerificationLog


def _via_delta(
    source: ReleaseFiles,
    release: VerifiedRelease,
    asset: models.ManifestAsset,
    policy: TrustPolicy,
    kept: Sequence[KeptBuild],
    download_dir: Path,
    unpack_dir: Path,
    worker: AttestationWorker | None,
    *,
    on_file: Callable[[str], None] | None,
    on_built: Callable[[Path], None] | None,
) -> _Built:
    """Layers 2 to 4 by a delta: the signed file list, the delta (its size and digest signed,
    both checked before a byte of it is read), the tree built from the kept version's files
    (each checked against its recorded digest) and checked against the list; layer 3 for the
    file list's digest (it names every byte of the tree), in the background meanwhile.

    The tree is built while the attestation is checked: everything it is built from passed
    layers 1 and 2 by then, and nothing in it runs, nor is it placed, before layer 3 passed
    (the smoke test comes after). Its files go to ``on_file`` as they are made and the tree
    to ``on_built`` before the wait for layer 3, so the disk writes them out meanwhile.
    Raises :class:`DeltaUnusable` for every failure."""
    log = VerificationLog()
    name = file_list_name(asset.target)
    listed = release.sums.get(name)
    if listed is None:
        raise DeltaUnusable(f"the release has no {name}", tried=False)
    downloaded = 0
    try:
        raw = source.fetch(release.tag, name, max_size=MAX_FILE_LIST_BYTES)
    except NetworkError as exc:
        raise DeltaUnusable(f"{name}: {exc.message}") from None
    downloaded += len(raw)
    actual = hashlib.sha256(raw).hexdigest()
    if actual != listed:
        raise DeltaUnusable(f"{name} has sha256 {actual}, SHA256SUMS says {listed}", downloaded)
    _same_as_published(source, release.tag, name, actual, downloaded, asked=False)
    try:
        file_list = parse_file_list(raw, name=name)
    except ParseError as exc:
        raise DeltaUnusable(exc.message, downloaded) from None
    if (file_list.version, file_list.target) != (release.manifest.version, asset.target) or (
        file_list.archive.name,
        file_list.archive.size,
        file_list.archive.sha256,
    ) != (asset.name, asset.size, asset.sha256):
        raise DeltaUnusable(f"{name} describes another build than {asset.name}", downloaded)
    log.ok(LAYER_DIGEST, f"{name} sha256 {actual} matches SHA256SUMS; it describes {asset.name}")
    choice = choose_delta(
        file_list, release.sums, [k.version for k in kept], archive_size=asset.size
    )
    if isinstance(choice, str):
        raise DeltaUnusable(choice, downloaded, tried=False)
    ref = choice.delta
    base = next(k for k in kept if k.version == choice.base)
    base_files = recorded_files(base)
    if base_files is None:
        raise DeltaUnusable(
            f"the kept {base.version}'s {FILES_LIST_NAME} does not match its record", downloaded
        )
    owned = None
    if worker is None and not policy.skip_attestation:
        worker = owned = start()
    attesting = AttestationInBackground(source, release, actual, policy, worker)
    try:
        # No size given: a short body is not resumed but refused below (a delta is never
        # worth retrying, the archive is there); the count says what came over the network.
        counted = _Counted()
        try:
            fetched = source.download(
                release.tag, ref.name, download_dir, size=None, max_size=ref.size, progress=counted
            )
        except (NetworkError, VerificationError) as exc:
            downloaded += counted.done
            raise DeltaUnusable(f"{ref.name}: {exc.message}", downloaded, asked=True) from None
        try:
            downloaded += fetched.size
            if fetched.size != ref.size or fetched.sha256 != ref.sha256:
                raise DeltaUnusable(
                    f"{ref.name} is {fetched.size} bytes with sha256 {fetched.sha256}; "
                    f"the signed lists say {ref.size} bytes, sha256 {ref.sha256}",
                    downloaded,
                    asked=True,
                )
            _same_as_published(
                source, release.tag, ref.name, fetched.sha256, downloaded, asked=True
            )
            log.ok(
                LAYER_DIGEST,
                f"{ref.name} sha256 {fetched.sha256} matches SHA256SUMS and {name}",
            )
            try:
                with open(fetched.path, "rb") as stream:
                    unpacked = apply_delta(
                        stream,
                        fetched.size,
                        file_list,
                        from_version=base.version,
                        base_dir=base.folder,
                        base_files=base_files,
                        destination=str(unpack_dir),
                        on_file=on_file,
                    )
            except DeltaUnusable as exc:
                raise DeltaUnusable(f"{ref.name}: {exc.message}", downloaded, asked=True) from None
            if on_built is not None:
                on_built(unpack_dir)
            try:
                attesting.finish(actual, log)
            except VerificationError as exc:
                raise DeltaUnusable(exc.message, downloaded, asked=True) from None
        finally:
            fetched.path.unlink(missing_ok=True)
    finally:
        attesting.wait()
        if owned is not None:
            owned.close()
    return _Built(ref.name, base.version, unpacked, downloaded, log)


class _Counted:
    """A download's progress that remembers how many bytes came (shows nothing: the delta
    is small, and the archive's download has its own bar)."""

    done = 0

    def start(self, total: int | None) -> None:
        pass

    def advance(self, done: int) -> None:
        self.done = done

    def finish(self, completed: bool = True) -> None:
        pass


def _same_as_published(
    source: ReleaseFiles, tag: str, name: str, sha256: str, downloaded: int, *, asked: bool
) -> None:
    """GitHub's own digest of a release file, where it gives one, must be ``sha256``."""
    try:
        listing = source.listing(tag)
    except MuxError:
        return  # the signed SHA256SUMS decided; the archive's check says what the API did
    published = listing.assets.get(name) if listing else None
    if published is not None and published.sha256 is not None and published.sha256 != sha256:
        raise DeltaUnusable(
            f"{name} has sha256 {sha256}, GitHub's asset digest is {published.sha256}",
            downloaded,
            asked=asked,
        )


def _empty(folder: Path) -> None:
    """Remove what a failed delta left in the staging folder (which stays, empty)."""
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            os.unlink(entry.path)


def _check_signed_archive(
    source: ReleaseFiles, tag: str, asset: models.ManifestAsset, signed: str
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
    source: ReleaseFiles, tag: str, name: str, policy: TrustPolicy, log: VerificationLog
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
