"""Small signed feeds: a release's documents only (``manifest.json``, ``SHA256SUMS``, its
signature) and ``releases.json`` signed with a sequence number, with no archives: what a
check reads, in milliseconds. :data:`KEYS` signs them unless told; :func:`trusting` is the
``--trust-key`` option a development mux needs to trust it."""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from pathlib import Path

from release.publish.formats import format_sha256sums, manifest_document
from release.publish.package import trusted_comment_for
from tests.support.releases import KeyPair, make_keypair
from updater.config.buildinfo import current
from updater.formats import models
from updater.formats.trusted_comments import IndexComment
from updater.protocol import PROTOCOL_VERSION

# One release key for the feeds of this module (the development mux trusts it through
# --trust-key, as a mirror's users would).
KEYS = make_keypair(Path(tempfile.mkdtemp(prefix="mux-check-keys-")))

TARGET = current().target


def trusting(keypair: KeyPair = KEYS) -> tuple[str, str]:
    return ("--trust-key", keypair.public_key)


def write_release(
    root: Path,
    version: str,
    *,
    protocol: int = PROTOCOL_VERSION,
    keypair: KeyPair | None = KEYS,
    released_at: str = "2026-11-20T12:00:00Z",
) -> Path:
    """A release's small documents: manifest.json, SHA256SUMS listing it and (with a
    ``keypair``) SHA256SUMS.minisig, signed as mux-release signs."""
    folder = root / f"v{version}"
    folder.mkdir(parents=True)
    manifest = models.Manifest(
        name="mux",
        version=version,
        protocol_version=protocol,
        released_at="2026-11-20T12:00:00Z",
        assets=(models.ManifestAsset(models.archive_name(TARGET), TARGET, 3, "ab" * 32),),
    )
    doc = manifest_document(manifest)
    doc["released_at"] = released_at
    raw = json.dumps(doc).encode()
    (folder / "manifest.json").write_bytes(raw)
    sums = format_sha256sums({"manifest.json": hashlib.sha256(raw).hexdigest()})
    (folder / "SHA256SUMS").write_bytes(sums)
    if keypair is not None:
        comment = trusted_comment_for(version, int(time.time()))
        (folder / "SHA256SUMS.minisig").write_bytes(keypair.secret_key().sign(sums, comment))
    return folder


def write_feed(
    root: Path, tags: list[tuple[str, bool]], *, keypair: KeyPair = KEYS, seq: int | None = None
) -> None:
    """``releases.json`` listing ``tags`` (with their human ``prerelease`` flags), signed with
    the next ``seq`` (valid for a day)."""
    doc = {"releases": [{"tag": tag, "prerelease": pre} for tag, pre in tags]}
    index = json.dumps(doc).encode()
    (root / "releases.json").write_bytes(index)
    signature = root / "releases.json.minisig"
    if seq is None:
        seq = (
            int(signature.read_text().split("seq:")[1].split("\t")[0]) + 1
            if signature.exists()
            else 1
        )
    now = int(time.time())
    comment = IndexComment(timestamp=now, seq=seq, expires=now + 86400).format()
    signature.write_bytes(keypair.secret_key().sign(index, comment))
