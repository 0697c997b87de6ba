"""The checks sigstore-python leaves to its caller, on the verified DSSE payload.

Once Sigstore verified the signature, the payload must be an in-toto Statement v1 with the
SLSA provenance v1 predicate whose subjects name every expected sha256 (and, where a name is
required, under that name): docs/design.md, "What sigstore-python checks, and what it leaves
to us".
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence

from updater.errors import VerificationError
from updater.trust.attestation_report import AttestedSubject
from updater.trust.attestation_text import shown

IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
# actions/attest has only ever emitted Statement v1; nothing mux verifies needs v0.1.
IN_TOTO_STATEMENT_V1 = "https://in-toto.io/Statement/v1"
SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1"
_MAX_LISTED_SUBJECTS = 3
_SHA256_RE = re.compile(r"[0-9a-f]{64}")


def expected_digests(subject_sha256: str | Collection[str]) -> tuple[str, ...]:
    given = [subject_sha256] if isinstance(subject_sha256, str) else list(subject_sha256)
    digests: list[str] = []
    for value in given:
        digest = value.strip().lower().removeprefix("sha256:")
        if not _SHA256_RE.fullmatch(digest):
            raise VerificationError(f"attestation: {value!r} is not a sha256 hex digest")
        if digest not in digests:
            digests.append(digest)
    if not digests:
        # Checking no subject at all would let any attestation pass.
        raise VerificationError("attestation: no sha256 digest given to check the subjects against")
    return tuple(digests)


def check_statement(
    payload_type: str,
    payload: bytes,
    digests: Sequence[str],
    names: Mapping[str, str] | None = None,
) -> tuple[str, tuple[AttestedSubject, ...]]:
    """The checks sigstore-python leaves to its caller, on the verified DSSE payload."""
    if payload_type != IN_TOTO_PAYLOAD_TYPE:
        raise VerificationError(
            f"attestation: payload type is {shown(payload_type)}, expected {IN_TOTO_PAYLOAD_TYPE}"
        )
    try:
        statement = json.loads(payload)
    except (ValueError, RecursionError):
        statement = None
    if not isinstance(statement, dict):
        raise VerificationError("attestation: in-toto statement is not a JSON object")
    statement_type = statement.get("_type")
    if statement_type != IN_TOTO_STATEMENT_V1:
        raise VerificationError(
            f"attestation: statement type is {shown(statement_type)}, expected {IN_TOTO_STATEMENT_V1}"
        )
    predicate_type = statement.get("predicateType")
    if predicate_type != SLSA_PROVENANCE_V1:
        raise VerificationError(
            f"attestation: predicate type is {shown(predicate_type)}, expected {SLSA_PROVENANCE_V1}"
        )

    listed: dict[str, str] = {}  # sha256 -> subject name
    pairs: set[tuple[str, str]] = set()  # (sha256, name) of every subject
    raw_subjects = statement.get("subject")
    for subject in raw_subjects if isinstance(raw_subjects, list) else ():
        if not isinstance(subject, dict):
            continue
        digest = subject.get("digest")
        sha256 = digest.get("sha256") if isinstance(digest, dict) else None
        if isinstance(sha256, str):
            listed.setdefault(sha256.lower(), str(subject.get("name", "")))
            pairs.add((sha256.lower(), str(subject.get("name", ""))))
    for digest in digests:
        if digest not in listed:
            names_listed = ", ".join(
                shown(name or "?") for name in list(listed.values())[:_MAX_LISTED_SUBJECTS]
            )
            more = "" if len(listed) <= _MAX_LISTED_SUBJECTS else ", ..."
            raise VerificationError(
                f"attestation: subject digest mismatch: no subject has sha256 {digest} "
                f"(the statement lists {len(listed)} sha256 subject(s){': ' if listed else ''}"
                f"{names_listed}{more})"
            )
    for digest, name in (names or {}).items():
        if (digest.lower(), name) not in pairs:
            raise VerificationError(
                f"attestation: sha256 {digest} is attested as {shown(listed.get(digest, '?'))}, "
                f"not as {shown(name)} (another file published under this name?)"
            )
    # The name checked above when one was required, else the first the statement gives.
    return predicate_type, tuple(
        AttestedSubject((names or {}).get(d) or listed[d], d) for d in digests
    )
