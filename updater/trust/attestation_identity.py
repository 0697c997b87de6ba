"""Who must have built a release, and the policy that checks it in the signing certificate.

:class:`AttestationIdentity` names the repository, the signer workflow at its ref, the OIDC
issuer and a GitHub-hosted runner; :class:`IdentityPolicy` is the sigstore-python
verification policy that checks GitHub's Fulcio extensions against it (sigstore calls it
once the certificate chains to the trust root), and keeps what it found
(:class:`CertificateFacts`) for the report. URIs compare as GitHub compares them
(:func:`canonical_uri`). cryptography is imported only inside the checks, by then loaded by
sigstore.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from updater.errors import VerificationError
from updater.trust.attestation_text import shown

if TYPE_CHECKING:
    from cryptography.x509 import Certificate

GITHUB_ACTIONS_ISSUER = "https://token.actions.githubusercontent.com"
GITHUB_HOSTED = "github-hosted"

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


def check_identity(identity: AttestationIdentity) -> None:
    owner, slash, name = identity.repository.partition("/")
    if not (owner and slash and name) or "/" in name:
        raise VerificationError(
            f"attestation: repository {identity.repository!r} is not 'owner/name'; "
            "cannot tell whose release this is"
        )
    if not identity.signer_workflow or not identity.issuer:
        raise VerificationError("attestation: no signer workflow or issuer to check against")


@dataclass(frozen=True)
class CertificateFacts:
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
        prefix = canonical_uri(identity.repository_uri + "/")
        canonical = canonical_uri(uri)
        return canonical[len(prefix) :] if canonical.startswith(prefix) else uri


class IdentityPolicy:
    """A sigstore-python verification policy checking GitHub's Fulcio identity.

    sigstore calls :meth:`verify` once the certificate chains to the trust root and its SCT
    verifies. It raises mux's own :class:`VerificationError`, worded for the user, which
    sigstore lets through untouched. Owner and repository names compare case-insensitively,
    as GitHub treats them; workflow paths and refs exactly.
    """

    def __init__(self, identity: AttestationIdentity) -> None:
        self.identity = identity
        self.facts: CertificateFacts | None = None

    def verify(self, cert: Certificate) -> None:
        identity = self.identity
        extensions = _fulcio_extensions(cert)

        issuer = _required(extensions, _OID_ISSUER_V2, "OIDC issuer", identity.issuer)
        if issuer != identity.issuer:
            raise VerificationError(
                f"attestation: OIDC issuer is {shown(issuer)}, expected {identity.issuer}"
            )

        repository_uri = _required(
            extensions, _OID_SOURCE_REPOSITORY_URI, "source repository", identity.repository_uri
        )
        if canonical_uri(repository_uri) != canonical_uri(identity.repository_uri):
            raise VerificationError(
                f"attestation: source repository is {shown(repository_uri)}, "
                f"expected {identity.repository_uri}"
            )

        signer_uri = _san_uri(cert)
        build_signer = _required(
            extensions, _OID_BUILD_SIGNER_URI, "build signer URI", signer_uri or "the SAN"
        )
        if signer_uri is None or build_signer != signer_uri:
            raise VerificationError(
                f"attestation: certificate's build signer URI {shown(build_signer)} differs "
                f"from its subject alternative name {shown(signer_uri)}"
            )
        self._check_signer(signer_uri)

        source_ref = extensions.get(_OID_SOURCE_REPOSITORY_REF)
        if identity.ref is not None and source_ref != identity.ref:
            raise VerificationError(
                f"attestation: source ref is {shown(source_ref or 'missing')}, "
                f"expected {identity.ref}"
            )

        runner = extensions.get(_OID_RUNNER_ENVIRONMENT)
        if identity.require_github_hosted_runner and runner != GITHUB_HOSTED:
            raise VerificationError(
                f"attestation: runner environment is {shown(runner or 'missing')}, "
                f"expected {GITHUB_HOSTED}"
            )

        self.facts = CertificateFacts(
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
        if canonical_uri(found_uri) == canonical_uri(expected_uri) and (
            expected_ref is None or found_ref == expected_ref
        ):
            return
        # Name workflows relative to the repository when both live in it: that is the mistake
        # a user can act on ("other.yml@refs/tags/v1, expected release.yml@refs/tags/v2").
        prefix = canonical_uri(self.identity.repository_uri + "/")
        found_canonical, expected_canonical = (
            canonical_uri(found_uri),
            canonical_uri(expected_uri),
        )
        if found_canonical.startswith(prefix) and expected_canonical.startswith(prefix):
            found_uri = found_canonical[len(prefix) :]
            expected_uri = expected_canonical[len(prefix) :]
        raise VerificationError(
            f"attestation: signer workflow is {shown(f'{found_uri}@{found_ref}')}, "
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


def canonical_uri(uri: str) -> str:
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
        raise VerificationError(f"attestation: malformed URI {shown(uri)}") from None
    if (
        "?" in uri
        or "#" in uri
        or "@" in parts.netloc
        or port is not None
        or ":" in parts.netloc
        or not parts.netloc
    ):
        raise VerificationError(
            f"attestation: the URI {shown(uri)} has a query, a fragment, user info or a port "
            "(GitHub's never do)"
        )
    segments = parts.path.split("/")
    # segments[0] is "" (the path starts with "/"); [1] owner, [2] repository.
    head = [segment.lower() for segment in segments[:3]]
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{'/'.join(head + segments[3:])}"
