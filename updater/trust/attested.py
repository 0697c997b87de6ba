"""Layer 3 in the pipeline: the release's Sigstore attestation, checked beside the download.

The digest it attests is the one the signed ``SHA256SUMS`` gives, known before the first
byte of the archive arrives, so a worker thread fetches the bundle while the archive streams
in and hands it to the attestation child (:mod:`updater.trust.attestation_worker`);
:class:`AttestationInBackground` joins it before anything is unpacked, and its
:class:`AttestationVerdict` is fed to the trusted release
(:class:`updater.trust.trusted_release.TrustedRelease`), which :func:`attested` holds it to.
"""

from __future__ import annotations

import hashlib
import threading
from typing import TYPE_CHECKING, NamedTuple

from updater.errors import MuxError, NetworkError, VerificationError
from updater.formats import models
from updater.trust.attestation import print_warning
from updater.trust.layers import (
    LAYER_ATTESTATION,
    LayerResult,
    VerificationLog,
    VerifiedRelease,
    layer_failure,
)
from updater.trust.trust_policy import TrustPolicy

if TYPE_CHECKING:
    from collections.abc import Callable

    from updater.trust.attestation_worker import AttestationWorker
    from updater.trust.source import ReleaseFiles


def verify_release_attestation(
    source: ReleaseFiles,
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
    (:mod:`updater.trust.attestation_worker`); ``None`` with ``--insecure-skip-attestation``
    or for a build that knows no repository (the layer ends before a bundle is checked).

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
            raise layer_failure(
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
                raise layer_failure(
                    LAYER_ATTESTATION,
                    f"no attestation found (the release has no {name}, and {exc.message})",
                    hint=exc.hint,
                ) from None
    if not bundles:
        if required:
            raise layer_failure(
                LAYER_ATTESTATION,
                f"no attestation for sha256 {sha256}",
                hint="only --insecure-skip-attestation installs an unattested release",
            )
        log.skipped(LAYER_ATTESTATION, f"the {source.kind} publishes no attestation")
        return

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
        raise layer_failure(LAYER_ATTESTATION, exc.message.removeprefix("attestation: ")) from None
    log.ok(
        LAYER_ATTESTATION,
        f"built by {report.signer_workflow}@{report.signer_ref} in {report.repository} "
        f"({origin}, transparency log index {report.log_index})",
    )


def _listed_bundle(source: ReleaseFiles, release: VerifiedRelease, name: str, listed: str) -> bytes:
    """The bundle the signed ``SHA256SUMS`` lists, exactly as listed."""
    try:
        bundle = source.fetch(release.tag, name)
    except NetworkError as exc:
        raise layer_failure(
            LAYER_ATTESTATION,
            f"the Sigstore bundle {name}, listed in the signed SHA256SUMS, could not be read: "
            f"{exc.message}",
            hint="a mirror must serve every file of a release; use a complete one",
        ) from None
    actual = hashlib.sha256(bundle).hexdigest()
    if actual != listed:
        raise layer_failure(
            LAYER_ATTESTATION,
            f"the Sigstore bundle {name} does not match its SHA256SUMS line "
            f"(expected {listed}, got {actual})",
            hint="the mirror altered or swapped it; do not install from it, and report it",
        )
    return bundle


class AttestationInBackground:
    """Layer 3 in a worker thread (the bundle's fetch; Sigstore's check in the child process
    it hands the bundle to), for the digest the signed ``SHA256SUMS`` gives, while the
    archive downloads (:func:`verify_release_files`).

    :meth:`verdict` waits for the answer, and :func:`attested` (:meth:`finish`) holds the
    download to it: the bytes on disk must have exactly the digest that was attested. Whatever the worker raised is reported as the
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
        source: ReleaseFiles,
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
        source: ReleaseFiles,
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
        except BaseException as exc:  # handed to verdict(); a thread must not die noisily
            self._error = exc

    def wait(self) -> None:
        """Until the worker is done (its answer, if any, is left unread)."""
        self._thread.join()

    def verdict(self) -> AttestationVerdict:
        """Wait for layer 3 and answer what it found (its warnings printed now, so they
        come in the layers' order); :func:`attested` reads it."""
        self.wait()
        for message in self._warnings:
            print_warning(message)
        return AttestationVerdict(self.sha256, tuple(self._log.layers), self._error)

    def finish(self, downloaded_sha256: str, log: VerificationLog) -> None:
        """Wait for layer 3; raise its failure, else add its result to ``log``."""
        log.layers.extend(attested(self.verdict(), downloaded_sha256))


class AttestationVerdict(NamedTuple):
    """What layer 3 found for the digest ``sha256``: the layers it logged, or its error."""

    sha256: str
    layers: tuple[LayerResult, ...]
    error: BaseException | None = None


def attested(verdict: AttestationVerdict, sha256: str) -> tuple[LayerResult, ...]:
    """The layers ``verdict`` logged, when it is a pass for exactly ``sha256`` (the bytes on
    disk, or the file list a delta's tree is checked against); else layer 3's one line
    (whatever the check raised, named after the layer). Pure."""
    error = verdict.error
    if isinstance(error, VerificationError) and error.message.startswith(
        f"verification failed ({LAYER_ATTESTATION})"
    ):
        raise error
    if isinstance(error, MuxError):
        raise layer_failure(LAYER_ATTESTATION, error.message, hint=error.hint) from None
    if isinstance(error, Exception):
        raise layer_failure(LAYER_ATTESTATION, f"{type(error).__name__}: {error}") from None
    if error is not None:
        raise error
    if sha256 != verdict.sha256:
        raise layer_failure(
            LAYER_ATTESTATION,
            f"the download has sha256 {sha256}, the attestation was verified for {verdict.sha256}",
        )
    return verdict.layers
