"""``--trust-key``: a minisign public key, as its base64 line or as the ``.pub`` file's path.

``mux-release keygen`` writes ``<name>.pub``; the user passes its path or its key line, and
either is read here, at the entry point, into the key line every reader takes. Anything else
is a usage error (exit 2) naming what was given, not a "verification failed" (exit 3) found
later, which read as an attack. Stdlib only, on the cached check's path.
"""

from __future__ import annotations

import os

from updater.errors import UsageError, printable
from updater.files import NotReadable, read_small_file

KEY_FILE_LIMIT = 4096  # a .pub file is two short lines
_KEY_BYTES = 42  # "Ed" + an 8-byte key id + a 32-byte Ed25519 key, as minisign writes it
_COMMENT = "untrusted comment:"


def trusted_key(value: str) -> str:
    """The base64 key line ``value`` names: itself, or the key line of the file at that path."""
    shown = printable(value, 100)
    text = value
    if value.endswith(".pub") or os.path.isfile(value):
        try:
            raw = read_small_file(value, KEY_FILE_LIMIT)
        except NotReadable as exc:
            raise UsageError(f"--trust-key {shown}: {exc}", hint=_HINT) from None
        if raw is None:
            raise UsageError(f"--trust-key {shown}: there is no such file", hint=_HINT)
        text = raw.decode("utf-8", "replace")
    line = next(
        (s for s in (ln.strip() for ln in text.splitlines()) if s and not s.startswith(_COMMENT)),
        "",
    )
    if not _is_public_key(line):
        raise UsageError(f"--trust-key {shown}: not a minisign public key", hint=_HINT)
    return line


_HINT = "give the key's base64 line (RW...) or the path of its .pub file (mux-release keygen)"


def _is_public_key(line: str) -> bool:
    # deferred (+0.3 ms, 1 module): only a command given --trust-key decodes a key
    import binascii

    try:
        raw = binascii.a2b_base64(line.encode("ascii"), strict_mode=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        return False
    return len(raw) == _KEY_BYTES and raw[:2] == b"Ed"
