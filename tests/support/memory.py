"""An in-memory release source, python-tuf's ``RepositorySimulator`` shape: the releases, their
signed documents, the feed's signed index with its lifecycle records, and the faults a mirror
can serve, all in a dict, behind the interface every source implements
(:class:`updater.sources.base.ReleaseSource`, which is the trust layers'
:class:`updater.trust.source.ReleaseFiles`). Tests drive the library through it in
milliseconds: :func:`updater.trust.pipeline.verify_release_metadata`,
:func:`updater.commands.lifecycle.plan_lifecycle`, the index rules of
:mod:`updater.sources.feed_index`.

Everything is signed for real (minisign, a throwaway key made in this process:
:data:`tests.support.feeds.KEYS`), with the production formats::

    source = MemorySource()
    source.add_release("1.0.0")
    source.add_release("1.1.0", lifecycle={"halted": True})
    source.sign_index()                               # seq 1, valid for a day
    source.fault("v1.0.0", "manifest.json", TRUNCATED)
    source.sign_index(seq=0)                          # rolled back (after seq 1 was seen)
    source.sign_index(expires_in=-60)                 # expired

Faults: :data:`MISSING` (a 404), :data:`TRUNCATED` (the first half of the file),
:data:`WRONG_DIGEST` (one byte changed: the file SHA256SUMS vouches for is not this one).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from release.publish.formats import format_sha256sums, manifest_document
from release.publish.package import trusted_comment_for
from tests.support.feeds import KEYS, TARGET
from tests.support.releases import KeyPair
from updater.errors import NetworkError
from updater.formats import models
from updater.formats.trusted_comments import FEED_SIGNATURE_NAME, IndexComment
from updater.net.download import Downloaded
from updater.net.progress import Progress
from updater.protocol import PROTOCOL_VERSION
from updater.sources.base import SMALL_FILE_LIMIT, ReleaseSource, TagRule
from updater.sources.feed_index import IndexPolicy, VerifiedIndex, verify_feed_index

MISSING, TRUNCATED, WRONG_DIGEST = "missing", "truncated", "wrong digest"
DAY = 24 * 3600


class MemorySource(ReleaseSource):
    """A signed feed held in memory; :attr:`documents` maps a feed path (``releases.json``,
    ``v1.0.0/manifest.json``) to its bytes, :attr:`reads` records every path read."""

    kind = "feed"
    signature_required = True
    attestation_required = False
    attestation_lookup = False

    def __init__(self, *, keypair: KeyPair = KEYS, state_dir: Path | None = None) -> None:
        self.location = "memory://feed"
        self.keypair = keypair
        self.documents: dict[str, bytes] = {}
        self.records: list[dict[str, Any]] = []
        self.reads: list[str] = []
        self._faults: dict[str, str] = {}
        state = state_dir or Path(tempfile.mkdtemp(prefix="mux-memory-state-"))
        self.policy = IndexPolicy(
            keys=(keypair.public_key,), allow_expired=False, state_file=state / "feed-seq"
        )
        self._seq = 0
        self._verified: VerifiedIndex | None = None

    # -- what a publisher does ---------------------------------------------------------------

    def add_release(
        self,
        version: str,
        *,
        protocol: int = PROTOCOL_VERSION,
        prerelease: bool = False,
        released_at: str = "2026-11-20T12:00:00Z",
        signed: bool = True,
        signed_at: int | None = None,
        archive: bytes = b"mux",
        lifecycle: dict[str, Any] | None = None,
    ) -> str:
        """A release's archive, ``manifest.json``, ``SHA256SUMS`` and (``signed``) its
        signature, as mux-release writes them; listed in the next :meth:`sign_index`."""
        tag = models.tag_for(version)
        name = models.archive_name(TARGET)
        asset = models.ManifestAsset(
            name, TARGET, len(archive), hashlib.sha256(archive).hexdigest()
        )
        manifest = models.Manifest(
            name="mux",
            version=version,
            protocol_version=protocol,
            released_at=released_at,
            assets=(asset,),
        )
        raw = json.dumps(manifest_document(manifest)).encode()
        sums = format_sha256sums(
            {models.MANIFEST_NAME: hashlib.sha256(raw).hexdigest(), name: asset.sha256}
        )
        files = {models.MANIFEST_NAME: raw, models.SUMS_NAME: sums, name: archive}
        if signed:
            comment = trusted_comment_for(version, signed_at or int(time.time()))
            signature = self.keypair.secret_key().sign(sums, comment)
            files[models.SUMS_SIGNATURE_NAME] = signature
        self.documents.update({f"{tag}/{file}": data for file, data in files.items()})
        record: dict[str, Any] = {"tag": tag, "prerelease": prerelease}
        if lifecycle is not None:
            record["lifecycle"] = lifecycle
        self.records = [r for r in self.records if r["tag"] != tag] + [record]
        return tag

    def sign_index(self, *, seq: int | None = None, expires_in: int = DAY) -> None:
        """``releases.json`` listing every release added, signed with ``seq`` (the next one
        unless told) and an expiry ``expires_in`` seconds from now (negative: expired)."""
        self._seq = self._seq + 1 if seq is None else seq
        index = json.dumps({"releases": self.records}).encode()
        now = int(time.time())
        comment = IndexComment(timestamp=now, seq=self._seq, expires=now + expires_in).format()
        self.documents[models.FEED_INDEX_NAME] = index
        self.documents[FEED_SIGNATURE_NAME] = self.keypair.secret_key().sign(index, comment)
        self._verified = None

    def fault(self, tag: str, name: str, kind: str) -> None:
        """Serve ``tag``'s ``name`` (``tag`` "" for the feed's own files) with a fault."""
        assert kind in (MISSING, TRUNCATED, WRONG_DIGEST), kind
        self._faults[f"{tag}/{name}" if tag else name] = kind

    # -- what a reader sees (ReleaseSource) --------------------------------------------------

    def _read(self, path: str, max_size: int) -> bytes:
        self.reads.append(path)
        fault = self._faults.get(path)
        if path not in self.documents or fault == MISSING:
            raise NetworkError(f"{self.location}/{path}: HTTP 404", status=404)
        data = self.documents[path]
        if fault == TRUNCATED:
            data = data[: len(data) // 2]
        elif fault == WRONG_DIGEST:
            middle = len(data) // 2
            data = data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1 :]
        if len(data) > max_size:
            raise NetworkError(f"{self.location}/{path} is larger than {max_size} bytes")
        return data

    def verified_index(self) -> VerifiedIndex | None:
        if self._verified is None:
            signature, missing = None, ""
            try:
                signature = self._read(FEED_SIGNATURE_NAME, SMALL_FILE_LIMIT)
            except NetworkError as exc:
                missing = exc.message
            self._verified = verify_feed_index(
                self.location,
                self._read(models.FEED_INDEX_NAME, SMALL_FILE_LIMIT),
                signature,
                self.policy,
                missing_signature=missing,
            )
        return self._verified

    def lifecycle(self) -> Any:
        index = self.verified_index()
        assert index is not None
        return index.lifecycle()

    def latest_tag(self, *, include_pre: bool, parse: TagRule = models.parse_tag) -> str:
        index = self.verified_index()
        assert index is not None
        newest = index.newest(include_pre=include_pre)
        if newest is None:
            raise NetworkError(f"{self.location} lists no release")
        return newest

    def release_page(self, tag: str) -> str:
        return f"{self.location}/{tag}/"

    def file_url(self, tag: str, name: str) -> str:
        return f"{self.location}/{tag}/{name}"

    def read_file(self, tag: str, name: str, *, max_size: int = SMALL_FILE_LIMIT) -> bytes:
        return self._read(f"{tag}/{name}", max_size)

    def download(
        self,
        tag: str,
        name: str,
        into: Path,
        *,
        size: int | None,
        max_size: int,
        progress: Progress | None = None,
    ) -> Downloaded:
        data = self._read(f"{tag}/{name}", max_size)
        with tempfile.NamedTemporaryFile(dir=into, prefix=f".{name}.", delete=False) as handle:
            handle.write(data)
        return Downloaded(Path(handle.name), hashlib.sha256(data).hexdigest(), len(data))
