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

The order is encoded once, in :class:`~updater.trust.trusted_release.TrustedRelease`, the
trusted state each step is fed to (no network, no writes); this module is its driver, which
downloads, unpacks, flushes and runs, in two phases: :func:`verify_release_metadata` (layers
1-2 on the small documents) and :func:`verify_release_files` (layers 2-5 on one archive).
``mux update`` and ``mux-release verify`` both run exactly these. Every failure raises
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

import dataclasses
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from updater.core.transfer import DELTA, FULL, DeltaChoice, Transfer
from updater.errors import MuxError, NetworkError, VerificationError
from updater.formats import models
from updater.formats.delta import MAX_FILE_LIST_BYTES
from updater.install.layout import FILES_LIST_NAME, recorded_files
from updater.trust.attestation_worker import start
from updater.trust.attested import AttestationInBackground
from updater.trust.delta import DeltaUnusable, apply_delta
from updater.trust.layers import VerificationLog, VerifiedFiles, VerifiedRelease
from updater.trust.smoke import smoke_test
from updater.trust.trust_policy import TrustPolicy
from updater.trust.trusted_release import TrustedRelease
from updater.trust.unpack import unpack

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from updater.install.layout import KeptBuild, UnpackedFiles
    from updater.net.download import Downloaded
    from updater.net.progress import Progress
    from updater.trust.attestation_worker import AttestationWorker
    from updater.trust.source import ReleaseFiles


class StagingDisk(Protocol):
    """Where the tree is written (an install's transaction): it makes each file durable as it
    is written and the folder once its tree is complete, while layer 3 and the smoke test
    run."""

    def flush_file(self, path: str) -> None: ...

    def flush_unpacked(self, staged: Path) -> None: ...


class DownloadEvents(Protocol):
    """What the caller shows meanwhile: the archive's progress, a delta given up."""

    def warning(self, message: str) -> None: ...

    def progress(self, label: str) -> Progress: ...


@dataclass(frozen=True)
class FilesRequest:
    """How :func:`verify_release_files` works for its caller: where it downloads and
    unpacks, which target's build it runs (the smoke test) and how long it waits, the kept
    versions a delta may start from (:func:`updater.install.layout.kept_builds`; none: the
    archive), the attestation child the caller started early (none: one is started here),
    the disk that makes the tree durable and what shows the download."""

    download_dir: Path
    unpack_dir: Path
    smoke_target: str | None
    smoke_timeout: float
    kept: Sequence[KeptBuild] = ()
    worker: AttestationWorker | None = None
    disk: StagingDisk | None = None
    events: DownloadEvents | None = None


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
    trusted = TrustedRelease(tag, policy, log)
    if source.tuf is not None:
        trusted.tuf(source.tuf.targets())
    trusted.sums(
        source.fetch(tag, models.SUMS_NAME),
        source.fetch_optional(tag, models.SUMS_SIGNATURE_NAME),
        signature_url=source.file_url(tag, models.SUMS_SIGNATURE_NAME),
    )
    manifest = source.fetch(tag, models.MANIFEST_NAME)
    return trusted.manifest(manifest, source.signed_file(tag, models.MANIFEST_NAME))


def verify_release_files(
    source: ReleaseFiles,
    release: VerifiedRelease,
    asset: models.ManifestAsset,
    policy: TrustPolicy,
    log: VerificationLog,
    request: FilesRequest,
) -> VerifiedFiles:
    """Layers 2 to 5 for one archive of a release that passed :func:`verify_release_metadata`:
    :func:`verify_release_tree`, then :func:`smoke_tested`."""
    return smoke_tested(verify_release_tree(source, release, asset, policy, log, request), request)


def verify_release_tree(
    source: ReleaseFiles,
    release: VerifiedRelease,
    asset: models.ManifestAsset,
    policy: TrustPolicy,
    log: VerificationLog,
    request: FilesRequest,
) -> TrustedRelease:
    """Layers 2 to 4: the tree of ``asset`` in ``request.unpack_dir``, trusted so far (its
    files may be inspected, as ``mux-release verify`` checks the SBOM, before
    :func:`smoke_tested` runs anything in them).

    The archive streams into ``download_dir`` (hashed as it goes, removed afterwards) and is
    unpacked into the empty folder ``unpack_dir``; ``request.disk`` is given each file as it
    is written and the folder once its tree is complete (an install makes them durable
    meanwhile).

    With ``request.kept`` and a release that publishes a delta from one of them, the tree is
    built from that version's files and the delta instead (:func:`_via_delta`); anything
    wrong with it throws that tree away (and what it logged) and the archive is installed in
    the same run, a warning saying why in one line. The result's ``transfer`` says which was
    used and what was downloaded.

    Layer 3's Sigstore check runs in ``request.worker`` (a child process the caller started
    early and closes), else in one started and closed here.
    """
    fallback = None
    if request.kept:
        mark = len(log.layers)
        try:
            return _via_delta(source, TrustedRelease.resume(release, policy, log), asset, request)
        except DeltaUnusable as exc:
            del log.layers[mark:]  # the delta's layers join the report only with its tree
            fallback = exc
            if exc.tried:
                _empty(request.unpack_dir)
                if request.events is not None:
                    request.events.warning(
                        f"the delta was not used ({exc.message}); downloading the full archive"
                    )
            if exc.asked_worker:  # asked once: the archive's layer 3 starts its own
                request = dataclasses.replace(request, worker=None)
    return _via_archive(
        source, TrustedRelease.resume(release, policy, log), asset, request, fallback
    )


def smoke_tested(trusted: TrustedRelease, request: FilesRequest) -> VerifiedFiles:
    """Layer 5 for a tree that passed layer 4: the build runs, when it is built for
    ``request.smoke_target`` (the target this machine runs), and says what it is."""
    expected = trusted.smoke_test_for(request.smoke_target)
    if expected is not None:
        smoke_test(request.unpack_dir, expected, timeout=request.smoke_timeout)
    return trusted.verified()


def _attestation_checked(policy: TrustPolicy) -> bool:
    """Whether layer 3 can reach Sigstore's check, so that its child is worth starting: not
    when skipped, nor for a build that knows no repository (the layer is skipped, or fails,
    before any bundle is checked; a child would cost its sigstore import for nothing)."""
    return not policy.skip_attestation and bool(policy.repository)


def _via_archive(
    source: ReleaseFiles,
    trusted: TrustedRelease,
    asset: models.ManifestAsset,
    request: FilesRequest,
    fallback: DeltaUnusable | None,
) -> TrustedRelease:
    """Layers 2 to 4 by the archive; ``fallback``: the delta tried first, and why not."""
    tag, policy = trusted.tag, trusted.policy
    api_digest, unavailable = _published_digest(source, tag, asset.name, policy)
    signed = trusted.archive(asset, source.signed_file(tag, asset.name), api_digest, unavailable)
    worker, owned = request.worker, None
    if worker is None and _attestation_checked(policy):
        worker = owned = start()
    attesting = AttestationInBackground(source, trusted.release, signed, policy, worker)
    disk = request.disk
    try:
        progress = request.events.progress(asset.name) if request.events is not None else None
        fetched = source.download(
            tag,
            asset.name,
            request.download_dir,
            size=asset.size,
            max_size=asset.size,
            progress=progress,
        )
        try:
            trusted.archive_digest(fetched.size, fetched.sha256)
            trusted.attestation(attesting.verdict())
            unpacked = unpack(
                fetched.path,
                request.unpack_dir,
                top=models.archive_folder(asset.target),
                on_file=disk.flush_file if disk is not None else None,
            )
            if disk is not None:
                disk.flush_unpacked(request.unpack_dir)
        finally:
            fetched.path.unlink(missing_ok=True)
    finally:
        attesting.wait()  # a failure elsewhere still outlives the worker (see the class)
        if owned is not None:
            owned.close()
    earlier = fallback.downloaded if fallback is not None else 0
    why = fallback.message if fallback is not None else None
    transfer = Transfer(FULL, earlier + fetched.size, asset.size, fallback=why)
    trusted.tree(request.unpack_dir, unpacked, transfer)
    return trusted


class _Attempt:
    """What a delta's attempt cost so far: the bytes it downloaded, and whether it asked the
    attestation child (which answers once)."""

    downloaded = 0
    asked = False


def _via_delta(
    source: ReleaseFiles,
    trusted: TrustedRelease,
    asset: models.ManifestAsset,
    request: FilesRequest,
) -> TrustedRelease:
    """Layers 2 to 4 by a delta: the signed file list, the delta (its size and digest signed,
    both checked before a byte of it is read), the tree built from the kept version's files
    (each checked against its recorded digest) and checked against the list; layer 3 for the
    file list's digest (it names every byte of the tree), in the background meanwhile.

    The tree is built while the attestation is checked: everything it is built from passed
    layers 1 and 2 by then, and nothing in it runs, nor is it placed, before layer 3 passed
    (the smoke test comes after). Its files go to ``request.disk`` as they are made and the
    tree before the wait for layer 3, so the disk writes them out meanwhile.
    Raises :class:`DeltaUnusable` for every failure, with what the attempt cost."""
    attempt = _Attempt()
    try:
        _delta_steps(source, trusted, asset, request, attempt)
    except DeltaUnusable as exc:
        exc.downloaded, exc.asked_worker = attempt.downloaded, attempt.asked
        raise
    return trusted


def _delta_steps(
    source: ReleaseFiles,
    trusted: TrustedRelease,
    asset: models.ManifestAsset,
    request: FilesRequest,
    attempt: _Attempt,
) -> None:
    tag, policy = trusted.tag, trusted.policy
    name = trusted.delta_offered(asset)
    try:
        raw = source.fetch(tag, name, max_size=MAX_FILE_LIST_BYTES)
    except NetworkError as exc:
        raise DeltaUnusable(f"{name}: {exc.message}") from None
    attempt.downloaded += len(raw)
    kept = request.kept
    choice = trusted.file_list(
        asset, raw, _api_digest(source, tag, name), [k.version for k in kept]
    )
    base = next(k for k in kept if k.version == choice.base)
    base_files = recorded_files(base)
    if base_files is None:
        raise DeltaUnusable(
            f"the kept {base.version}'s {FILES_LIST_NAME} does not match its record"
        )
    worker = request.worker
    owned = None
    if worker is None and _attestation_checked(policy):
        worker = owned = start()
    attempt.asked = True
    attesting = AttestationInBackground(source, trusted.release, trusted.attesting, policy, worker)
    try:
        fetched = _download_delta(source, tag, choice, request.download_dir, attempt)
        try:
            ref = choice.delta
            trusted.delta_digest(fetched.size, fetched.sha256, _api_digest(source, tag, ref.name))
            unpacked = _build(trusted, fetched, ref.name, base, base_files, request)
            if request.disk is not None:
                request.disk.flush_unpacked(request.unpack_dir)
            trusted.attestation(attesting.verdict())
        finally:
            fetched.path.unlink(missing_ok=True)
    finally:
        attesting.wait()
        if owned is not None:
            owned.close()
    transfer = Transfer(DELTA, attempt.downloaded, asset.size, choice.base)
    trusted.tree(request.unpack_dir, unpacked, transfer)


def _download_delta(
    source: ReleaseFiles, tag: str, choice: DeltaChoice, folder: Path, attempt: _Attempt
) -> Downloaded:
    """The delta, its bytes counted in ``attempt``. No size given: a short body is not
    resumed but refused (a delta is never worth retrying, the archive is there)."""
    ref = choice.delta
    counted = _Counted()
    try:
        fetched = source.download(
            tag, ref.name, folder, size=None, max_size=ref.size, progress=counted
        )
    except (NetworkError, VerificationError) as exc:
        attempt.downloaded += counted.done
        raise DeltaUnusable(f"{ref.name}: {exc.message}") from None
    attempt.downloaded += fetched.size
    return fetched


def _build(
    trusted: TrustedRelease,
    fetched: Downloaded,
    name: str,
    base: KeptBuild,
    base_files: Mapping[str, str],
    request: FilesRequest,
) -> UnpackedFiles:
    """The tree the accepted file list names, from the delta ``name`` (in ``fetched``) and
    the kept ``base`` build's recorded files."""
    disk = request.disk
    try:
        with open(fetched.path, "rb") as stream:
            return apply_delta(
                stream,
                fetched.size,
                trusted.accepted_file_list,
                from_version=base.version,
                base_dir=base.folder,
                base_files=base_files,
                destination=str(request.unpack_dir),
                on_file=disk.flush_file if disk is not None else None,
            )
    except DeltaUnusable as exc:
        raise DeltaUnusable(f"{name}: {exc.message}") from None


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


def _api_digest(source: ReleaseFiles, tag: str, name: str) -> str | None:
    """GitHub's own digest of a delta's file, if the source lists one (a listing that fails
    leaves the signed ``SHA256SUMS`` to decide)."""
    try:
        listing = source.listing(tag)
    except MuxError:
        return None
    published = listing.assets.get(name) if listing else None
    return published.sha256 if published else None


def _empty(folder: Path) -> None:
    """Remove what a failed delta left in the staging folder (which stays, empty)."""
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            os.unlink(entry.path)


def _published_digest(
    source: ReleaseFiles, tag: str, name: str, policy: TrustPolicy
) -> tuple[str | None, str | None]:
    """GitHub's own digest of ``name``, when the source lists one; else why it could not be
    read (a network that failed: an error of its own when the policy requires the digest)."""
    try:
        listing = source.listing(tag)
    except NetworkError as exc:
        if policy.require_api_digests:
            raise
        return None, exc.message
    published = listing.assets.get(name) if listing else None
    return (published.sha256 if published else None), None
