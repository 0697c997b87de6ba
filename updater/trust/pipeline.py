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
and nothing is unpacked before the child's answer is in (:class:`_AttestationInBackground`).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import threading
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, NamedTuple

from updater.core import models
from updater.errors import InstallError, MuxError, NetworkError, ParseError, VerificationError

if TYPE_CHECKING:
    import tarfile
    from collections.abc import Callable, Iterator

    from updater.config.buildinfo import BuildInfo
    from updater.config.settings import Settings
    from updater.install.layout import UnpackedFiles
    from updater.net.download import Progress
    from updater.sources.base import ReleaseSource
    from updater.trust.attestation_worker import AttestationWorker

LAYER_SIGNATURE = "signature"
LAYER_MANIFEST = "manifest"
LAYER_DIGEST = "digest"
LAYER_API_DIGEST = "api-digest"
LAYER_ATTESTATION = "attestation"
LAYER_ARCHIVE = "archive"
LAYER_SMOKE_TEST = "smoke-test"

MAX_MEMBERS = 50_000
MAX_UNPACKED_BYTES = 2 * 1024**3


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


# -- the policy ------------------------------------------------------------------------------


class TrustPolicy(NamedTuple):
    """What must hold before anything is installed."""

    minisign_keys: tuple[str, ...]
    require_signature: bool
    repository: str  # owner/name whose release workflow must have built the release
    signer_workflow: str
    oidc_issuer: str
    require_attestation: bool
    skip_attestation: bool = False
    github_url: str = "https://github.com"
    trusted_root: Path | None = None  # Sigstore's trust root (None: Sigstore's production one)
    require_api_digests: bool = False  # an unreadable GitHub asset list fails (not skipped)

    @classmethod
    def for_update(cls, source: ReleaseSource, build: BuildInfo, settings: Settings) -> TrustPolicy:
        """``mux update``: what the source demands, with the build's keys and identity.

        A signature is required from a source that demands one (a feed) and whenever the
        build trusts a key; an attestation wherever the source demands one (GitHub).
        """
        from updater.sources.base import attestation_identity

        github_url, repository = attestation_identity(
            settings.github.web_url, settings.github.repo, build.repo
        )
        return cls(
            minisign_keys=settings.trusted_keys(build.trust.minisign_keys),
            require_signature=source.signature_required or bool(build.trust.minisign_keys),
            repository=repository,
            signer_workflow=build.trust.signer_workflow,
            oidc_issuer=build.trust.oidc_issuer,
            require_attestation=source.attestation_required,
            skip_attestation=settings.skip_attestation,
            github_url=github_url,
            trusted_root=settings.sigstore_trusted_root,
        )

    @classmethod
    def for_release(
        cls,
        keys: tuple[str, ...],
        repository: str,
        *,
        skip_attestation: bool,
        trusted_root: Path | None,
    ) -> TrustPolicy:
        """``mux-release verify``: a release about to ship must pass everything."""
        from updater.config.buildinfo import OIDC_ISSUER, SIGNER_WORKFLOW

        return cls(
            minisign_keys=keys,
            require_signature=True,
            repository=repository,
            signer_workflow=SIGNER_WORKFLOW,
            oidc_issuer=OIDC_ISSUER,
            require_attestation=True,
            skip_attestation=skip_attestation,
            trusted_root=trusted_root,
            require_api_digests=True,
        )

    def identity(self, tag: str) -> Any:
        from updater.trust.attestation import AttestationIdentity

        return AttestationIdentity(
            repository=self.repository,
            signer_workflow=self.signer_workflow,
            ref=f"refs/tags/{tag}",
            issuer=self.oidc_issuer,
            github_url=self.github_url,
        )

    def checks(self) -> tuple[str, ...]:
        """The layers this policy runs, as a dry run lists them."""
        return (
            LAYER_SIGNATURE if self.minisign_keys else f"{LAYER_SIGNATURE} (no trusted key)",
            LAYER_DIGEST,
            LAYER_ATTESTATION if not self.skip_attestation else f"{LAYER_ATTESTATION} SKIPPED",
            LAYER_ARCHIVE,
            LAYER_SMOKE_TEST,
        )


def _fail(layer: str, message: str, hint: str | None = None) -> VerificationError:
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
    """One archive that passed every layer, unpacked into ``folder``; ``unpacked``: what
    :func:`unpack` wrote there (its digests, for the install's file list)."""

    asset: models.ManifestAsset
    archive_sha256: str
    folder: Path
    unpacked: UnpackedFiles | None = None


def verify_release_metadata(
    source: ReleaseSource, tag: str, policy: TrustPolicy, log: VerificationLog
) -> VerifiedRelease:
    """Layers 1 and 2 for ``SHA256SUMS`` and ``manifest.json`` of the release ``tag``.

    The signature's trusted comment must name this release (``version:``, equal to the tag
    and, below, to the manifest's version: no mix of releases) and its signed time, which the
    caller compares with the installed release's and records.
    """
    signed = verify_sums(
        source.fetch(tag, models.SUMS_NAME),
        source.fetch_optional(tag, models.SUMS_SIGNATURE_NAME),
        policy,
        log,
        tag=tag,
        signature_url=source.file_url(tag, models.SUMS_SIGNATURE_NAME),
    )
    manifest = verify_manifest(source.fetch(tag, models.MANIFEST_NAME), signed.sums, tag, log)
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
    owned = None
    if attestation_worker is None and not policy.skip_attestation:
        from updater.trust.attestation_worker import start

        attestation_worker = owned = start()
    attesting = _AttestationInBackground(source, release, signed, policy, attestation_worker)
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


# -- layers 1 and 2: the small documents -----------------------------------------------------


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
    from updater.timestamps import utc_text
    from updater.trust import minisign
    from updater.trust.trusted_comments import ReleaseComment

    timestamp = None
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
        comment_text = verified.trusted_comment[:200]
        try:
            comment = ReleaseComment.parse(verified.trusted_comment)
        except ParseError as exc:
            raise _fail(LAYER_SIGNATURE, f"the signature {signature_url}: {exc.message}") from None
        if comment.version is None or models.tag_for(comment.version) != tag:
            raise _fail(
                LAYER_SIGNATURE,
                f"the signature {signature_url} is for another version "
                f"({comment.version or 'none named'}, not {tag.removeprefix('v')}; "
                f"its trusted comment: {comment_text})",
                hint="the mirror serves files of different releases together; "
                "do not install from it",
            )
        if comment.timestamp is None:
            raise _fail(
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
    if models.tag_for(manifest.version) != tag:  # exactly, as install.sh compares them
        raise _fail(
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
        raise _fail(LAYER_DIGEST, f"manifest.json does not list {name}")
    listed = sums.get(name)
    if listed is None:
        raise _fail(LAYER_DIGEST, f"SHA256SUMS does not list {name}")
    if asset.sha256 != listed:
        raise _fail(
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
        raise _fail(LAYER_DIGEST, f"{name} is {size} bytes, the manifest says {expected_size}")
    if sha256 != signed:
        raise _fail(LAYER_DIGEST, f"{name} has sha256 {sha256}, SHA256SUMS says {signed}")
    sources = "SHA256SUMS and manifest.json"
    if api_digest is not None:
        if sha256 != api_digest:
            raise _fail(
                LAYER_DIGEST, f"{name} has sha256 {sha256}, GitHub's asset digest is {api_digest}"
            )
        sources += " and GitHub's asset digest"
    log.ok(LAYER_DIGEST, f"{name} sha256 {sha256} matches {sources}")


def verify_release_attestation(
    source: ReleaseSource,
    release: VerifiedRelease,
    sha256: str,
    policy: TrustPolicy,
    log: VerificationLog,
    *,
    worker: AttestationWorker | None,
    warn: Callable[[str], None] | None = None,
) -> None:
    """Layer 3: the bundle shipped with the release first, the attestations API second.

    The bundles are fetched here and verified by Sigstore in ``worker``, a child process
    (:mod:`updater.trust.attestation_worker`); ``None`` only with ``--insecure-skip-attestation``.

    When the signed ``SHA256SUMS`` lists the release's bundle, this layer is mandatory for
    every source: the bundle must be there and match its line (a mirror that drops, stalls
    or swaps it is refused, not skipped); only ``--insecure-skip-attestation`` goes on.

    ``warn`` receives what is worth a warning but not a failure (Sigstore's trust root could
    not be refreshed online); by default it is printed on stderr.
    """
    if policy.skip_attestation:
        log.skipped(LAYER_ATTESTATION, "skipped by --insecure-skip-attestation")
        return
    name = models.attestation_name(release.manifest.version)
    listed = release.sums.get(name)
    required = policy.require_attestation or listed is not None
    if not policy.repository:
        if required:
            raise _fail(
                LAYER_ATTESTATION,
                "no repository to check the attestation against (this build has none)",
                hint="set MUX_REPO=owner/name",
            )
        log.skipped(LAYER_ATTESTATION, "no repository identity to check against")
        return
    bundles: list[bytes] = []
    origin = "release asset"
    shipped = (
        _listed_bundle(source, release, name, listed)
        if listed is not None
        else source.fetch_optional(release.tag, name)
    )
    if shipped is not None:
        bundles.append(shipped)
    elif source.attestation_lookup:
        origin = "attestations API"
        try:
            bundles.extend(source.attestation_bundles(sha256))
        except MuxError as exc:
            if required:
                raise _fail(
                    LAYER_ATTESTATION,
                    f"no attestation found (the release has no {name}, and {exc.message})",
                    hint=exc.hint,
                ) from None
    if not bundles:
        if required:
            raise _fail(
                LAYER_ATTESTATION,
                f"no attestation for sha256 {sha256}",
                hint="only --insecure-skip-attestation installs an unattested release",
            )
        log.skipped(LAYER_ATTESTATION, f"the {source.kind} publishes no attestation")
        return
    from updater.trust.attestation import print_warning

    try:
        if worker is None:
            raise VerificationError("attestation: no verifier was started")
        report = worker.verify(
            bundles,
            sha256,
            policy.identity(release.tag),
            trusted_root=policy.trusted_root,
            warn=warn or print_warning,
        )
    except VerificationError as exc:
        raise _fail(LAYER_ATTESTATION, exc.message.removeprefix("attestation: ")) from None
    log.ok(
        LAYER_ATTESTATION,
        f"built by {report.signer_workflow}@{report.signer_ref} in {report.repository} "
        f"({origin}, transparency log index {report.log_index})",
    )


def _listed_bundle(
    source: ReleaseSource, release: VerifiedRelease, name: str, listed: str
) -> bytes:
    """The bundle the signed ``SHA256SUMS`` lists, exactly as listed."""
    try:
        bundle = source.fetch(release.tag, name)
    except NetworkError as exc:
        raise _fail(
            LAYER_ATTESTATION,
            f"the Sigstore bundle {name}, listed in the signed SHA256SUMS, could not be read: "
            f"{exc.message}",
            hint="a mirror must serve every file of a release; use a complete one",
        ) from None
    actual = hashlib.sha256(bundle).hexdigest()
    if actual != listed:
        raise _fail(
            LAYER_ATTESTATION,
            f"the Sigstore bundle {name} does not match its SHA256SUMS line "
            f"(expected {listed}, got {actual})",
            hint="the mirror altered or swapped it; do not install from it, and report it",
        )
    return bundle


class _AttestationInBackground:
    """Layer 3 in a worker thread (the bundle's fetch; Sigstore's check in the child process
    it hands the bundle to), for the digest the signed ``SHA256SUMS`` gives, while the
    archive downloads (:func:`verify_release_files`).

    :meth:`finish` waits for the answer and holds the download to it: the bytes on disk must
    have exactly the digest that was attested. Whatever the worker raised is reported as the
    attestation layer's one line; its log entries and warnings join the caller's only then,
    so the report keeps the layers' order. The worker writes nothing, and a run that fails
    elsewhere (the download, layer 2) never reads its answer, but still waits for it
    (:meth:`wait`; its fetches are bounded like every other): a process that exits while a
    thread is inside sigstore's import or its native code can crash in the interpreter's
    finalisation instead of exiting with its one line (seen as a SIGSEGV after a refused
    digest). For the same reason it is not a daemon thread.
    """

    def __init__(
        self,
        source: ReleaseSource,
        release: VerifiedRelease,
        sha256: str,
        policy: TrustPolicy,
        worker: AttestationWorker | None,
    ) -> None:
        self.sha256 = sha256
        self._log = VerificationLog()
        self._warnings: list[str] = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run,
            args=(source, release, policy, worker),
            name="mux-attestation",
        )
        self._thread.start()

    def _run(
        self,
        source: ReleaseSource,
        release: VerifiedRelease,
        policy: TrustPolicy,
        worker: AttestationWorker | None,
    ) -> None:
        try:
            verify_release_attestation(
                source,
                release,
                self.sha256,
                policy,
                self._log,
                worker=worker,
                warn=self._warnings.append,
            )
        except BaseException as exc:  # handed to finish(); a thread must not die noisily
            self._error = exc

    def wait(self) -> None:
        """Until the worker is done (its answer, if any, is left unread)."""
        self._thread.join()

    def finish(self, downloaded_sha256: str, log: VerificationLog) -> None:
        """Wait for layer 3; raise its failure, else add its result to ``log``."""
        self.wait()
        if self._warnings:
            from updater.trust.attestation import print_warning

            for message in self._warnings:
                print_warning(message)
        error = self._error
        if isinstance(error, VerificationError) and error.message.startswith(
            f"verification failed ({LAYER_ATTESTATION})"
        ):
            raise error
        if isinstance(error, MuxError):
            raise _fail(LAYER_ATTESTATION, error.message, hint=error.hint) from None
        if isinstance(error, Exception):
            raise _fail(LAYER_ATTESTATION, f"{type(error).__name__}: {error}") from None
        if error is not None:
            raise error
        if downloaded_sha256 != self.sha256:
            raise _fail(
                LAYER_ATTESTATION,
                f"the download has sha256 {downloaded_sha256}, the attestation was verified "
                f"for {self.sha256}",
            )
        log.layers.extend(self._log.layers)


# -- layer 4: unpacking ----------------------------------------------------------------------


def _archive_error(message: str) -> VerificationError:
    return _fail(LAYER_ARCHIVE, message)


def _checked_members(archive: tarfile.TarFile, top: str) -> Iterator[tarfile.TarInfo]:
    """The archive's members in order, each checked before it is handed on, renamed to
    its path below ``top/`` (the top folder itself is left out)."""
    total = 0
    for count, member in enumerate(archive, start=1):
        if count > MAX_MEMBERS:
            raise _archive_error(f"more than {MAX_MEMBERS} members")
        name = member.name
        if any(ord(c) < 32 for c in name) or name.startswith("/") or "\\" in name:
            raise _archive_error(f"unsafe member name {name!r}")
        parts = PurePosixPath(name).parts
        if ".." in parts:
            raise _archive_error(f"member {name!r} escapes the folder")
        if not parts or parts[0] != top:
            raise _archive_error(f"member {name!r} is outside the top folder {top}/")
        if not (member.isfile() or member.isdir() or member.issym()):
            raise _archive_error(f"member {name!r} is not a file, folder or symlink")
        if member.issym():
            # Relative targets without "..", so every link (and every chain of links) stays
            # at or below its own folder, whatever else the archive holds.
            target = PurePosixPath(member.linkname)
            if target.is_absolute() or ".." in target.parts:
                raise _archive_error(f"symlink {name!r} -> {member.linkname} leaves its folder")
        total += max(member.size, 0)
        if total > MAX_UNPACKED_BYTES:
            raise _archive_error(f"unpacks to more than {MAX_UNPACKED_BYTES} bytes")
        if len(parts) > 1:
            member.name = str(PurePosixPath(*parts[1:]))
            yield member


def unpack(
    archive_path: Path,
    destination: Path,
    *,
    top: str,
    on_file: Callable[[str], None] | None = None,
) -> UnpackedFiles:
    """Unpack ``top/`` of the archive into ``destination`` (which must be empty); returns the
    SHA-256 of every regular file it wrote, with what ``lstat`` says of it once written.

    One pass over the stream: each member is checked, then extracted with tarfile's ``data``
    filter. A member that fails its check stops the unpack; what was extracted before it
    stays in ``destination``, which the caller removes (an install's staging folder), and
    nothing of it has run. Reading the stream once, instead of checking the whole archive
    first and then seeking back to extract it, halves the unpacking's CPU time (measured on a
    64 MiB archive: 0.15 s to 0.08 s). Each file is hashed as it is written, so the install's
    file list (``.mux-files``) need not read the files back
    (:func:`updater.install.layout.files_list`). ``on_file`` is given each regular file once tarfile
    has set its mode and times (an install starts making it durable then).
    """
    import tarfile  # (not at the top: the check, which imports this module, unpacks nothing)

    from updater.install.layout import unpacked_file

    written: dict[str, str] = {}

    class HashingTarFile(tarfile.TarFile):
        def makefile(
            self,
            tarinfo: tarfile.TarInfo,
            targetpath: str | bytes | os.PathLike[str] | os.PathLike[bytes],
        ) -> None:
            if tarinfo.sparse is not None:  # (no release has one: written by tarfile, unhashed)
                super().makefile(tarinfo, targetpath)
                return
            source, digest, left = self.fileobj, hashlib.sha256(), tarinfo.size
            assert source is not None
            source.seek(tarinfo.offset_data)
            with open(targetpath, "wb") as target:
                while left:
                    block = source.read(min(left, _COPY_SIZE))
                    if not block:
                        raise tarfile.ReadError("unexpected end of data")
                    target.write(block)
                    digest.update(block)
                    left -= len(block)
            written[os.fsdecode(targetpath)] = digest.hexdigest()

        def utime(
            self,
            tarinfo: tarfile.TarInfo,
            targetpath: str | bytes | os.PathLike[str] | os.PathLike[bytes],
        ) -> None:
            super().utime(tarinfo, targetpath)  # tarfile sets a file's times last
            if on_file is not None and tarinfo.isreg():
                on_file(os.fsdecode(targetpath))

    from updater.install.gunzip import GunzipReader, InflateError

    try:
        with (
            open(archive_path, "rb") as compressed,
            GunzipReader(compressed) as stream,
            HashingTarFile(fileobj=stream, mode="r") as archive,
        ):
            archive.extractall(destination, members=_checked_members(archive, top), filter="data")
        # Once every file has its mode and times: what the list compares before trusting these.
        unpacked = {
            os.path.relpath(path, destination): unpacked_file(path, sha256)
            for path, sha256 in written.items()
        }
    except VerificationError:
        raise
    except (tarfile.TarError, InflateError, EOFError, OSError, ValueError) as exc:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            raise InstallError(
                f"cannot unpack into {destination}: {exc.strerror}",
                hint="free some disk space, then retry",
            ) from None
        raise _archive_error(f"cannot unpack: {exc}") from None
    executable = destination / "mux"
    if not executable.is_file() or executable.is_symlink():
        raise _archive_error(f"no mux executable at the top of {top}/")
    if not os.access(executable, os.X_OK):
        raise _archive_error("the mux in the archive is not executable")
    return unpacked


_COPY_SIZE = 1 << 20  # what the gzip reader inflates per step (updater/install/gunzip.py)


# -- layer 5: the new build runs -------------------------------------------------------------


class Expected(NamedTuple):
    version: str
    protocol_version: int
    target: str


def reported_build(folder: Path, *, timeout: float) -> Expected:
    """What ``<folder>/mux version --json`` says it is (run once, with a timeout)."""
    import subprocess

    command = [str(folder / "mux"), "version", "--json"]
    try:
        result = subprocess.run(
            command, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False
        )
    except subprocess.TimeoutExpired:
        raise _fail(
            LAYER_SMOKE_TEST, f"{folder / 'mux'} did not answer `mux version --json`"
        ) from None
    except OSError as exc:
        raise _fail(
            LAYER_SMOKE_TEST,
            f"{folder / 'mux'} does not run here ({exc.strerror}); wrong architecture?",
        ) from None
    try:
        doc = json.loads(result.stdout)
        return Expected(str(doc["version"]), int(doc["protocol_version"]), str(doc["target"]))
    except (ValueError, KeyError, TypeError, RecursionError):
        raise _fail(
            LAYER_SMOKE_TEST,
            f"{folder / 'mux'} exited {result.returncode} without a valid `version --json` "
            "(wrong architecture or a broken build?)",
        ) from None


def check_build(reported: Expected, expected: Expected) -> None:
    if reported != expected:
        raise _fail(
            LAYER_SMOKE_TEST,
            "the new mux reports "
            f"{reported.version} / protocol {reported.protocol_version} / {reported.target}, "
            f"expected {expected.version} / protocol {expected.protocol_version} / "
            f"{expected.target}",
        )


def smoke_test(folder: Path, expected: Expected, *, timeout: float) -> None:
    """``<folder>/mux version --json`` must report the release's version, protocol, target."""
    check_build(reported_build(folder, timeout=timeout), expected)
