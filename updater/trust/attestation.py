"""Layer 3 of ``mux update``: the release was built by our release workflow (Sigstore).

A GitHub build-provenance attestation is a Sigstore bundle holding a DSSE envelope around an
in-toto statement whose subjects are the release files. :func:`verify_attestation` has
sigstore-python check the cryptography (certificate chain to the trusted Fulcio, SCT,
transparency-log inclusion proof, checkpoint and SET, DSSE signature) and, through a policy,
who signed: the OIDC issuer, the source repository, the signer workflow at its ref and a
GitHub-hosted runner. It then checks what sigstore-python leaves to its caller: the payload
type, the statement type, the predicate type and that the statement names every expected
sha256 (docs/design.md, "What sigstore-python checks, and what it leaves to us").

Every failure is one :class:`~updater.errors.VerificationError` line saying which check failed,
what was expected and what was found. sigstore is imported only when a bundle is verified: it
costs about half a second, which ``mux`` pays only on this path.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from updater.errors import VerificationError
from updater.text import safe_text

if TYPE_CHECKING:
    from cryptography.x509 import Certificate
    from sigstore.models import TrustedRoot
    from sigstore.verify import Verifier

GITHUB_ACTIONS_ISSUER = "https://token.actions.githubusercontent.com"
IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
# actions/attest has only ever emitted Statement v1; nothing mux verifies needs v0.1.
IN_TOTO_STATEMENT_V1 = "https://in-toto.io/Statement/v1"
SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1"
GITHUB_HOSTED = "github-hosted"

# A bundle with 1024 subjects (actions/attest's maximum) is a few hundred KiB.
MAX_BUNDLE_BYTES = 16 * 1024 * 1024
MAX_BUNDLES = 32
_MAX_DETAIL = 300
_MAX_LISTED_SUBJECTS = 3

_SHA256_RE = re.compile(r"[0-9a-f]{64}")
# What sigstore-python 4 parses; GitHub emits the first.
_BUNDLE_MEDIA_TYPES = (
    "application/vnd.dev.sigstore.bundle.v0.3+json",
    "application/vnd.dev.sigstore.bundle+json;version=0.3",
    "application/vnd.dev.sigstore.bundle+json;version=0.2",
    "application/vnd.dev.sigstore.bundle+json;version=0.1",
)
_CLIENT_TRUST_CONFIG_MEDIA_TYPE = "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json"

# GitHub's Fulcio extensions (fulcio docs/oid-info.md). From 1.8 on, values are DER UTF8Strings.
_OID_ISSUER_V2 = "1.3.6.1.4.1.57264.1.8"
_OID_BUILD_SIGNER_URI = "1.3.6.1.4.1.57264.1.9"
_OID_RUNNER_ENVIRONMENT = "1.3.6.1.4.1.57264.1.11"
_OID_SOURCE_REPOSITORY_URI = "1.3.6.1.4.1.57264.1.12"
_OID_SOURCE_REPOSITORY_DIGEST = "1.3.6.1.4.1.57264.1.13"
_OID_SOURCE_REPOSITORY_REF = "1.3.6.1.4.1.57264.1.14"
_CHECKED_OIDS = frozenset(
    {
        _OID_ISSUER_V2,
        _OID_BUILD_SIGNER_URI,
        _OID_RUNNER_ENVIRONMENT,
        _OID_SOURCE_REPOSITORY_URI,
        _OID_SOURCE_REPOSITORY_DIGEST,
        _OID_SOURCE_REPOSITORY_REF,
    }
)


@dataclass(frozen=True)
class AttestationIdentity:
    """Who must have built the release.

    ``signer_workflow`` is a path in ``repository`` (``.github/workflows/release.yml``), which
    must have run at ``ref``. A workflow in another repository (a reusable workflow such as
    GitHub's ``artifact-attestations-workflows``) is named by its full URI, optionally pinned
    with ``@<ref>``; ``ref`` then names the source repository's ref only. ``ref=None`` accepts
    any ref.
    """

    repository: str
    signer_workflow: str
    ref: str | None
    issuer: str = GITHUB_ACTIONS_ISSUER
    github_url: str = "https://github.com"
    require_github_hosted_runner: bool = True

    @property
    def repository_uri(self) -> str:
        return f"{self.github_url.rstrip('/')}/{self.repository}"

    def expected_signer(self) -> tuple[str, str | None]:
        """The signer workflow's URI without its ref, and the ref it must carry (None: any)."""
        if "://" in self.signer_workflow:
            uri, pinned, pin = self.signer_workflow.partition("@")
            return uri, (pin if pinned else None)
        return f"{self.repository_uri}/{self.signer_workflow.lstrip('/')}", self.ref


@dataclass(frozen=True)
class AttestedSubject:
    name: str
    sha256: str


@dataclass(frozen=True)
class AttestationReport:
    """What the verified attestation establishes, for ``mux update``'s report."""

    repository: str
    source_repository_uri: str
    signer_identity: str
    signer_workflow: str
    signer_ref: str
    source_ref: str | None
    source_commit: str | None
    issuer: str
    runner_environment: str | None
    predicate_type: str
    subjects: tuple[AttestedSubject, ...]
    log_index: int | None
    integrated_time: datetime | None
    trust_root: str

    def to_json(self) -> dict[str, Any]:
        return {
            "repository": self.repository,
            "source_repository_uri": self.source_repository_uri,
            "signer_identity": self.signer_identity,
            "signer_workflow": self.signer_workflow,
            "signer_ref": self.signer_ref,
            "source_ref": self.source_ref,
            "source_commit": self.source_commit,
            "issuer": self.issuer,
            "runner_environment": self.runner_environment,
            "predicate_type": self.predicate_type,
            "subjects": [{"name": s.name, "sha256": s.sha256} for s in self.subjects],
            "log_index": self.log_index,
            "integrated_time": (
                self.integrated_time.isoformat().replace("+00:00", "Z")
                if self.integrated_time
                else None
            ),
            "trust_root": self.trust_root,
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> AttestationReport:
        """The report :meth:`to_json` wrote (from :mod:`updater.trust.attestation_worker`'s child);
        raises ``ValueError``, ``TypeError`` or ``KeyError`` on anything else."""
        texts = {
            name: document[name]
            for name in (
                "repository",
                "source_repository_uri",
                "signer_identity",
                "signer_workflow",
                "signer_ref",
                "issuer",
                "predicate_type",
                "trust_root",
            )
        }
        optional = {
            name: document[name] for name in ("source_ref", "source_commit", "runner_environment")
        }
        if not all(isinstance(v, str) for v in texts.values()) or not all(
            isinstance(v, str | None) for v in optional.values()
        ):
            raise TypeError("report fields")
        log_index, integrated = document["log_index"], document["integrated_time"]
        if not isinstance(log_index, int | None) or isinstance(log_index, bool):
            raise TypeError("log_index")
        subjects = tuple(
            AttestedSubject(str(s["name"]), str(s["sha256"])) for s in document["subjects"]
        )
        return cls(
            **texts,
            **optional,
            subjects=subjects,
            log_index=log_index,
            integrated_time=None if integrated is None else datetime.fromisoformat(integrated),
        )


def preload() -> None:
    """Import what verifying a bundle needs (most of its time), so that a process started
    early (:mod:`updater.trust.attestation_worker`) has done it before a bundle arrives. A broken
    install is reported when a bundle is verified (:func:`_load_verifier`), not here."""
    _quiet_sigstore_logs()
    try:
        # deferred: sigstore (with cryptography and pydantic) takes 0.5-0.7 s to import; importing this module must not (tests/test_attestation.py)
        import sigstore.errors
        import sigstore.models
        import sigstore.verify  # noqa: F401
    except ImportError:
        pass


def print_warning(message: str) -> None:
    print(f"warning: {safe_text(message)}", file=sys.stderr)


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
    digests = _expected_digests(subject_sha256)
    _check_identity(identity)
    candidates = _candidates(bundle)
    verifier, trust_description = _load_verifier(trusted_root, offline, refresh_timeout, warn)

    failures: list[str] = []
    for label, document in candidates:
        try:
            return _verify_one(
                document, digests, identity, verifier, trust_description, subject_names or {}
            )
        except VerificationError as exc:
            if len(candidates) == 1:
                raise
            failures.append(f"{label}: {_strip_prefix(exc.message)}")
    raise VerificationError(
        f"attestation: none of the {len(candidates)} bundles verified ({'; '.join(failures)})"
    )


# -- inputs --------------------------------------------------------------------------------------


def _expected_digests(subject_sha256: str | Collection[str]) -> tuple[str, ...]:
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


def _check_identity(identity: AttestationIdentity) -> None:
    owner, slash, name = identity.repository.partition("/")
    if not (owner and slash and name) or "/" in name:
        raise VerificationError(
            f"attestation: repository {identity.repository!r} is not 'owner/name'; "
            "cannot tell whose release this is"
        )
    if not identity.signer_workflow or not identity.issuer:
        raise VerificationError("attestation: no signer workflow or issuer to check against")


@dataclass(frozen=True)
class _Unparsable:
    """A candidate that is not even JSON; it fails with ``reason`` in its turn."""

    reason: str


def _candidates(bundle: bytes | Sequence[bytes]) -> list[tuple[str, Any]]:
    if isinstance(bundle, bytes | bytearray | memoryview):
        return _split_bundles(bytes(bundle))
    if not bundle:
        raise VerificationError("attestation: no bundle to verify")
    candidates: list[tuple[str, Any]] = []
    for number, raw in enumerate(bundle, start=1):
        try:
            documents = _split_bundles(raw)
        except VerificationError as exc:
            documents = [("bundle", _Unparsable(_strip_prefix(exc.message)))]
        label = f"bundle {number}"
        candidates.extend(
            (label if inner == "bundle" else f"{label} {inner}", document)
            for inner, document in documents
        )
    if len(candidates) > MAX_BUNDLES:
        raise VerificationError(
            f"attestation: {len(candidates)} bundles, more than the {MAX_BUNDLES} allowed"
        )
    return candidates


def _split_bundles(raw: bytes) -> list[tuple[str, Any]]:
    """The bundle documents in ``raw``: one JSON document, or JSON lines."""
    if len(raw) > MAX_BUNDLE_BYTES:
        raise VerificationError(
            f"attestation: bundle is {len(raw)} bytes, more than the {MAX_BUNDLE_BYTES} allowed"
        )
    try:
        text = raw.decode("utf-8").lstrip("\ufeff")
    except UnicodeDecodeError as exc:
        raise VerificationError(f"attestation: bundle is not UTF-8 text ({exc.reason})") from None
    if not text.strip():
        raise VerificationError("attestation: bundle is empty")
    try:
        return [("bundle", json.loads(text))]
    except (ValueError, RecursionError) as exc:
        whole_error = _one_line(exc)

    lines: list[tuple[str, Any]] = []
    parsed_any = False
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            lines.append((f"line {number}", json.loads(line)))
            parsed_any = True
        except (ValueError, RecursionError):
            lines.append((f"line {number}", _Unparsable("bundle is not valid JSON")))
    # Only JSON lines when some line is JSON of its own: a truncated pretty-printed bundle is
    # reported as one JSON error, not as a complaint about every line.
    if not parsed_any or len(lines) < 2:
        raise VerificationError(f"attestation: bundle is not valid JSON ({whole_error})")
    if len(lines) > MAX_BUNDLES:
        raise VerificationError(
            f"attestation: {len(lines)} bundles in one file, more than the {MAX_BUNDLES} allowed"
        )
    return lines


# -- trust root ----------------------------------------------------------------------------------


def _quiet_sigstore_logs() -> None:
    # sigstore and tuf log warnings (e.g. "TUF repository is loaded in offline mode") that, with
    # no logging configured, Python's last-resort handler would print as stray stderr lines.
    # mux says what matters through warn(); an application that configures logging still gets
    # the records through propagation.
    for name in ("sigstore", "tuf"):
        logger = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())


def _load_verifier(
    trusted_root: Path | None,
    offline: bool,
    refresh_timeout: float,
    warn: Callable[[str], None],
) -> tuple[Verifier, str]:
    _quiet_sigstore_logs()
    try:
        # deferred: sigstore (with cryptography and pydantic) takes 0.5-0.7 s to import; importing this module must not (tests/test_attestation.py)
        from sigstore.verify import Verifier
    except ImportError as exc:  # a broken install must not turn into "verified"
        raise VerificationError(f"attestation: sigstore is not available ({exc})") from None

    if trusted_root is not None:
        root = _trusted_root_from_file(trusted_root)
        description = f"file:{trusted_root}"
    else:
        root, description = _production_trusted_root(offline, refresh_timeout, warn)
    try:
        return Verifier(trusted_root=root), description
    except Exception as exc:  # sigstore raises its own errors and ValueErrors on bad roots
        raise VerificationError(
            f"attestation: trusted root ({description}) is unusable ({_one_line(exc)})"
        ) from None


def _trusted_root_from_file(path: Path) -> TrustedRoot:
    # deferred: sigstore (with cryptography and pydantic) takes 0.5-0.7 s to import; importing this module must not (tests/test_attestation.py)
    from sigstore.models import ClientTrustConfig, TrustedRoot

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise VerificationError(
            f"attestation: cannot read trusted root {path} ({_one_line(exc)})"
        ) from None
    try:
        document = json.loads(text)
        # A client trust config (sigstore --trust-config) wraps a trusted root; accept both.
        if (
            isinstance(document, dict)
            and document.get("mediaType") == _CLIENT_TRUST_CONFIG_MEDIA_TYPE
        ):
            return ClientTrustConfig.from_json(text).trusted_root
        return TrustedRoot.from_file(str(path))
    except Exception as exc:  # pydantic, JSON and sigstore errors alike
        raise VerificationError(
            f"attestation: trusted root {path} is not a Sigstore trusted root ({_one_line(exc)})"
        ) from None


def _production_trusted_root(
    offline: bool, refresh_timeout: float, warn: Callable[[str], None]
) -> tuple[TrustedRoot, str]:
    # deferred: sigstore (with cryptography and pydantic) takes 0.5-0.7 s to import; importing this module must not (tests/test_attestation.py)
    from sigstore.models import ClientTrustConfig

    if not offline:
        outcome: dict[str, Any] = {}

        def refresh() -> None:
            try:
                outcome["root"] = ClientTrustConfig.production(offline=False).trusted_root
            except BaseException as exc:  # reported below; a thread must not die noisily
                outcome["error"] = exc

        # python-tuf's own timeouts are per request (30 s); a daemon thread bounds the whole
        # refresh. A refresh that is still running is abandoned: tuf writes its cache files
        # atomically, so it cannot corrupt what the offline fallback reads.
        worker = threading.Thread(target=refresh, name="mux-sigstore-trust-refresh", daemon=True)
        worker.start()
        worker.join(refresh_timeout)
        if "root" in outcome:
            return outcome["root"], "sigstore production (refreshed online)"
        reason = (
            f"{_one_line(outcome['error'])}"
            if "error" in outcome
            else f"no answer within {refresh_timeout:g} s"
        )
        warn(
            f"attestation: could not refresh Sigstore's trust root online ({reason}); "
            "using the last cached copy or the one that ships with sigstore"
        )
    try:
        root = ClientTrustConfig.production(offline=True).trusted_root
    except Exception as exc:
        raise VerificationError(
            f"attestation: cannot load Sigstore's trust root ({_one_line(exc)})"
        ) from None
    return root, "sigstore production (offline copy)"


# -- one bundle ----------------------------------------------------------------------------------


def _verify_one(
    document: Any,
    digests: Sequence[str],
    identity: AttestationIdentity,
    verifier: Verifier,
    trust_description: str,
    names: Mapping[str, str],
) -> AttestationReport:
    if isinstance(document, _Unparsable):
        raise VerificationError(f"attestation: {document.reason}")
    if not isinstance(document, dict):
        raise VerificationError("attestation: bundle is not a JSON object")
    media_type = document.get("mediaType")
    if media_type not in _BUNDLE_MEDIA_TYPES:
        raise VerificationError(
            f"attestation: bundle media type is {media_type}, expected {_BUNDLE_MEDIA_TYPES[0]}"
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

    policy = _IdentityPolicy(identity)
    try:
        parsed = Bundle.from_json(json.dumps(document))
        payload_type, payload = verifier.verify_dsse(parsed, policy)
    except VerificationError:
        raise  # our policy's own, already worded
    except CertValidationError as exc:
        raise VerificationError(
            "attestation: signing certificate does not chain to the trusted Sigstore root "
            f"at the signing time ({_one_line(exc)})"
        ) from None
    except InvalidBundle as exc:
        raise VerificationError(f"attestation: malformed bundle ({_one_line(exc)})") from None
    except SigstoreVerificationError as exc:
        raise VerificationError(
            f"attestation: Sigstore verification failed ({_one_line(exc)})"
        ) from None
    except Exception as exc:  # hostile input reaches sigstore's parsers: fail closed, one line
        raise VerificationError(
            f"attestation: malformed bundle ({type(exc).__name__}: {_one_line(exc)})"
        ) from None

    facts = policy.facts
    if facts is None:  # the policy runs inside verify_dsse; never skip it silently
        raise VerificationError("attestation: signer identity was not checked")
    predicate_type, subjects = _check_statement(payload_type, payload, digests, names)
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


def _check_statement(
    payload_type: str,
    payload: bytes,
    digests: Sequence[str],
    names: Mapping[str, str] | None = None,
) -> tuple[str, tuple[AttestedSubject, ...]]:
    """The checks sigstore-python leaves to its caller, on the verified DSSE payload."""
    if payload_type != IN_TOTO_PAYLOAD_TYPE:
        raise VerificationError(
            f"attestation: payload type is {_shown(payload_type)}, expected {IN_TOTO_PAYLOAD_TYPE}"
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
            f"attestation: statement type is {_shown(statement_type)}, expected {IN_TOTO_STATEMENT_V1}"
        )
    predicate_type = statement.get("predicateType")
    if predicate_type != SLSA_PROVENANCE_V1:
        raise VerificationError(
            f"attestation: predicate type is {_shown(predicate_type)}, expected {SLSA_PROVENANCE_V1}"
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
            shown = ", ".join(
                _shown(name or "?") for name in list(listed.values())[:_MAX_LISTED_SUBJECTS]
            )
            more = "" if len(listed) <= _MAX_LISTED_SUBJECTS else ", ..."
            raise VerificationError(
                f"attestation: subject digest mismatch: no subject has sha256 {digest} "
                f"(the statement lists {len(listed)} sha256 subject(s){': ' if listed else ''}"
                f"{shown}{more})"
            )
    for digest, name in (names or {}).items():
        if (digest.lower(), name) not in pairs:
            raise VerificationError(
                f"attestation: sha256 {digest} is attested as {_shown(listed.get(digest, '?'))}, "
                f"not as {_shown(name)} (another file published under this name?)"
            )
    # The name checked above when one was required, else the first the statement gives.
    return predicate_type, tuple(
        AttestedSubject((names or {}).get(d) or listed[d], d) for d in digests
    )


# -- signer identity -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _CertificateFacts:
    issuer: str
    source_repository_uri: str
    signer_uri: str
    source_ref: str | None
    source_commit: str | None
    runner_environment: str | None

    @property
    def signer_ref(self) -> str:
        return self.signer_uri.rpartition("@")[2] if "@" in self.signer_uri else ""

    def signer_workflow(self, identity: AttestationIdentity) -> str:
        """The workflow path when it is in the identity's repository, else its full URI."""
        uri = self.signer_uri.rpartition("@")[0] if "@" in self.signer_uri else self.signer_uri
        prefix = _canonical_uri(identity.repository_uri + "/")
        canonical = _canonical_uri(uri)
        return canonical[len(prefix) :] if canonical.startswith(prefix) else uri


class _IdentityPolicy:
    """A sigstore-python verification policy checking GitHub's Fulcio identity.

    sigstore calls :meth:`verify` once the certificate chains to the trust root and its SCT
    verifies. It raises mux's own :class:`VerificationError`, worded for the user, which
    sigstore lets through untouched. Owner and repository names compare case-insensitively,
    as GitHub treats them; workflow paths and refs exactly.
    """

    def __init__(self, identity: AttestationIdentity) -> None:
        self.identity = identity
        self.facts: _CertificateFacts | None = None

    def verify(self, cert: Certificate) -> None:
        identity = self.identity
        extensions = _fulcio_extensions(cert)

        issuer = _required(extensions, _OID_ISSUER_V2, "OIDC issuer", identity.issuer)
        if issuer != identity.issuer:
            raise VerificationError(
                f"attestation: OIDC issuer is {_shown(issuer)}, expected {identity.issuer}"
            )

        repository_uri = _required(
            extensions, _OID_SOURCE_REPOSITORY_URI, "source repository", identity.repository_uri
        )
        if _canonical_uri(repository_uri) != _canonical_uri(identity.repository_uri):
            raise VerificationError(
                f"attestation: source repository is {_shown(repository_uri)}, "
                f"expected {identity.repository_uri}"
            )

        signer_uri = _san_uri(cert)
        build_signer = _required(
            extensions, _OID_BUILD_SIGNER_URI, "build signer URI", signer_uri or "the SAN"
        )
        if signer_uri is None or build_signer != signer_uri:
            raise VerificationError(
                f"attestation: certificate's build signer URI {_shown(build_signer)} differs "
                f"from its subject alternative name {_shown(signer_uri)}"
            )
        self._check_signer(signer_uri)

        source_ref = extensions.get(_OID_SOURCE_REPOSITORY_REF)
        if identity.ref is not None and source_ref != identity.ref:
            raise VerificationError(
                f"attestation: source ref is {_shown(source_ref or 'missing')}, "
                f"expected {identity.ref}"
            )

        runner = extensions.get(_OID_RUNNER_ENVIRONMENT)
        if identity.require_github_hosted_runner and runner != GITHUB_HOSTED:
            raise VerificationError(
                f"attestation: runner environment is {_shown(runner or 'missing')}, "
                f"expected {GITHUB_HOSTED}"
            )

        self.facts = _CertificateFacts(
            issuer=issuer,
            source_repository_uri=repository_uri,
            signer_uri=signer_uri,
            source_ref=source_ref,
            source_commit=extensions.get(_OID_SOURCE_REPOSITORY_DIGEST),
            runner_environment=runner,
        )

    def _check_signer(self, signer_uri: str) -> None:
        expected_uri, expected_ref = self.identity.expected_signer()
        found_uri, at, found_ref = signer_uri.rpartition("@")
        if not at:
            found_uri, found_ref = signer_uri, ""
        if _canonical_uri(found_uri) == _canonical_uri(expected_uri) and (
            expected_ref is None or found_ref == expected_ref
        ):
            return
        # Name workflows relative to the repository when both live in it: that is the mistake
        # a user can act on ("other.yml@refs/tags/v1, expected release.yml@refs/tags/v2").
        prefix = _canonical_uri(self.identity.repository_uri + "/")
        found_canonical, expected_canonical = (
            _canonical_uri(found_uri),
            _canonical_uri(expected_uri),
        )
        if found_canonical.startswith(prefix) and expected_canonical.startswith(prefix):
            found_uri = found_canonical[len(prefix) :]
            expected_uri = expected_canonical[len(prefix) :]
        raise VerificationError(
            f"attestation: signer workflow is {_shown(f'{found_uri}@{found_ref}')}, "
            f"expected {expected_uri}@{expected_ref or '<any ref>'}"
        )


def _fulcio_extensions(cert: Certificate) -> dict[str, str]:
    """GitHub's Fulcio extensions from 1.8 on, decoded (DER UTF8String); others are skipped."""
    # deferred: sigstore (with cryptography and pydantic) takes 0.5-0.7 s to import; importing this module must not (tests/test_attestation.py)
    from cryptography.hazmat import asn1
    from cryptography.x509 import UnrecognizedExtension

    values: dict[str, str] = {}
    for extension in cert.extensions:
        oid = extension.oid.dotted_string
        if oid not in _CHECKED_OIDS:
            continue
        if not isinstance(extension.value, UnrecognizedExtension):
            raise VerificationError(f"attestation: certificate extension {oid} is not Fulcio's")
        try:
            values[oid] = asn1.decode_der(str, extension.value.value)
        except ValueError:
            raise VerificationError(
                f"attestation: certificate extension {oid} is not a DER UTF8String"
            ) from None
    return values


def _required(extensions: Mapping[str, str], oid: str, what: str, expected: str) -> str:
    value = extensions.get(oid)
    if value is None:
        raise VerificationError(
            f"attestation: certificate has no {what} ({oid}), expected {expected}"
        )
    return value


def _san_uri(cert: Certificate) -> str | None:
    # deferred: sigstore (with cryptography and pydantic) takes 0.5-0.7 s to import; importing this module must not (tests/test_attestation.py)
    from cryptography.x509 import (
        ExtensionNotFound,
        SubjectAlternativeName,
        UniformResourceIdentifier,
    )

    try:
        san = cert.extensions.get_extension_for_class(SubjectAlternativeName).value
    except ExtensionNotFound:
        return None
    uris = san.get_values_for_type(UniformResourceIdentifier)
    return uris[0] if len(uris) == 1 else None


def _canonical_uri(uri: str) -> str:
    """``uri`` as GitHub compares it: scheme and host lower-cased (DNS ignores their case),
    owner and repository lower-cased (GitHub ignores theirs), the rest exactly as written.

    A URI with a query, a fragment, user info or a port is refused: GitHub issues none, and
    dropping them (what a URL parser's "path" does) would let ``release.yml?x.yml`` pass as
    ``release.yml``. ``gh attestation verify`` compares the exact string, too.
    """
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError:
        raise VerificationError(f"attestation: malformed URI {_shown(uri)}") from None
    if (
        "?" in uri
        or "#" in uri
        or "@" in parts.netloc
        or port is not None
        or ":" in parts.netloc
        or not parts.netloc
    ):
        raise VerificationError(
            f"attestation: the URI {_shown(uri)} has a query, a fragment, user info or a port "
            "(GitHub's never do)"
        )
    segments = parts.path.split("/")
    # segments[0] is "" (the path starts with "/"); [1] owner, [2] repository.
    head = [segment.lower() for segment in segments[:3]]
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{'/'.join(head + segments[3:])}"


# -- small helpers -------------------------------------------------------------------------------


def _get(document: Mapping[str, Any], *keys: str) -> Any:
    value: Any = document
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _one_line(exc: BaseException) -> str:
    return _shown(" ".join(str(exc).split()) or type(exc).__name__)


def _shown(value: object) -> str:
    """``value`` safe for one terminal line: control characters escaped, length capped.

    Statement fields are whatever the signer wrote, and anyone can sign with Sigstore.
    """

    text = safe_text(value)
    return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 3] + "..."


def _strip_prefix(message: str) -> str:
    return message.removeprefix("attestation: ")


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
