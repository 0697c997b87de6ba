"""Keys of mux's TUF repository: making one, naming its public half, and signing with one.

Signing goes through securesystemslib's :class:`~securesystemslib.signer.Signer` interface,
so where a private key lives is only a URI:

* ``file2:/path/key.pem``: a PEM (PKCS#8) private key in a file (securesystemslib's
  :class:`~securesystemslib.signer.CryptoSigner`), as ``mux-release tuf keygen`` writes it;
* ``env:NAME``: the same PEM text in the environment variable ``NAME`` (:class:`EnvSigner`,
  registered here: a workflow's secret);
* any other scheme securesystemslib knows (``hsm:``, ``gcpkms:``, ``awskms:``,
  ``azurekms:``, ``hv:``, ``gnupg:``...), written ``KEYID=URI``: its public key is the one the
  repository's metadata lists under that key id. A hardware or KMS key plugs in with no
  change here.

A public key file (``<name>.pub.json``) is securesystemslib's key dictionary plus its
``keyid``; ``mux-release tuf init`` and ``rotate`` read them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.serialization import load_pem_private_key
from securesystemslib.signer import (
    SIGNER_FOR_URI_SCHEME,
    CryptoSigner,
    Key,
    SecretsHandler,
    Signer,
    SSlibKey,
)
from securesystemslib.signer._utils import compute_default_keyid

from updater.errors import MuxError, UsageError

ENV_SCHEME = "env"
_KEYID = re.compile(r"[0-9a-f]{64}")
MAX_KEY_FILE = 64 * 1024


class KeyError_(MuxError):
    """A key cannot be used as given."""


class EnvSigner(Signer):
    """A PEM private key in an environment variable: ``env:NAME``."""

    SCHEME = ENV_SCHEME

    @classmethod
    def from_priv_key_uri(
        cls,
        priv_key_uri: str,
        public_key: Key,
        secrets_handler: SecretsHandler | None = None,
    ) -> Signer:
        scheme, _, name = priv_key_uri.partition(":")
        if scheme != cls.SCHEME or not name:
            raise ValueError(f"EnvSigner does not support {priv_key_uri}")
        text = os.environ.get(name)
        if not text:
            raise ValueError(f"the environment variable {name} is not set")
        private = load_pem_private_key(text.encode(), None)
        if not isinstance(public_key, SSlibKey):
            raise ValueError(f"expected an SSlibKey for {priv_key_uri}")
        return CryptoSigner(private, public_key)

    # EnvSigner only builds a CryptoSigner; these are never reached.
    @property
    def public_key(self) -> Key:  # pragma: no cover
        raise NotImplementedError

    def sign(self, payload: bytes) -> Any:  # pragma: no cover
        raise NotImplementedError


SIGNER_FOR_URI_SCHEME[ENV_SCHEME] = EnvSigner


def generate(out_dir: Path, name: str) -> tuple[Path, Path, Key]:
    """A new Ed25519 key: ``<name>.pem`` (private, 0600) and ``<name>.pub.json`` in
    ``out_dir``; refuses to overwrite either."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", name):
        raise UsageError(f"{name[:70]!r} is not a key name (letters, digits, . _ -)")
    private_path = out_dir / f"{name}.pem"
    public_path = out_dir / f"{name}.pub.json"
    for path in (private_path, public_path):
        if path.exists():
            raise UsageError(f"{path} already exists; not overwriting a key")
    signer = CryptoSigner.generate_ed25519()
    out_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as stream:
        stream.write(signer.private_bytes)
    public_path.write_text(public_key_text(signer.public_key), encoding="utf-8")
    return private_path, public_path, signer.public_key


def public_key_text(key: Key) -> str:
    return json.dumps({"keyid": key.keyid, **key.to_dict()}, indent=2, sort_keys=True) + "\n"


def read_public_key(path: Path) -> Key:
    """A ``<name>.pub.json`` file (securesystemslib's key dictionary and its ``keyid``)."""
    try:
        raw = path.read_bytes()[:MAX_KEY_FILE]
        doc = json.loads(raw)
        keyid = doc.pop("keyid", None)
        key = SSlibKey.from_dict(keyid or "", doc)
    except OSError as exc:
        raise UsageError(f"cannot read the public key {path}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"{path} is not a public key file ({exc})") from None
    # The key id is the key's own digest (TUF's rule); a file that claims another is refused.
    expected = compute_default_keyid(key.keytype, key.scheme, key.keyval)
    if keyid and keyid != expected:
        raise UsageError(f"{path}: its keyid {keyid[:16]}… is not the key's ({expected[:16]}…)")
    return SSlibKey(expected, key.keytype, key.scheme, key.keyval)


def signers_for(uris: Iterable[str], known: Callable[[str], Key | None]) -> list[Signer]:
    """A signer for each key URI (the module docstring); ``known`` finds a public key by its
    id in the repository's metadata, for a URI whose private key cannot say it."""
    signers = []
    for uri in uris:
        keyid, equals, rest = uri.partition("=")
        if equals and _KEYID.fullmatch(keyid):
            public = known(keyid)
            if public is None:
                raise UsageError(f"no role of the repository lists the key {keyid[:16]}…")
            signers.append(_load(rest, public))
            continue
        signers.append(_load(uri, _public_of(uri)))
    return signers


def _public_of(uri: str) -> Key:
    """The public key of a ``file2:`` or ``env:`` private key."""
    scheme, _, rest = uri.partition(":")
    try:
        if scheme == CryptoSigner.SCHEME:
            pem = Path(rest).read_bytes()[:MAX_KEY_FILE]
        elif scheme == ENV_SCHEME:
            text = os.environ.get(rest)
            if not text:
                raise UsageError(f"the environment variable {rest} is not set")
            pem = text.encode()
        else:
            raise UsageError(
                f"{uri[:80]!r}: give a file2:PATH or env:NAME key, or KEYID=URI for a "
                "hardware or KMS key"
            )
        private = load_pem_private_key(pem, None)
    except OSError as exc:
        raise UsageError(f"cannot read the key {rest}: {exc.strerror}") from None
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{uri[:80]!r} is not a PEM private key ({exc})") from None
    return SSlibKey.from_crypto(private.public_key())


def _load(uri: str, public: Key) -> Signer:
    try:
        return Signer.from_priv_key_uri(uri, public)
    except (ValueError, OSError) as exc:
        raise UsageError(f"cannot use the key {uri[:80]!r}: {exc}") from None


def key_index(*groups: Mapping[str, Key]) -> Callable[[str], Key | None]:
    """Look a key id up among the keys of ``groups`` (a root's, a targets' delegations')."""

    def find(keyid: str) -> Key | None:
        for group in groups:
            if keyid in group:
                return group[keyid]
        return None

    return find


class LocalKeys:
    """Every key of a repository made on this machine, in one folder (``mux-release tuf
    keygen --all``, the rehearsal and the tests): three root keys (2 of 3), three targets
    keys (2 of 3), the release workflow's key and the online key (snapshot and timestamp).
    Real keys are made apart, one per keyholder (docs/release.md, "The key ceremony")."""

    ROOT = ("root-1", "root-2", "root-3")
    TARGETS = ("targets-1", "targets-2", "targets-3")
    RELEASE = "release"
    ONLINE = "online"

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    @classmethod
    def generate(cls, folder: Path) -> LocalKeys:
        keys = cls(folder)
        for name in (*cls.ROOT, *cls.TARGETS, cls.RELEASE, cls.ONLINE):
            generate(keys.folder, name)
        return keys

    def public(self, name: str) -> Key:
        return read_public_key(self.folder / f"{name}.pub.json")

    def uri(self, name: str) -> str:
        return f"{CryptoSigner.SCHEME}:{self.folder / f'{name}.pem'}"

    def signers(self, *names: str) -> list[Signer]:
        return signers_for([self.uri(n) for n in names], lambda _keyid: None)
