"""Layer 3 of ``mux update``: the release was built by our release workflow (Sigstore).

A GitHub build-provenance attestation is a Sigstore bundle holding a DSSE envelope around an
in-toto statement whose subjects are the release files. :func:`verify_attestation` has
sigstore-python check the cryptography (certificate chain to the trusted Fulcio, SCT,
transparency-log inclusion proof, checkpoint and SET, DSSE signature) and, through a policy,
who signed: the OIDC issuer, the source repository, the signer workflow at its ref and a
GitHub-hosted runner. It then checks what sigstore-python leaves to its caller: the payload
type, the statement type, the predicate type and that the statement names every expected
sha256 (docs/design.md, "What sigstore-python checks, and what it leaves to us").

This module is the one call and the verification of one bundle; the parts sit beside it
along sigstore's own seams, one job each: :mod:`~updater.trust.attestation_bundles` (the
candidates), :mod:`~updater.trust.attestation_roots` (the trusted root and the verifier),
:mod:`~updater.trust.attestation_identity` (who must have signed, and the policy checking it),
:mod:`~updater.trust.attestation_statement` (the statement) and
:mod:`~updater.trust.attestation_report` (what it establishes).

Every failure is one :class:`~updater.errors.VerificationError` line saying which check failed,
what was expected and what was found. sigstore is imported only when a bundle is verified: it
costs about half a second, which ``mux`` pays only on this path.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from updater.errors import VerificationError
from updater.text import safe_text
from updater.trust.attestation_bundles import (
    BUNDLE_MEDIA_TYPES,
    MAX_BUNDLE_BYTES,
    MAX_BUNDLES,
    Unparsable,
    bundle_candidates,
)
from updater.trust.attestation_identity import AttestationIdentity, IdentityPolicy, check_identity
from updater.trust.attestation_report import AttestationReport, AttestedSubject
from updater.trust.attestation_roots import load_verifier, quiet_sigstore_logs
from updater.trust.attestation_statement import check_statement, expected_digests
from updater.trust.attestation_text import one_line, strip_prefix

if TYPE_CHECKING:
    from sigstore.verify import Verifier

# The layer's face: the call, and the records and bounds its callers name with it (the
# attestation child reaches them through this module, updater.trust.attestation_worker).
__all__ = [
    "MAX_BUNDLES",
    "MAX_BUNDLE_BYTES",
    "AttestationIdentity",
    "AttestationReport",
    "AttestedSubject",
    "preload",
    "print_warning",
    "verify_attestation",
]


def preload() -> None:
    """Import what verifying a bundle needs (most of its time), so that a process started
    early (:mod:`updater.trust.attestation_worker`) has done it before a bundle arrives. A broken
    install is reported when a bundle is verified (:func:`load_verifier`), not here."""
    quiet_sigstore_logs()
    try:
        # deferred: sigstore (with cryptography and pydantic) takes 0.5-0.7 s to import; importing this module must not (tests/test_attestation.py)
        import sigstore.errors
        import sigstore.models
        import sigstore.verify  # noqa: F401
    except ImportError:
        pass


def print_warning(message: str) -> None:
    print(f"mux: warning: {safe_text(message)}", file=sys.stderr)  # as render.warning_line


def verify_attestation(
    bundle: bytes | Sequence[bytes],
    subject_sha256: str | Collection[str],
    identity: AttestationIdentity,
    *,
    trusted_root: Path | None = None,
    offline: bool = False,
    refresh_timeout: float = 5.0,
    warn: Callable[[str], None] = print_warning,
    subject_names: Mapping[str, str] | None = None,
) -> AttestationReport:
    """Verify that ``bundle`` attests every digest in ``subject_sha256`` as built by ``identity``.

    ``subject_names`` (sha256 -> file name) also requires the subject of that digest to carry
    that name: a producer's file attested under another name (another target's build
    republished under this one's) is refused.

    ``bundle`` is one JSON Sigstore bundle, or JSON lines with one bundle each, or a sequence
    of either (one per source, e.g. the release asset and the attestations API); any one bundle
    that verifies suffices. The trust root is ``trusted_root`` (a private instance's, e.g. from
    ``MUX_SIGSTORE_TRUSTED_ROOT`` through :mod:`updater.config.settings`), else Sigstore's production
    root: refreshed online within ``refresh_timeout`` seconds, or, when ``offline`` or when that
    fails (with a ``warn``), the copy cached by or shipped with sigstore. Raises :class:`VerificationError` on any failure, and nothing else.
    """
    digests = expected_digests(subject_sha256)
    check_identity(identity)
    candidates = bundle_candidates(bundle)
    verifier, trust_description = load_verifier(trusted_root, offline, refresh_timeout, warn)

    failures: list[str] = []
    for label, document in candidates:
        try:
            return _verify_one(
                document, digests, identity, verifier, trust_description, subject_names or {}
            )
        except VerificationError as exc:
            if len(candidates) == 1:
                raise
            failures.append(f"{label}: {strip_prefix(exc.message)}")
    raise VerificationError(
        f"attestation: none of the {len(candidates)} bundles verified ({'; '.join(failures)})"
    )


# -- one bundle ----------------------------------------------------------------------------------


def _verify_one(
    document: Any,
    digests: Sequence[str],
    identity: AttestationIdentity,
    verifier: Verifier,
    trust_description: str,
    names: Mapping[str, str],
) -> AttestationReport:
    if isinstance(document, Unparsable):
        raise VerificationError(f"attestation: {document.reason}")
    if not isinstance(document, dict):
        raise VerificationError("attestation: bundle is not a JSON object")
    media_type = document.get("mediaType")
    if media_type not in BUNDLE_MEDIA_TYPES:
        raise VerificationError(
            f"attestation: bundle media type is {media_type}, expected {BUNDLE_MEDIA_TYPES[0]}"
        )
    entries = _get(document, "verificationMaterial", "tlogEntries")
    if not entries:
        # GitHub's private Sigstore instance (private repositories, immutable-release
        # attestations) timestamps with a TSA instead of a public log; sigstore-python cannot
        # verify that (sigstore/sigstore-python#1529).
        raise VerificationError(
            "attestation: bundle has no transparency-log entry (a private-instance attestation, "
            "as GitHub makes for private repositories); only public-good Sigstore is supported"
        )

    # deferred: sigstore (with cryptography and pydantic) takes 0.5-0.7 s to import; importing this module must not (tests/test_attestation.py)
    from sigstore.errors import CertValidationError
    from sigstore.errors import VerificationError as SigstoreVerificationError
    from sigstore.models import Bundle, InvalidBundle

    policy = IdentityPolicy(identity)
    try:
        parsed = Bundle.from_json(json.dumps(document))
        payload_type, payload = verifier.verify_dsse(parsed, policy)
    except VerificationError:
        raise  # our policy's own, already worded
    except CertValidationError as exc:
        raise VerificationError(
            "attestation: signing certificate does not chain to the trusted Sigstore root "
            f"at the signing time ({one_line(exc)})"
        ) from None
    except InvalidBundle as exc:
        raise VerificationError(f"attestation: malformed bundle ({one_line(exc)})") from None
    except SigstoreVerificationError as exc:
        raise VerificationError(
            f"attestation: Sigstore verification failed ({one_line(exc)})"
        ) from None
    except Exception as exc:  # hostile input reaches sigstore's parsers: fail closed, one line
        raise VerificationError(
            f"attestation: malformed bundle ({type(exc).__name__}: {one_line(exc)})"
        ) from None

    facts = policy.facts
    if facts is None:  # the policy runs inside verify_dsse; never skip it silently
        raise VerificationError("attestation: signer identity was not checked")
    predicate_type, subjects = check_statement(payload_type, payload, digests, names)
    entry = entries[0] if isinstance(entries, list) and isinstance(entries[0], dict) else {}
    return AttestationReport(
        repository=identity.repository,
        source_repository_uri=facts.source_repository_uri,
        signer_identity=facts.signer_uri,
        signer_workflow=facts.signer_workflow(identity),
        signer_ref=facts.signer_ref,
        source_ref=facts.source_ref,
        source_commit=facts.source_commit,
        issuer=facts.issuer,
        runner_environment=facts.runner_environment,
        predicate_type=predicate_type,
        subjects=subjects,
        log_index=_int_or_none(entry.get("logIndex")),
        integrated_time=_time_or_none(entry.get("integratedTime")),
        trust_root=trust_description,
    )


# -- small helpers -------------------------------------------------------------------------------


def _get(document: Mapping[str, Any], *keys: str) -> Any:
    value: Any = document
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _time_or_none(value: Any) -> datetime | None:
    seconds = _int_or_none(value)
    try:
        return datetime.fromtimestamp(seconds, tz=UTC) if seconds is not None else None
    except (OverflowError, OSError, ValueError):
        return None
