"""A throwaway Sigstore instance that mints GitHub-style build-provenance attestations offline.

It plays every public-good Sigstore service an ``actions/attest`` run talks to, with keys it
generates itself:

* "Fulcio": a root CA and an intermediate CA (ECDSA P-384) issuing 10-minute leaf
  certificates that carry GitHub's Fulcio extensions (OIDs ``1.3.6.1.4.1.57264.1.*``) and a
  SAN naming the signer workflow;
* a CT log (ECDSA P-256) whose SCT is embedded in every leaf, because sigstore-python
  requires exactly one;
* "Rekor" v1 (ECDSA P-256): a ``dsse/0.0.1`` entry with an inclusion proof, a signed
  checkpoint and a signed entry timestamp (SET), which is the time source sigstore-python
  validates the certificate at;
* a ``trusted_root.json`` naming all of the above, which ``mux update`` accepts through
  ``MUX_SIGSTORE_TRUSTED_ROOT`` (sigstore-python: ``TrustedRoot.from_file``).

The release rehearsal uses it to attest a release the way GitHub would, and the test suite
uses it to mint valid and deliberately wrong attestations. It never touches the network.
The formats (docs/design.md, "A Sigstore instance for tests"): Sigstore bundle v0.3, trusted
root v0.1, RFC 6962 (SCT, Merkle tree), Rekor checkpoints (signed notes) and SETs (RFC 8785).

Each bundle is logged in a one-entry Merkle tree of its own (log index 0, tree size 1): a
real inclusion proof and checkpoint, without keeping a log between bundles.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypedDict, Unpack

import rfc8785
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

from release.publish.package import rehash_sums
from updater.formats import models
from updater.timestamps import rfc3339

GITHUB_URL = "https://github.com"
GITHUB_ACTIONS_ISSUER = "https://token.actions.githubusercontent.com"
SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1"
IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
IN_TOTO_STATEMENT_V1 = "https://in-toto.io/Statement/v1"
GITHUB_WORKFLOW_BUILD_TYPE = "https://actions.github.io/buildtypes/workflow/v1"

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
TRUSTED_ROOT_MEDIA_TYPE = "application/vnd.dev.sigstore.trustedroot+json;version=0.1"
TRUSTED_ROOT_NAME = "trusted_root.json"

# Fulcio's lifetime for GitHub Actions certificates.
LEAF_LIFETIME = timedelta(minutes=10)
# How long before the log entry the certificate was issued (a real run takes a few seconds).
ISSUANCE_LEAD = timedelta(seconds=2)
DEFAULT_VALID_FROM = datetime(2020, 1, 1, tzinfo=UTC)
DEFAULT_LIFETIME = timedelta(days=365 * 30)

_FULCIO_OID_PREFIX = "1.3.6.1.4.1.57264.1."
_SCT_LIST_OID = ObjectIdentifier("1.3.6.1.4.1.11129.2.4.2")

_ROOT_KEY = "fulcio-root.key.pem"
_ROOT_CERT = "fulcio-root.pem"
_INTERMEDIATE_KEY = "fulcio-intermediate.key.pem"
_INTERMEDIATE_CERT = "fulcio-intermediate.pem"
_CT_KEY = "ctlog.key.pem"
_REKOR_KEY = "rekor.key.pem"
_REKOR_ORIGIN = "rekor.fake-sigstore.invalid"


def _fulcio_oid(suffix: int) -> ObjectIdentifier:
    return ObjectIdentifier(f"{_FULCIO_OID_PREFIX}{suffix}")


def _der_length(length: int) -> bytes:
    if length < 0x80:
        return bytes([length])
    encoded = length.to_bytes((length.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(encoded)]) + encoded


def _der_utf8_string(value: str) -> bytes:
    raw = value.encode()
    return b"\x0c" + _der_length(len(raw)) + raw


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _key_id(key: ec.EllipticCurvePublicKey) -> bytes:
    """RFC 6962 key ID: SHA-256 of the SubjectPublicKeyInfo DER."""
    spki = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(spki).digest()


def _rfc3339(when: datetime) -> str:
    return rfc3339(when.timestamp())


def _write_private(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)


def _read_private(path: Path) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{path}: not an EC private key")
    return key


def _ca_certificate(
    *,
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    path_length: int,
    not_before: datetime,
    not_after: datetime,
) -> x509.Certificate:
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        # webpki (cryptography's verifier) rejects a CA whose BasicConstraints is not critical.
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if issuer_key is not key:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA384())


@dataclass(frozen=True)
class GitHubIdentity:
    """What GitHub's OIDC token says about the workflow run, as Fulcio copies it into the leaf."""

    repository: str
    signer_workflow: str
    ref: str
    issuer: str
    runner_environment: str
    commit: str
    github_url: str = GITHUB_URL
    event_name: str = "push"
    repository_id: str = "100000001"
    owner_id: str = "100000002"
    run_id: str = "1"
    visibility: str = "public"

    @property
    def repository_uri(self) -> str:
        return f"{self.github_url}/{self.repository}"

    @property
    def workflow_uri(self) -> str:
        """The signer workflow's URI: the certificate's SAN and build signer URI."""
        if "://" in self.signer_workflow:  # a reusable workflow in another repository
            return (
                self.signer_workflow
                if "@" in self.signer_workflow
                else f"{self.signer_workflow}@{self.ref}"
            )
        return f"{self.repository_uri}/{self.signer_workflow}@{self.ref}"

    def fulcio_extensions(self) -> list[tuple[int, bytes]]:
        """GitHub's Fulcio extensions: 1.1-1.6 hold raw UTF-8, 1.8 and later a DER UTF8String."""
        owner = self.repository.split("/", 1)[0]
        raw = {
            1: self.issuer,
            2: self.event_name,
            3: self.commit,
            4: "release",
            5: self.repository,
            6: self.ref,
        }
        der = {
            8: self.issuer,
            9: self.workflow_uri,
            10: self.commit,
            11: self.runner_environment,
            12: self.repository_uri,
            13: self.commit,
            14: self.ref,
            15: self.repository_id,
            16: f"{self.github_url}/{owner}",
            17: self.owner_id,
            18: self.workflow_uri,
            19: self.commit,
            20: self.event_name,
            21: f"{self.repository_uri}/actions/runs/{self.run_id}/attempts/1",
            22: self.visibility,
        }
        return [(oid, value.encode()) for oid, value in raw.items()] + [
            (oid, _der_utf8_string(value)) for oid, value in der.items()
        ]


class Minting(TypedDict, total=False):
    """What :meth:`FakeSigstore.attest` mints besides its subjects, repository and ref: each
    left out is what GitHub's release workflow gives (:data:`_GENUINE`); a test changes one to
    mint an attestation mux must refuse, or one from a reusable workflow."""

    signer_workflow: str
    issuer: str
    runner_environment: str
    predicate_type: str
    payload_type: str
    statement_type: str
    with_tlog_entry: bool
    signed_at: datetime | None  # None: now
    commit: str | None  # None: a stand-in derived from the repository and ref
    github_url: str


_GENUINE: Minting = {
    "signer_workflow": ".github/workflows/release.yml",
    "issuer": GITHUB_ACTIONS_ISSUER,
    "runner_environment": "github-hosted",
    "predicate_type": SLSA_PROVENANCE_V1,
    "payload_type": IN_TOTO_PAYLOAD_TYPE,
    "statement_type": IN_TOTO_STATEMENT_V1,
    "with_tlog_entry": True,
    "github_url": GITHUB_URL,
}


class FakeSigstore:
    """A private Sigstore instance: CA, CT log and Rekor keys, and the trusted root naming them.

    Create one with :meth:`create` (new keys) or :meth:`load` (keys from an earlier
    :meth:`create`), then :meth:`attest` release files.
    """

    def __init__(
        self,
        directory: Path,
        *,
        root_key: ec.EllipticCurvePrivateKey,
        root_cert: x509.Certificate,
        intermediate_key: ec.EllipticCurvePrivateKey,
        intermediate_cert: x509.Certificate,
        ct_key: ec.EllipticCurvePrivateKey,
        rekor_key: ec.EllipticCurvePrivateKey,
    ) -> None:
        self.directory = directory
        self._root_key = root_key
        self._root_cert = root_cert
        self._intermediate_key = intermediate_key
        self._intermediate_cert = intermediate_cert
        self._ct_key = ct_key
        self._rekor_key = rekor_key

    # -- lifecycle ---------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        directory: Path,
        *,
        valid_from: datetime = DEFAULT_VALID_FROM,
        lifetime: timedelta = DEFAULT_LIFETIME,
    ) -> FakeSigstore:
        """Generate a new instance and persist its keys and ``trusted_root.json`` in ``directory``.

        ``valid_from`` bounds the times bundles can be minted at (and must not lie in the
        future: sigstore-python ignores trust-root entries that are not valid yet). Refuses to
        overwrite an existing instance, whose trusted root someone may have pinned.
        """
        directory.mkdir(parents=True, exist_ok=True)
        if (directory / TRUSTED_ROOT_NAME).exists():
            raise FileExistsError(f"{directory} already holds a Sigstore instance; use load()")
        if valid_from > datetime.now(UTC):
            raise ValueError("valid_from lies in the future; the trusted root would be ignored")
        not_after = valid_from + lifetime

        root_key = ec.generate_private_key(ec.SECP384R1())
        root_name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fake-sigstore.invalid"),
                x509.NameAttribute(NameOID.COMMON_NAME, "fake-sigstore"),
            ]
        )
        root_cert = _ca_certificate(
            subject=root_name,
            key=root_key,
            issuer=root_name,
            issuer_key=root_key,
            path_length=1,
            not_before=valid_from,
            not_after=not_after,
        )
        intermediate_key = ec.generate_private_key(ec.SECP384R1())
        intermediate_cert = _ca_certificate(
            subject=x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fake-sigstore.invalid"),
                    x509.NameAttribute(NameOID.COMMON_NAME, "fake-sigstore-intermediate"),
                ]
            ),
            key=intermediate_key,
            issuer=root_name,
            issuer_key=root_key,
            path_length=0,
            not_before=valid_from,
            not_after=not_after,
        )
        instance = cls(
            directory,
            root_key=root_key,
            root_cert=root_cert,
            intermediate_key=intermediate_key,
            intermediate_cert=intermediate_cert,
            ct_key=ec.generate_private_key(ec.SECP256R1()),
            rekor_key=ec.generate_private_key(ec.SECP256R1()),
        )
        instance._persist()
        return instance

    @classmethod
    def load(cls, directory: Path) -> FakeSigstore:
        """Reopen an instance made by :meth:`create`."""
        return cls(
            directory,
            root_key=_read_private(directory / _ROOT_KEY),
            root_cert=x509.load_pem_x509_certificate((directory / _ROOT_CERT).read_bytes()),
            intermediate_key=_read_private(directory / _INTERMEDIATE_KEY),
            intermediate_cert=x509.load_pem_x509_certificate(
                (directory / _INTERMEDIATE_CERT).read_bytes()
            ),
            ct_key=_read_private(directory / _CT_KEY),
            rekor_key=_read_private(directory / _REKOR_KEY),
        )

    def _persist(self) -> None:
        for name, key in (
            (_ROOT_KEY, self._root_key),
            (_INTERMEDIATE_KEY, self._intermediate_key),
            (_CT_KEY, self._ct_key),
            (_REKOR_KEY, self._rekor_key),
        ):
            _write_private(self.directory / name, key)
        for name, cert in (
            (_ROOT_CERT, self._root_cert),
            (_INTERMEDIATE_CERT, self._intermediate_cert),
        ):
            (self.directory / name).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        # Written last: its presence marks a complete instance.
        text = json.dumps(self.trusted_root(), indent=2) + "\n"
        temporary = self.directory / f".{TRUSTED_ROOT_NAME}.tmp"
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(self.trusted_root_path)

    # -- trust root --------------------------------------------------------------------------

    @property
    def trusted_root_path(self) -> Path:
        return self.directory / TRUSTED_ROOT_NAME

    @property
    def valid_from(self) -> datetime:
        return self._root_cert.not_valid_before_utc

    @property
    def valid_until(self) -> datetime:
        return self._root_cert.not_valid_after_utc

    def _log_key_entry(self, key: ec.EllipticCurvePrivateKey, base_url: str) -> dict[str, Any]:
        public = key.public_key()
        return {
            "baseUrl": base_url,
            "hashAlgorithm": "SHA2_256",
            "publicKey": {
                "rawBytes": _b64(
                    public.public_bytes(
                        serialization.Encoding.DER,
                        serialization.PublicFormat.SubjectPublicKeyInfo,
                    )
                ),
                "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                "validFor": {"start": _rfc3339(self.valid_from)},
            },
            "logId": {"keyId": _b64(_key_id(public))},
        }

    def trusted_root(self) -> dict[str, Any]:
        """The instance's ``trusted_root.json`` document (Sigstore trusted root v0.1)."""
        return {
            "mediaType": TRUSTED_ROOT_MEDIA_TYPE,
            # Never contacted: bundles carry their own proofs. The .invalid TLD guarantees it.
            "tlogs": [self._log_key_entry(self._rekor_key, f"https://{_REKOR_ORIGIN}")],
            "certificateAuthorities": [
                {
                    "subject": {
                        "organization": "fake-sigstore.invalid",
                        "commonName": "fake-sigstore",
                    },
                    "uri": "https://fulcio.fake-sigstore.invalid",
                    "certChain": {
                        # Leaf-most first, as in Sigstore's own trusted roots.
                        "certificates": [
                            {"rawBytes": _b64(cert.public_bytes(serialization.Encoding.DER))}
                            for cert in (self._intermediate_cert, self._root_cert)
                        ]
                    },
                    "validFor": {"start": _rfc3339(self.valid_from)},
                }
            ],
            "ctlogs": [self._log_key_entry(self._ct_key, "https://ctfe.fake-sigstore.invalid")],
            "timestampAuthorities": [],
        }

    # -- minting -----------------------------------------------------------------------------

    def attest(
        self, subjects: Mapping[str, str], *, repository: str, ref: str, **how: Unpack[Minting]
    ) -> bytes:
        """Attest ``subjects`` (file name -> sha256 hex) as ``actions/attest`` would; ``how``
        changes what GitHub's release workflow would mint (:class:`Minting`).

        Returns the Sigstore bundle (v0.3 JSON) of one in-toto statement listing every subject,
        signed by a fresh leaf certificate for the workflow ``signer_workflow`` of
        ``repository`` ("owner/name") run at ``ref``. A full URI as ``signer_workflow``
        (``https://github.com/org/shared/.github/workflows/attest.yml@v1``) names a reusable
        workflow in another repository, as GitHub's certificates do. ``with_tlog_entry=False`` mints what
        GitHub's private Sigstore instance produces: no transparency-log entry (and, here, no
        timestamp either). ``signed_at`` defaults to now; the certificate is valid for ten
        minutes around it and the log's integrated time is exactly ``signed_at``. ``commit``,
        the source commit the certificate records, defaults to a stand-in derived from
        ``repository`` and ``ref``.
        """
        unknown = sorted(set(how) - Minting.__optional_keys__)
        if unknown:  # misspelt: an error, as an unknown keyword argument is
            raise TypeError(f"attest() got unexpected keyword arguments: {', '.join(unknown)}")
        minted = _GENUINE | how
        signer_workflow, signed_at = minted["signer_workflow"], minted.get("signed_at")
        predicate_type, payload_type = minted["predicate_type"], minted["payload_type"]
        when = (signed_at or datetime.now(UTC)).astimezone(UTC).replace(microsecond=0)
        issued = when - ISSUANCE_LEAD
        if not (self.valid_from <= issued and when + LEAF_LIFETIME <= self.valid_until):
            raise ValueError(
                f"signed_at {_rfc3339(when)} is outside the instance's validity "
                f"({_rfc3339(self.valid_from)} to {_rfc3339(self.valid_until)})"
            )
        identity = GitHubIdentity(
            repository=repository,
            signer_workflow=signer_workflow,
            ref=ref,
            issuer=minted["issuer"],
            runner_environment=minted["runner_environment"],
            commit=minted.get("commit") or hashlib.sha1(f"{repository}@{ref}".encode()).hexdigest(),
            github_url=minted["github_url"],
        )
        statement = _provenance_statement(
            subjects, identity, predicate_type, minted["statement_type"]
        )
        payload = json.dumps(statement, separators=(",", ":")).encode()

        leaf_key = ec.generate_private_key(ec.SECP256R1())
        leaf_cert = self._issue_leaf(leaf_key, identity, issued)
        signature = leaf_key.sign(_pae(payload_type, payload), ec.ECDSA(hashes.SHA256()))
        envelope = {
            "payload": _b64(payload),
            "payloadType": payload_type,
            "signatures": [{"sig": _b64(signature)}],
        }
        material: dict[str, Any] = {
            "certificate": {"rawBytes": _b64(leaf_cert.public_bytes(serialization.Encoding.DER))},
            "timestampVerificationData": {},
        }
        if minted["with_tlog_entry"]:
            material["tlogEntries"] = [
                self._log_entry(envelope, payload, signature, leaf_cert, when)
            ]
        bundle = {
            "mediaType": BUNDLE_MEDIA_TYPE,
            "verificationMaterial": material,
            "dsseEnvelope": envelope,
        }
        return (json.dumps(bundle, indent=2) + "\n").encode()

    def attest_release(self, release_dir: Path, version: str, *, repository: str) -> Path:
        """Attest a release folder as the release workflow does, for ``refs/tags/v<version>``
        of ``repository``: the subjects are exactly the files its ``SHA256SUMS`` lists at this
        point (docs/contracts.md), under their names and digests there. Writes the bundle next
        to them, lists it in ``SHA256SUMS`` (rehashed) and returns its path. Signing is left to
        the caller."""
        subjects = models.parse_sha256sums((release_dir / models.SUMS_NAME).read_bytes())
        bundle = release_dir / models.attestation_name(version)
        bundle.write_bytes(
            self.attest(subjects, repository=repository, ref=f"refs/tags/v{version}")
        )
        rehash_sums(release_dir)
        return bundle

    def _issue_leaf(
        self, leaf_key: ec.EllipticCurvePrivateKey, identity: GitHubIdentity, issued: datetime
    ) -> x509.Certificate:
        """Issue a Fulcio-style leaf with one embedded SCT (two passes, RFC 6962 §3.1)."""
        serial = x509.random_serial_number()
        sct_time_ms = int(issued.timestamp() * 1000)

        def build(sct_list: bytes) -> x509.Certificate:
            builder = (
                x509.CertificateBuilder()
                # Fulcio leaves have an empty subject; the identity lives in the SAN.
                .subject_name(x509.Name([]))
                .issuer_name(self._intermediate_cert.subject)
                .public_key(leaf_key.public_key())
                .serial_number(serial)
                .not_valid_before(issued)
                .not_valid_after(issued + LEAF_LIFETIME)
                .add_extension(
                    x509.KeyUsage(
                        digital_signature=True,
                        content_commitment=False,
                        key_encipherment=False,
                        data_encipherment=False,
                        key_agreement=False,
                        key_cert_sign=False,
                        crl_sign=False,
                        encipher_only=False,
                        decipher_only=False,
                    ),
                    critical=True,
                )
                .add_extension(
                    x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False
                )
                .add_extension(
                    x509.SubjectKeyIdentifier.from_public_key(leaf_key.public_key()),
                    critical=False,
                )
                .add_extension(
                    x509.AuthorityKeyIdentifier.from_issuer_public_key(
                        self._intermediate_key.public_key()
                    ),
                    critical=False,
                )
                # Critical because the subject is empty (RFC 5280 §4.2.1.6; webpki enforces it).
                .add_extension(
                    x509.SubjectAlternativeName(
                        [x509.UniformResourceIdentifier(identity.workflow_uri)]
                    ),
                    critical=True,
                )
            )
            for suffix, value in identity.fulcio_extensions():
                builder = builder.add_extension(
                    x509.UnrecognizedExtension(_fulcio_oid(suffix), value), critical=False
                )
            builder = builder.add_extension(
                x509.UnrecognizedExtension(_SCT_LIST_OID, sct_list), critical=False
            )
            return builder.sign(self._intermediate_key, hashes.SHA384())

        # Pass 1: any well-formed SCT list, only to learn the precertificate TBS bytes, which
        # exclude the SCT extension and are what the CT log signs.
        placeholder = build(_sct_list_extension(b"\x00" * 32, sct_time_ms, b"\x30\x00"))
        precert_tbs = placeholder.tbs_precertificate_bytes
        signed_data = (
            struct.pack(">BBQH", 0, 0, sct_time_ms, 1)  # v1, certificate_timestamp, precert_entry
            + _key_id(self._intermediate_key.public_key())
            + len(precert_tbs).to_bytes(3, "big")
            + precert_tbs
            + struct.pack(">H", 0)  # no CT extensions
        )
        sct_signature = self._ct_key.sign(signed_data, ec.ECDSA(hashes.SHA256()))
        # Pass 2: same serial, validity, key and extension order; only the SCT changes.
        leaf = build(
            _sct_list_extension(_key_id(self._ct_key.public_key()), sct_time_ms, sct_signature)
        )
        if leaf.tbs_precertificate_bytes != precert_tbs:
            raise AssertionError("leaf precertificate changed between passes; SCT would not verify")
        return leaf

    def _log_entry(
        self,
        envelope: Mapping[str, Any],
        payload: bytes,
        signature: bytes,
        leaf_cert: x509.Certificate,
        integrated: datetime,
    ) -> dict[str, Any]:
        """A Rekor v1 ``dsse/0.0.1`` entry in a one-leaf tree, with checkpoint and SET."""
        body = rfc8785.dumps(
            {
                "apiVersion": "0.0.1",
                "kind": "dsse",
                "spec": {
                    "envelopeHash": {
                        "algorithm": "sha256",
                        "value": hashlib.sha256(rfc8785.dumps(dict(envelope))).hexdigest(),
                    },
                    "payloadHash": {
                        "algorithm": "sha256",
                        "value": hashlib.sha256(payload).hexdigest(),
                    },
                    "signatures": [
                        {
                            "signature": _b64(signature),
                            "verifier": _b64(leaf_cert.public_bytes(serialization.Encoding.PEM)),
                        }
                    ],
                },
            }
        )
        log_id = _key_id(self._rekor_key.public_key())
        log_index = 0
        tree_size = 1
        # RFC 6962 §2.1: the root of a one-leaf tree is the leaf hash; the proof is empty.
        root_hash = hashlib.sha256(b"\x00" + body).digest()
        integrated_time = int(integrated.timestamp())
        note = f"{_REKOR_ORIGIN} - 1\n{tree_size}\n{_b64(root_hash)}\n"
        note_signature = self._rekor_key.sign(note.encode(), ec.ECDSA(hashes.SHA256()))
        # Signed note: the key hint is the first four bytes of the log ID.
        checkpoint = f"{note}\n\u2014 {_REKOR_ORIGIN} {_b64(log_id[:4] + note_signature)}\n"
        set_payload = rfc8785.dumps(
            {
                "body": _b64(body),
                "integratedTime": integrated_time,
                "logID": log_id.hex(),
                "logIndex": log_index,
            }
        )
        signed_entry_timestamp = self._rekor_key.sign(set_payload, ec.ECDSA(hashes.SHA256()))
        return {
            "logIndex": str(log_index),
            "logId": {"keyId": _b64(log_id)},
            "kindVersion": {"kind": "dsse", "version": "0.0.1"},
            "integratedTime": str(integrated_time),
            "inclusionPromise": {"signedEntryTimestamp": _b64(signed_entry_timestamp)},
            "inclusionProof": {
                "logIndex": str(log_index),
                "rootHash": _b64(root_hash),
                "treeSize": str(tree_size),
                "hashes": [],
                "checkpoint": {"envelope": checkpoint},
            },
            "canonicalizedBody": _b64(body),
        }


def _pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: what the signature covers."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def _sct_list_extension(log_id: bytes, timestamp_ms: int, signature: bytes) -> bytes:
    """The SCT list extension value: an OCTET STRING around one TLS-encoded v1 SCT."""
    sct = (
        struct.pack(">B", 0)
        + log_id
        + struct.pack(">QH", timestamp_ms, 0)
        + struct.pack(">BBH", 4, 3, len(signature))  # sha256, ecdsa
        + signature
    )
    sct_list = struct.pack(">HH", len(sct) + 2, len(sct)) + sct
    return b"\x04" + _der_length(len(sct_list)) + sct_list


def _provenance_statement(
    subjects: Mapping[str, str],
    identity: GitHubIdentity,
    predicate_type: str,
    statement_type: str,
) -> dict[str, Any]:
    """An in-toto statement with the SLSA provenance ``actions/attest`` generates."""
    return {
        "_type": statement_type,
        "subject": [
            {"name": name, "digest": {"sha256": digest}} for name, digest in subjects.items()
        ],
        "predicateType": predicate_type,
        "predicate": {
            "buildDefinition": {
                "buildType": GITHUB_WORKFLOW_BUILD_TYPE,
                "externalParameters": {
                    "workflow": {
                        "ref": identity.ref,
                        "repository": identity.repository_uri,
                        "path": identity.signer_workflow,
                    }
                },
                "internalParameters": {
                    "github": {
                        "event_name": identity.event_name,
                        "repository_id": identity.repository_id,
                        "repository_owner_id": identity.owner_id,
                        "runner_environment": identity.runner_environment,
                    }
                },
                "resolvedDependencies": [
                    {
                        "uri": f"git+{identity.repository_uri}@{identity.ref}",
                        "digest": {"gitCommit": identity.commit},
                    }
                ],
            },
            "runDetails": {
                "builder": {"id": identity.workflow_uri},
                "metadata": {
                    "invocationId": (
                        f"{identity.repository_uri}/actions/runs/{identity.run_id}/attempts/1"
                    )
                },
            },
        },
    }
