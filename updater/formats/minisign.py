"""minisign public keys and signature checks, byte-compatible with the ``minisign`` 0.11 command.

Formats (jedisct1/minisign ``src/minisign.h``):

* public key: ``untrusted comment: ...`` then base64 of ``"Ed" | key id (8) | Ed25519 key (32)``;
* signature: untrusted comment line, base64 of ``"ED"|"Ed" | key id (8) | signature (64)``,
  ``trusted comment: <text>``, base64 of the global signature over ``signature | text``.
  ``ED`` signs BLAKE2b-512 of the message (prehashed, what releases carry), ``Ed`` the raw
  message.

The client only ever checks signatures: secret keys, key generation and signing live in
:mod:`release.publish.signing`, which the installed mux does not carry. Parsing failures raise
:class:`ParseError` (keys) or :class:`VerificationError` (signatures); :func:`verify` raises
nothing but :class:`VerificationError`. ``cryptography`` is imported only when a signature is
checked.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Sequence
from typing import NamedTuple

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from updater.errors import ParseError, VerificationError

SIG_ALG = b"Ed"  # key algorithm, and the legacy signature algorithm (raw message)
SIG_ALG_HASHED = b"ED"  # prehashed signature: Ed25519 over BLAKE2b-512(message)

UNTRUSTED_PREFIX = "untrusted comment: "
TRUSTED_PREFIX = "trusted comment: "

_PUBLIC_KEY_LEN = 2 + 8 + 32
_SIGNATURE_LEN = 2 + 8 + 64


def format_key_id(key_id: bytes) -> str:
    """The key id as minisign prints it: the little-endian integer in uppercase hex."""
    return f"{int.from_bytes(key_id, 'little'):X}"


def _b64decode(text: str) -> bytes | None:
    try:
        return base64.b64decode(text.strip().encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        return None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _payload_line(text: str) -> str:
    """The first line of a key file that is not a comment (or the whole text when bare)."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith(UNTRUSTED_PREFIX.rstrip()):
            return stripped
    return ""


class PublicKey(NamedTuple):
    key_id_bytes: bytes
    key: bytes  # the raw 32-byte Ed25519 public key

    @classmethod
    def parse(cls, text: str) -> PublicKey:
        """A ``.pub`` file's text, or just its base64 line (what ``minisign -P`` takes)."""
        if not isinstance(text, str):
            raise ParseError("a minisign public key must be text")
        raw = _b64decode(_payload_line(text))
        if raw is None or len(raw) != _PUBLIC_KEY_LEN:
            raise ParseError("not a minisign public key (expected the base64 line of a .pub file)")
        if raw[:2] != SIG_ALG:
            raise ParseError("unsupported minisign public key algorithm")
        return cls(key_id_bytes=raw[2:10], key=raw[10:])

    @property
    def key_id(self) -> str:
        return format_key_id(self.key_id_bytes)

    def to_base64(self) -> str:
        return _b64(SIG_ALG + self.key_id_bytes + self.key)

    def to_file_text(self) -> str:
        return f"{UNTRUSTED_PREFIX}minisign public key {self.key_id}\n{self.to_base64()}\n"


class VerifiedSignature(NamedTuple):
    trusted_comment: str
    key_id: str


class _Signature(NamedTuple):
    algorithm: bytes
    key_id: bytes
    signature: bytes
    trusted_comment: str
    global_signature: bytes


def _parse_signature(signature_file: bytes) -> _Signature:
    malformed = VerificationError("malformed minisign signature")
    try:
        text = signature_file.decode("utf-8")
    except (UnicodeDecodeError, AttributeError):
        raise malformed from None
    lines = [line.rstrip("\r") for line in text.split("\n")]
    if len(lines) < 4 or not lines[0].startswith(UNTRUSTED_PREFIX):
        raise malformed
    if any(line for line in lines[4:]):
        raise malformed
    sig = _b64decode(lines[1])
    if sig is None or len(sig) != _SIGNATURE_LEN or sig[:2] not in (SIG_ALG, SIG_ALG_HASHED):
        raise malformed
    if not lines[2].startswith(TRUSTED_PREFIX):
        raise malformed
    global_sig = _b64decode(lines[3])
    if global_sig is None or len(global_sig) != 64:
        raise malformed
    return _Signature(
        algorithm=sig[:2],
        key_id=sig[2:10],
        signature=sig[10:],
        trusted_comment=lines[2][len(TRUSTED_PREFIX) :],
        global_signature=global_sig,
    )


def _ed25519_valid(public_key: bytes, signature: bytes, message: bytes) -> bool:

    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


def _comment_is_signed(key: PublicKey, sig: _Signature) -> bool:
    """The global signature: ``key`` signed this signature together with its trusted comment."""
    comment = sig.trusted_comment.encode("utf-8")
    return _ed25519_valid(key.key, sig.global_signature, sig.signature + comment)


def verify_trusted_comment(signature_file: bytes, key: PublicKey) -> str:
    """The trusted comment of a ``.minisig``, once its global signature verified with ``key``.

    This proves that ``key`` signed this comment, not that the signature matches any file (the
    file may have changed since): what a signer needs to continue a counter kept in the
    comment. Raises :class:`VerificationError`.
    """
    sig = _parse_signature(signature_file)
    if sig.key_id != key.key_id_bytes:
        raise VerificationError(f"signed by another minisign key {format_key_id(sig.key_id)}")
    if not _comment_is_signed(key, sig):
        raise VerificationError("minisign trusted comment was tampered with")
    return sig.trusted_comment


def verify(message: bytes, signature_file: bytes, keys: Sequence[PublicKey]) -> VerifiedSignature:
    """Check a ``.minisig`` over ``message`` against the trusted ``keys``.

    Both the message signature and the global signature (which authenticates the trusted
    comment) must hold. Raises :class:`VerificationError` with a one-line reason, and
    nothing else.
    """
    sig = _parse_signature(signature_file)
    key = next((k for k in keys if k.key_id_bytes == sig.key_id), None)
    if key is None:
        trusted = ", ".join(k.key_id for k in keys) or "none"
        raise VerificationError(
            f"signed by an untrusted minisign key {format_key_id(sig.key_id)}, not by a "
            f"trusted one ({trusted}): a misconfigured key or tampering",
            hint="compare the key you trust (--trust-key, a mirror's .pub) with the one the "
            "files were signed with (mux-release verify names both); if yours is right, do "
            "not install from this source",
        )
    signed = (
        hashlib.blake2b(message, digest_size=64).digest()
        if sig.algorithm == SIG_ALG_HASHED
        else message
    )
    if not _ed25519_valid(key.key, sig.signature, signed):
        raise VerificationError("minisign signature does not match the file")
    if not _comment_is_signed(key, sig):
        raise VerificationError("minisign trusted comment was tampered with")
    return VerifiedSignature(trusted_comment=sig.trusted_comment, key_id=key.key_id)
