"""minisign secret keys: key generation and signing, byte-compatible with ``minisign`` 0.11.

Release tooling only: the installed mux checks signatures (:mod:`updater.formats.minisign`) and never
holds a secret key. Format of a secret key file (jedisct1/minisign ``src/minisign.h``): an
untrusted comment line, then base64 of ``"Ed" | kdf ("Sc" or 0 0) | "B2" | salt (32) |
opslimit (8, LE) | memlimit (8, LE) | key id (8) | Ed25519 seed+public key (64) | checksum
(32)``, where the last 104 bytes are XORed with scryptsalsa208sha256(password) when ``Sc``.
Signatures are written prehashed (``ED``: Ed25519 over BLAKE2b-512 of the message).
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from updater.errors import MuxError
from updater.formats.minisign import (
    SIG_ALG,
    SIG_ALG_HASHED,
    TRUSTED_PREFIX,
    UNTRUSTED_PREFIX,
    PublicKey,
    _b64,
    _b64decode,
    _payload_line,
    format_key_id,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

KDF_SCRYPT = b"Sc"
KDF_NONE = b"\x00\x00"
CHK_ALG = b"B2"

DEFAULT_SIGNATURE_COMMENT = "signature from minisign secret key"
SECRET_KEY_COMMENT = "minisign encrypted secret key"  # minisign -W writes it too

# libsodium's crypto_pwhash_scryptsalsa208sha256_{OPS,MEM}LIMIT_SENSITIVE: what minisign -G uses.
OPSLIMIT_SENSITIVE = 33554432
MEMLIMIT_SENSITIVE = 1073741824
_MAX_SCRYPT_MEMORY = 2**31 - 1  # hashlib.scrypt's maxmem ceiling (INT_MAX)
TRUSTED_COMMENT_MAX = 8192 - len(TRUSTED_PREFIX) - 2  # minisign's TRUSTEDCOMMENTMAXBYTES

_SECRET_KEY_LEN = 2 + 2 + 2 + 32 + 8 + 8 + 8 + 64 + 32
_KEYNUM_SK_LEN = 8 + 64 + 32  # the encrypted tail: key id, secret key, checksum


class SecretKeyError(MuxError):
    """A minisign secret key cannot be used: malformed, unsupported, or wrong password."""


def scrypt_params(opslimit: int, memlimit: int) -> tuple[int, int, int]:
    """libsodium's ``pickparams``: (opslimit, memlimit) to scrypt's (N, r, p), bit for bit."""
    opslimit = max(opslimit, 32768)
    r = 8
    if opslimit < memlimit // 32:
        p = 1
        max_n = opslimit // (r * 4)
    else:
        max_n = memlimit // (r * 128)
    n_log2 = 1
    while n_log2 < 63 and (1 << n_log2) <= max_n // 2:
        n_log2 += 1
    if opslimit >= memlimit // 32:
        max_rp = min((opslimit // 4) // (1 << n_log2), 0x3FFFFFFF)
        p = max_rp // r
    return 1 << n_log2, r, p


def _scrypt_stream(password: str, salt: bytes, opslimit: int, memlimit: int) -> bytes:
    n, r, p = scrypt_params(opslimit, memlimit)
    needed = 128 * r * (n + 2 + p) + 65536
    if p < 1 or needed > _MAX_SCRYPT_MEMORY:
        raise SecretKeyError("the secret key's password hashing parameters are not supported")
    try:
        return hashlib.scrypt(
            password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=needed, dklen=_KEYNUM_SK_LEN
        )
    except (ValueError, MemoryError) as exc:
        raise SecretKeyError(f"cannot derive the secret key's encryption key ({exc})") from None


def _checksum(key_id: bytes, secret: bytes) -> bytes:
    return hashlib.blake2b(SIG_ALG + key_id + secret, digest_size=32).digest()


def _xor(data: bytes, stream: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(data, stream, strict=True))


@dataclass(frozen=True)
class SecretKey:
    key_id_bytes: bytes
    seed: bytes  # the 32-byte Ed25519 private key
    public_key: PublicKey

    @classmethod
    def parse(cls, data: bytes, password: str | None) -> SecretKey:
        """A secret key file from ``minisign -G`` (encrypted) or ``minisign -G -W`` (not)."""
        try:
            text = data.decode("utf-8")
        except (UnicodeDecodeError, AttributeError):
            raise SecretKeyError("not a minisign secret key (not text)") from None
        raw = _b64decode(_payload_line(text))
        if raw is None or len(raw) != _SECRET_KEY_LEN:
            raise SecretKeyError("not a minisign secret key")
        sig_alg, kdf_alg, chk_alg = raw[0:2], raw[2:4], raw[4:6]
        if sig_alg != SIG_ALG or chk_alg != CHK_ALG or kdf_alg not in (KDF_SCRYPT, KDF_NONE):
            raise SecretKeyError("unsupported minisign secret key algorithm")
        salt = raw[6:38]
        opslimit = int.from_bytes(raw[38:46], "little")
        memlimit = int.from_bytes(raw[46:54], "little")
        keynum_sk = raw[54:]
        if kdf_alg == KDF_SCRYPT:
            if password is None:
                raise SecretKeyError(
                    "the minisign secret key is encrypted and no password was given"
                )
            keynum_sk = _xor(keynum_sk, _scrypt_stream(password, salt, opslimit, memlimit))
        key_id, secret, chk = keynum_sk[:8], keynum_sk[8:72], keynum_sk[72:]
        # minisign -W leaves the checksum zero and never checks it for unencrypted keys.
        if kdf_alg == KDF_SCRYPT and not secrets.compare_digest(chk, _checksum(key_id, secret)):
            raise SecretKeyError("wrong password for the minisign secret key")
        seed, public = secret[:32], secret[32:]
        if _private_key(seed).public_key().public_bytes_raw() != public:
            raise SecretKeyError("the minisign secret key is corrupt (its halves disagree)")
        return cls(key_id_bytes=key_id, seed=seed, public_key=PublicKey(key_id, public))

    @property
    def key_id(self) -> str:
        return format_key_id(self.key_id_bytes)

    def sign(
        self,
        message: bytes,
        trusted_comment: str,
        untrusted_comment: str = DEFAULT_SIGNATURE_COMMENT,
    ) -> bytes:
        """A prehashed (``ED``) ``.minisig`` file for ``message``."""
        for name, comment in (("trusted", trusted_comment), ("untrusted", untrusted_comment)):
            if "\n" in comment or "\r" in comment:
                raise MuxError(f"a minisign {name} comment must be one line")
        if len(trusted_comment.encode("utf-8")) > TRUSTED_COMMENT_MAX:
            raise MuxError("the minisign trusted comment is too long")
        key = _private_key(self.seed)
        signature = key.sign(hashlib.blake2b(message, digest_size=64).digest())
        global_signature = key.sign(signature + trusted_comment.encode("utf-8"))
        return (
            f"{UNTRUSTED_PREFIX}{untrusted_comment}\n"
            f"{_b64(SIG_ALG_HASHED + self.key_id_bytes + signature)}\n"
            f"{TRUSTED_PREFIX}{trusted_comment}\n"
            f"{_b64(global_signature)}\n"
        ).encode()


def _private_key(seed: bytes) -> Ed25519PrivateKey:

    return Ed25519PrivateKey.from_private_bytes(seed)


def generate_keypair(
    password: str | None,
    *,
    opslimit: int = OPSLIMIT_SENSITIVE,
    memlimit: int = MEMLIMIT_SENSITIVE,
) -> tuple[bytes, str]:
    """A new key pair as (secret key file bytes, public key file text), as ``minisign -G``.

    With ``password=None`` the secret key is stored unencrypted, as ``minisign -G -W`` does
    (zero salt, limits and checksum). ``opslimit``/``memlimit`` are stored in the key and
    read back by minisign; lower values only make test keys cheaper to open.
    """
    seed = os.urandom(32)
    key_id = os.urandom(8)
    public = _private_key(seed).public_key().public_bytes_raw()
    secret = seed + public
    if password is None:
        head = SIG_ALG + KDF_NONE + CHK_ALG + bytes(32 + 8 + 8)
        keynum_sk = key_id + secret + bytes(32)
    else:
        salt = os.urandom(32)
        head = (
            SIG_ALG
            + KDF_SCRYPT
            + CHK_ALG
            + salt
            + opslimit.to_bytes(8, "little")
            + memlimit.to_bytes(8, "little")
        )
        plain = key_id + secret + _checksum(key_id, secret)
        keynum_sk = _xor(plain, _scrypt_stream(password, salt, opslimit, memlimit))
    secret_file = f"{UNTRUSTED_PREFIX}{SECRET_KEY_COMMENT}\n{_b64(head + keynum_sk)}\n"
    return secret_file.encode("ascii"), PublicKey(key_id, public).to_file_text()
