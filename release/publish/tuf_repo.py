"""mux's TUF repository: made, extended with each release, signed, rotated, kept fresh.

The repository lives in a folder's ``metadata/`` (the feed's, on GitHub Pages), published as
it is; versions that still need signatures wait in ``staged/`` beside it, never published
(docs/contracts.md, "TUF repository"; docs/release.md, "The key ceremony"):

* ``root`` (offline keys, a threshold: 2 of 3) names every role's keys and threshold;
  every version stays published as ``<N>.root.json`` (a client follows them in order), the
  newest also as ``root.json``;
* ``targets`` (offline keys, a threshold) lists no file itself: it delegates the paths
  ``v*/*`` (one release's files, nothing else) to ``release-workflow``;
* ``release-workflow`` (the release workflow's online key) lists every release file as a
  target ``<tag>/<name>`` with its length, sha256 and ``custom.mux`` facts
  (:func:`release_targets`);
* ``snapshot`` and ``timestamp`` (the feed workflow's online key): the snapshot pins the
  version, length and hash of ``targets`` and ``release-workflow``, the timestamp those of
  the snapshot; the timestamp expires within a day and is re-signed on a schedule.

Consistent snapshots are on: every document but ``timestamp.json`` is published under its
version (``<N>.<role>.json``) and never rewritten, so a mirror or CDN half-way through a sync
serves an old whole or a new whole, never a mixture, and may cache every file but one for
good. Release files are named by their tag folder, which never changes once published
(:func:`add_release` refuses other bytes under a listed tag), so they need no hash prefix:
that is what lets GitHub's release assets (which cannot carry one) be the targets.

A role whose threshold the signers given do not meet is written to ``staged/`` and published
by :func:`sign` once enough keyholders signed it. Signing goes through securesystemslib's
signer interface (:mod:`release.publish.tuf_keys`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

from securesystemslib.signer import Key, Signer
from tuf.api.exceptions import UnsignedMetadataError
from tuf.api.metadata import (
    DelegatedRole,
    Delegations,
    Metadata,
    MetaFile,
    Root,
    Snapshot,
    TargetFile,
    Targets,
    Timestamp,
)
from tuf.api.serialization.json import JSONSerializer

from release.publish.feed_folder import manifest_released_at
from release.publish.tuf_keys import LocalKeys
from updater.errors import MuxError, ParseError, UsageError, VerificationError
from updater.files import atomic_write
from updater.formats import models
from updater.formats.lifecycle import format_time

METADATA_DIR = models.TUF_METADATA_DIR
STAGED_DIR = "staged"
RELEASE_ROLE = "release-workflow"
RELEASE_PATHS = ["v*/*"]  # one release's files, and nothing else
TOP_LEVEL = (Root.type, Targets.type, Snapshot.type, Timestamp.type)
DAY = 24 * 3600
EXPIRES = {
    Root.type: 365 * DAY,
    Targets.type: 365 * DAY,
    RELEASE_ROLE: 365 * DAY,
    Snapshot.type: 7 * DAY,
    Timestamp.type: DAY,
}
MAX_TIMESTAMP_EXPIRY = DAY  # the bound: a freeze is caught within a day
KEEP_VERSIONS = 10  # of snapshot, targets and release-workflow (every root is kept)
PUBLISHED = "published"


class TufRepoError(MuxError):
    """The repository cannot be changed as asked."""


class IndexSeq(NamedTuple):
    """The feed index's sequence floor as the timestamp role records it
    (``custom.mux.index``): the minisign key that signed ``releases.json`` and the ``seq``
    it signed. ``mux-release feed`` continues from it when the index itself was lost
    (:func:`signed_state`); a seq belongs to its key (clients count per key id)."""

    key_id: str
    seq: int


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _serialize(md: Metadata[Any]) -> bytes:
    return md.to_bytes(JSONSerializer(compact=False)) + b"\n"


@dataclass
class Repository:
    """A repository folder: ``metadata/`` (published) and ``staged/`` (being signed)."""

    folder: Path
    now: datetime = field(default_factory=_now)

    @property
    def metadata(self) -> Path:
        return self.folder / METADATA_DIR

    @property
    def staged(self) -> Path:
        return self.folder / STAGED_DIR

    # -- reading -------------------------------------------------------------------------

    def _read(self, path: Path) -> Metadata[Any]:
        try:
            return Metadata.from_bytes(path.read_bytes())
        except FileNotFoundError:
            raise TufRepoError(
                f"{path} does not exist", hint="create the repository with mux-release tuf init"
            ) from None
        except (ValueError, KeyError, TypeError) as exc:
            raise TufRepoError(f"{path} is not TUF metadata: {exc}") from None

    def root_versions(self) -> list[int]:
        versions = []
        for path in self.metadata.glob("*.root.json"):
            head = path.name.split(".", 1)[0]
            if head.isdigit():
                versions.append(int(head))
        return sorted(versions)

    def root(self) -> Metadata[Root]:
        versions = self.root_versions()
        if not versions:
            raise TufRepoError(
                f"{self.metadata} holds no root",
                hint="create the repository with mux-release tuf init",
            )
        return self._read(self.metadata / f"{versions[-1]}.root.json")

    def timestamp(self) -> Metadata[Timestamp]:
        return self._read(self.metadata / "timestamp.json")

    def snapshot(self) -> Metadata[Snapshot]:
        version = self.timestamp().signed.snapshot_meta.version
        return self._read(self.metadata / f"{version}.snapshot.json")

    def targets(self, role: str = Targets.type) -> Metadata[Targets]:
        """The newest published version of a targets role (the snapshot's, or a newer one
        published since and not yet in a snapshot)."""
        try:
            versions = [self.snapshot().signed.meta[f"{role}.json"].version]
        except TufRepoError:  # no snapshot yet: a repository still being signed
            versions = []
        for path in self.metadata.glob(f"*.{role}.json"):
            head = path.name.split(".", 1)[0]
            if head.isdigit() and path.name == f"{head}.{role}.json":
                versions.append(int(head))
        if not versions:
            raise TufRepoError(f"{self.metadata} has no published {role}")
        return self._read(self.metadata / f"{max(versions)}.{role}.json")

    def keys_by_id(self) -> dict[str, Key]:
        root = self.root().signed
        keys = dict(root.keys)
        try:
            delegations = self.targets().signed.delegations
        except TufRepoError:  # targets v1 still waits for its signatures
            delegations = None
        if delegations is not None:
            keys.update(delegations.keys)
        return keys

    # -- writing -------------------------------------------------------------------------

    def publish(self, role: str, md: Metadata[Any]) -> Path:
        """Write a verified version of ``role`` into ``metadata/`` (consistent snapshots)."""
        self.metadata.mkdir(parents=True, exist_ok=True)
        data = _serialize(md)
        if role == Timestamp.type:
            path = self.metadata / "timestamp.json"
        else:
            path = self.metadata / f"{md.signed.version}.{role}.json"
            if path.exists() and path.read_bytes() != data:
                raise TufRepoError(
                    f"{path} is already published with other content; a published version "
                    "is never rewritten"
                )
        atomic_write(path, data, mode=0o644)
        if role == Root.type:
            atomic_write(self.metadata / "root.json", data, mode=0o644)
        else:
            self._prune(role)
        (self.staged / f"{role}.json").unlink(missing_ok=True)
        return path

    def stage(self, role: str, md: Metadata[Any]) -> Path:
        self.staged.mkdir(parents=True, exist_ok=True)
        path = self.staged / f"{role}.json"
        atomic_write(path, _serialize(md), mode=0o644)
        return path

    def staged_version(self, role: str) -> Metadata[Any] | None:
        path = self.staged / f"{role}.json"
        return self._read(path) if path.exists() else None

    def _prune(self, role: str) -> None:
        if role == Timestamp.type:
            return
        versions = sorted(
            int(p.name.split(".", 1)[0])
            for p in self.metadata.glob(f"*.{role}.json")
            if p.name.split(".", 1)[0].isdigit()
        )
        for version in versions[:-KEEP_VERSIONS]:
            (self.metadata / f"{version}.{role}.json").unlink(missing_ok=True)

    def expiry(self, role: str, seconds: int | None = None) -> datetime:
        return self.now + timedelta(seconds=EXPIRES[role] if seconds is None else seconds)


# -- signatures ---------------------------------------------------------------------------


def _sign(md: Metadata[Any], signers: Iterable[Signer], allowed: Iterable[str]) -> list[str]:
    """Sign ``md`` with each signer whose key may sign it; the key ids that signed."""
    allowed = set(allowed)
    used = []
    for signer in signers:
        keyid = signer.public_key.keyid
        if keyid in allowed and keyid not in md.signatures:
            md.sign(signer, append=True)
            used.append(keyid)
    return used


def _root_verified(md: Metadata[Root], previous: Root | None) -> bool:
    result = md.signed.get_root_verification_result(previous, md.signed_bytes, md.signatures)
    return result.verified


def _targets_verified(md: Metadata[Targets], root: Root, role: str = Targets.type) -> bool:
    return root.get_verification_result(role, md.signed_bytes, md.signatures).verified


def _missing(md: Metadata[Any], delegator: Any, role: str) -> str:
    result = delegator.get_verification_result(role, md.signed_bytes, md.signatures)
    return f"{len(result.signed)} of {result.threshold} signatures of {role}'s keys"


# -- the repository's life ------------------------------------------------------------------


@dataclass(frozen=True)
class Keys:
    """Who holds which key (public halves) when a repository is made."""

    root: Sequence[Key]
    root_threshold: int
    targets: Sequence[Key]
    targets_threshold: int
    online: Key  # snapshot and timestamp
    release: Sequence[Key]  # the release workflow's (release-workflow)
    release_threshold: int = 1


def create(
    folder: Path, keys: Keys, signers: Sequence[Signer], *, now: datetime | None = None
) -> list[str]:
    """A new repository in ``folder`` (its ``metadata/`` must not exist): root v1, targets v1
    delegating ``v*/*``, an empty release-workflow v1, snapshot v1, timestamp v1. Roles the
    given signers cannot sign to their threshold are staged. What was done, line by line."""
    repo = Repository(Path(folder), now or _now())
    if repo.root_versions():
        raise TufRepoError(f"{repo.metadata} already holds a repository")
    for what, group, threshold in (
        ("root", keys.root, keys.root_threshold),
        ("targets", keys.targets, keys.targets_threshold),
        (RELEASE_ROLE, keys.release, keys.release_threshold),
    ):
        if not 1 <= threshold <= len({k.keyid for k in group}):
            raise UsageError(
                f"{what}: a threshold of {threshold} needs at least that many distinct keys"
            )
    root = Root(expires=repo.expiry(Root.type), consistent_snapshot=True)
    for key in keys.root:
        root.add_key(key, Root.type)
    for key in keys.targets:
        root.add_key(key, Targets.type)
    root.add_key(keys.online, Snapshot.type)
    root.add_key(keys.online, Timestamp.type)
    root.roles[Root.type].threshold = keys.root_threshold
    root.roles[Targets.type].threshold = keys.targets_threshold

    delegated = DelegatedRole(
        name=RELEASE_ROLE,
        keyids=[k.keyid for k in keys.release],
        threshold=keys.release_threshold,
        terminating=True,
        paths=list(RELEASE_PATHS),
    )
    top = Targets(expires=repo.expiry(Targets.type))
    top.delegations = Delegations(
        keys={k.keyid: k for k in keys.release}, roles={RELEASE_ROLE: delegated}
    )
    releases = Targets(expires=repo.expiry(RELEASE_ROLE))

    lines = []
    root_md = Metadata(root)
    _sign(root_md, signers, root.roles[Root.type].keyids)
    top_md = Metadata(top)
    _sign(top_md, signers, root.roles[Targets.type].keyids)
    rel_md = Metadata(releases)
    _sign(rel_md, signers, delegated.keyids)
    if not _root_verified(root_md, None):
        repo.stage(Root.type, root_md)
        repo.stage(Targets.type, top_md)
        repo.stage(RELEASE_ROLE, rel_md)
        lines.append(
            f"root v1 staged in {repo.staged}: {_missing(root_md, root, Root.type)}; "
            "each keyholder signs it with mux-release tuf sign"
        )
        return lines
    repo.publish(Root.type, root_md)
    lines.append(f"root v1 published ({keys.root_threshold} of {len(keys.root)} keys)")
    for role, md in ((Targets.type, top_md), (RELEASE_ROLE, rel_md)):
        delegator: Any = root if role == Targets.type else top
        if not delegator.get_verification_result(role, md.signed_bytes, md.signatures).verified:
            repo.stage(role, md)
            lines.append(f"{role} v1 staged: {_missing(md, delegator, role)}")
            return lines
        repo.publish(role, md)
        lines.append(f"{role} v1 published")
    lines += _snapshot_and_timestamp(repo, signers)
    return lines


def create_local(folder: Path, keys: LocalKeys, *, now: datetime | None = None) -> list[str]:
    """A repository signed with keys all made on this machine (:class:`LocalKeys`: the
    rehearsal's and the tests'): root 2 of 3, targets 2 of 3, the release key, the online
    key, every role signed at once."""
    every = (*keys.ROOT, *keys.TARGETS, keys.RELEASE, keys.ONLINE)
    return create(
        folder,
        Keys(
            root=[keys.public(n) for n in keys.ROOT],
            root_threshold=2,
            targets=[keys.public(n) for n in keys.TARGETS],
            targets_threshold=2,
            online=keys.public(keys.ONLINE),
            release=[keys.public(keys.RELEASE)],
        ),
        keys.signers(*every),
        now=now,
    )


def _meta(md: Metadata[Any]) -> MetaFile:
    data = _serialize(md)
    return MetaFile(
        version=md.signed.version,
        length=len(data),
        hashes={"sha256": hashlib.sha256(data).hexdigest()},
    )


def index_seq(timestamp: Timestamp) -> IndexSeq | None:
    """The feed index's seq a timestamp records (None: it records none, or not as written
    here)."""
    custom = timestamp.unrecognized_fields.get("custom")
    mux = custom.get("mux") if isinstance(custom, dict) else None
    index = mux.get("index") if isinstance(mux, dict) else None
    if not isinstance(index, dict):
        return None
    key_id, seq = index.get("key_id"), index.get("seq")
    if not isinstance(key_id, str) or type(seq) is not int or seq < 0:
        return None
    return IndexSeq(key_id, seq)


def _snapshot_and_timestamp(
    repo: Repository,
    signers: Sequence[Signer],
    *,
    timestamp_expires_in: int | None = None,
    snapshot_expires_in: int | None = None,
    index: IndexSeq | None = None,
) -> list[str]:
    """A new snapshot when a targets role changed (or the current one expires before the new
    timestamp would), then a new timestamp: both signed with the online key. The timestamp
    records ``index`` (the feed index's seq just signed), else what the one it replaces
    recorded."""
    root = repo.root().signed
    if timestamp_expires_in is not None and timestamp_expires_in > MAX_TIMESTAMP_EXPIRY:
        raise UsageError("a timestamp expires within 24 hours (a freeze is caught within a day)")
    lines = []
    current = {role: _newest_published(repo, role) for role in (Targets.type, RELEASE_ROLE)}
    timestamp_expiry = repo.expiry(Timestamp.type, timestamp_expires_in)
    try:
        old_snapshot: Metadata[Snapshot] | None = repo.snapshot()
    except TufRepoError:
        old_snapshot = None
    wanted = {f"{role}.json": _meta(md) for role, md in current.items()}
    stale = (
        old_snapshot is None
        or any(old_snapshot.signed.meta.get(name) != meta for name, meta in wanted.items())
        or old_snapshot.signed.expires <= timestamp_expiry
        # a rotated snapshot key: the current one no longer verifies under the newest root
        or not root.get_verification_result(
            Snapshot.type, old_snapshot.signed_bytes, old_snapshot.signatures
        ).verified
    )
    if stale:
        version = 1 if old_snapshot is None else old_snapshot.signed.version + 1
        snapshot = Snapshot(
            version=version,
            expires=repo.expiry(Snapshot.type, snapshot_expires_in),
            meta=wanted,
        )
        snapshot_md = Metadata(snapshot)
        if not _sign(snapshot_md, signers, root.roles[Snapshot.type].keyids):
            raise TufRepoError(
                "no online key of the snapshot role was given (--online-private-key)"
            )
        repo.publish(Snapshot.type, snapshot_md)
        lines.append(f"snapshot v{version} published (expires {snapshot.expires:%Y-%m-%d %H:%M}Z)")
    else:
        assert old_snapshot is not None
        snapshot_md = old_snapshot
    try:
        old_timestamp: Timestamp | None = repo.timestamp().signed
    except TufRepoError:
        old_timestamp = None
    timestamp = Timestamp(
        version=1 if old_timestamp is None else old_timestamp.version + 1,
        expires=timestamp_expiry,
        snapshot_meta=_meta(snapshot_md),
    )
    index = index or (None if old_timestamp is None else index_seq(old_timestamp))
    if index is not None:
        timestamp.unrecognized_fields["custom"] = {
            "mux": {"index": {"key_id": index.key_id, "seq": index.seq}}
        }
    timestamp_md = Metadata(timestamp)
    if not _sign(timestamp_md, signers, root.roles[Timestamp.type].keyids):
        raise TufRepoError("no online key of the timestamp role was given (--online-private-key)")
    repo.publish(Timestamp.type, timestamp_md)
    lines.append(
        f"timestamp v{timestamp.version} published (snapshot v{snapshot_md.signed.version}, "
        f"expires {timestamp.expires:%Y-%m-%d %H:%M}Z)"
    )
    return lines


def _newest_published(repo: Repository, role: str) -> Metadata[Targets]:
    versions = sorted(
        int(p.name.split(".", 1)[0])
        for p in repo.metadata.glob(f"*.{role}.json")
        if p.name.split(".", 1)[0].isdigit()
    )
    if not versions:
        raise TufRepoError(f"{repo.metadata} has no published {role}")
    return repo._read(repo.metadata / f"{versions[-1]}.{role}.json")


def refresh(
    folder: Path,
    signers: Sequence[Signer],
    *,
    expires_in: int = MAX_TIMESTAMP_EXPIRY,
    snapshot_expires_in: int | None = None,
    now: datetime | None = None,
    index: IndexSeq | None = None,
) -> list[str]:
    """The feed workflow's schedule: a new timestamp (and a new snapshot when a targets role
    was published since, or the snapshot would expire first), with the online key; it
    records ``index``, the feed index's seq just signed (default: the previous timestamp's)."""
    repo = Repository(Path(folder), now or _now())
    repo.root()  # (a repository must be there)
    return _snapshot_and_timestamp(
        repo,
        signers,
        timestamp_expires_in=expires_in,
        snapshot_expires_in=snapshot_expires_in,
        index=index,
    )


# -- releases -------------------------------------------------------------------------------


def _kind(name: str, version: str) -> str:
    if name == models.MANIFEST_NAME:
        return "manifest"
    if name == models.SUMS_NAME:
        return "sums"
    if name == models.SUMS_SIGNATURE_NAME:
        return "signature"
    if name == models.attestation_name(version):
        return "bundle"
    if name == "install.sh":
        return "install-script"
    if name.endswith(".tar.gz") and name.startswith("mux-"):
        return "archive"
    if name.endswith(".cdx.json") and name.startswith("mux-"):
        return "sbom"
    return "file"


def release_targets(release_dir: Path, *, state: str = PUBLISHED) -> dict[str, TargetFile]:
    """Every file of a packaged release folder as a target ``<tag>/<name>``, with its length,
    sha256 and ``custom.mux`` facts: the release's version and protocol (from its
    manifest), the target triple of an archive or SBOM, the file's kind and state, and on
    the manifest's target the lifecycle record a new release starts with (its
    ``released_at``, which the cooldown counts from; :func:`set_lifecycle` changes it)."""
    release_dir = Path(release_dir)
    try:
        manifest = models.parse_manifest((release_dir / models.MANIFEST_NAME).read_bytes())
    except FileNotFoundError:
        raise UsageError(f"{release_dir} has no {models.MANIFEST_NAME}: not a release") from None
    except ParseError as exc:
        raise UsageError(f"{release_dir}/{models.MANIFEST_NAME}: {exc.message}") from None
    tag = models.tag_for(manifest.version)
    if release_dir.name != tag:
        raise UsageError(f"{release_dir} holds mux {manifest.version}: its folder must be {tag}")
    by_archive = {asset.name: asset.target for asset in manifest.assets}
    released_at = manifest_released_at(release_dir)
    targets = {}
    for path in sorted(release_dir.iterdir()):
        if not path.is_file() or path.is_symlink():
            continue
        if not models.is_safe_asset_name(path.name):
            raise UsageError(f"{path}: not a name a release file may have")
        facts: dict[str, Any] = {
            "version": manifest.version,
            "protocol_version": manifest.protocol_version,
            "kind": _kind(path.name, manifest.version),
            "state": state,
        }
        if path.name == models.MANIFEST_NAME and released_at is not None:
            facts["lifecycle"] = {"released_at": format_time(released_at)}
        target = by_archive.get(path.name)
        if target is None and facts["kind"] == "sbom":
            target = path.name.removeprefix("mux-").removesuffix(".cdx.json")
        if target is not None:
            facts["target"] = target
        info = TargetFile.from_file(f"{tag}/{path.name}", str(path), ["sha256"])
        info.unrecognized_fields["custom"] = {"mux": facts}
        targets[info.path] = info
    return targets


def _without_lifecycle(target: TargetFile) -> tuple[Any, ...]:
    """What of a target never changes once published: its path, length, hashes and facts
    but the lifecycle record (which :func:`set_lifecycle` re-signs)."""
    custom = dict(target.unrecognized_fields.get("custom") or {})
    facts = {k: v for k, v in (custom.get("mux") or {}).items() if k != "lifecycle"}
    return target.path, target.length, target.hashes, {**custom, "mux": facts}


def _require_online(repo: Repository, signers: Sequence[Signer]) -> None:
    """Before anything is written: the online key given can sign the snapshot and the
    timestamp (else a new release-workflow would be published with no snapshot naming it)."""
    root = repo.root().signed
    given = {signer.public_key.keyid for signer in signers}
    for role in (Snapshot.type, Timestamp.type):
        if not given & set(root.roles[role].keyids):
            raise TufRepoError(
                f"no online key of the {role} role was given",
                hint="--online-private-key, --tuf-online-private-key",
            )


def _publish_release_role(
    repo: Repository, releases: Targets, release_signers: Sequence[Signer]
) -> None:
    """Sign a new version of release-workflow with the release key and publish it."""
    top = repo.targets().signed
    releases.version += 1
    releases.expires = repo.expiry(RELEASE_ROLE)
    md = Metadata(releases)
    assert top.delegations is not None and top.delegations.roles is not None
    _sign(md, release_signers, top.delegations.roles[RELEASE_ROLE].keyids)
    if not top.get_verification_result(RELEASE_ROLE, md.signed_bytes, md.signatures).verified:
        raise TufRepoError(
            f"the release key given cannot sign {RELEASE_ROLE} ({_missing(md, top, RELEASE_ROLE)})",
            hint="give the release workflow's key (--release-private-key, --tuf-release-private-key)",
        )
    repo.publish(RELEASE_ROLE, md)


def add_release(
    folder: Path,
    release_dir: Path,
    release_signers: Sequence[Signer],
    online_signers: Sequence[Signer],
    *,
    now: datetime | None = None,
    index: IndexSeq | None = None,
) -> list[str]:
    """List every file of ``release_dir`` (``…/v<version>/``) in release-workflow (a new
    version, signed with the release workflow's key), then a new snapshot and timestamp.

    A release already listed is left as it is when its files are the same, and refused when
    they differ: a tag's files never change once published (that is what lets clients and
    mirrors cache them for good, and GitHub's assets be the targets)."""
    repo = Repository(Path(folder), now or _now())
    current = repo.targets(RELEASE_ROLE)
    new = release_targets(release_dir)
    tag = next(iter(new)).split("/", 1)[0]
    listed = {p: t for p, t in current.signed.targets.items() if p.startswith(f"{tag}/")}
    if listed:
        changed = sorted(
            set(listed) ^ set(new)
            | {
                p
                for p in new
                if p in listed and _without_lifecycle(listed[p]) != _without_lifecycle(new[p])
            }
        )
        if not changed:
            return [f"{tag} is already listed with these files: nothing to do"]
        raise TufRepoError(
            f"{tag} is already listed with other files ({', '.join(changed)[:300]}); a "
            "published release never changes: publish a new version",
        )
    _require_online(repo, online_signers)
    releases = current.signed
    releases.targets.update(new)
    _publish_release_role(repo, releases, release_signers)
    lines = [f"{RELEASE_ROLE} v{releases.version}: {tag} listed ({len(new)} files)"]
    return lines + _snapshot_and_timestamp(repo, online_signers, index=index)


def lifecycle_of(folder: Path, tag: str) -> dict[str, Any] | None:
    """The lifecycle record the repository's newest release-workflow signs for ``tag`` (None:
    the tag is not listed; ``{}``: listed without one)."""
    releases = Repository(Path(folder)).targets(RELEASE_ROLE).signed
    manifest = releases.targets.get(f"{tag}/{models.MANIFEST_NAME}")
    if manifest is None:
        return None
    facts = (manifest.unrecognized_fields.get("custom") or {}).get("mux") or {}
    record = facts.get("lifecycle")
    return dict(record) if isinstance(record, dict) else {}


@dataclass(frozen=True)
class SignedState:
    """What a feed's TUF repository signs that its index must carry too (:func:`signed_state`)."""

    tags: tuple[str, ...]  # every release release-workflow lists
    records: dict[str, dict[str, Any]]  # the lifecycle record of each release that has one
    index: IndexSeq | None  # the index's seq the timestamp records


def signed_state(folder: Path) -> SignedState:
    """The lifecycle records and the index seq a feed's TUF repository signs, read back for
    ``mux-release feed`` when the feed's own index was lost, and only as far as the
    repository's signatures vouch for them: every root chains from ``1.root.json`` to its
    thresholds, the newest root verifies the timestamp and ``targets``, ``targets`` verifies
    ``release-workflow`` (:meth:`Repository.targets`: the newest published, as the lifecycle
    verbs read it). Expiry is not judged: an old repository still says what was signed.
    Raises :class:`TufRepoError` or :class:`VerificationError` naming the role that fails."""
    repo = Repository(Path(folder))
    verify_published(folder)
    root = repo.root().signed
    timestamp = repo.timestamp()
    top = repo.targets()
    releases = repo.targets(RELEASE_ROLE)
    for role, md, delegator in (
        (Timestamp.type, timestamp, root),
        (Targets.type, top, root),
        (RELEASE_ROLE, releases, top.signed),
    ):
        if not delegator.get_verification_result(role, md.signed_bytes, md.signatures).verified:
            raise VerificationError(
                f"{repo.metadata}: {role} v{md.signed.version} is not signed to its threshold "
                f"({_missing(md, delegator, role)})"
            )
    tags: set[str] = set()
    records: dict[str, dict[str, Any]] = {}
    for path, target in releases.signed.targets.items():
        tag, _, name = path.partition("/")
        tags.add(tag)
        if name != models.MANIFEST_NAME:
            continue
        facts = (target.unrecognized_fields.get("custom") or {}).get("mux") or {}
        record = facts.get("lifecycle") if isinstance(facts, dict) else None
        if isinstance(record, dict):
            records[tag] = dict(record)
    return SignedState(tuple(sorted(tags)), records, index_seq(timestamp.signed))


def set_lifecycle(
    folder: Path,
    tag: str,
    record: dict[str, Any],
    release_signers: Sequence[Signer],
    online_signers: Sequence[Signer],
    *,
    now: datetime | None = None,
    index: IndexSeq | None = None,
) -> list[str]:
    """Sign ``record`` (a lifecycle record's JSON, already checked with the client's parser)
    as the lifecycle of the listed release ``tag``: a new release-workflow version whose
    manifest target carries it in ``custom.mux.lifecycle`` (files, lengths and digests
    untouched), then a new snapshot and timestamp. What ``mux-release rollout|halt|resume|
    withdraw|critical`` do for a feed with a TUF repository, beside its signed index."""
    repo = Repository(Path(folder), now or _now())
    _require_online(repo, online_signers)
    releases = repo.targets(RELEASE_ROLE).signed
    manifest = releases.targets.get(f"{tag}/{models.MANIFEST_NAME}")
    if manifest is None:
        raise TufRepoError(
            f"the TUF repository of {folder} does not list {tag}",
            hint="publish it first (mux-release feed --tuf-online-private-key …)",
        )
    custom = manifest.unrecognized_fields.setdefault("custom", {})
    facts = custom.setdefault("mux", {})
    if facts.get("lifecycle") == record:
        lines = [f"{RELEASE_ROLE} v{releases.version} already carries this lifecycle of {tag}"]
        return lines + _snapshot_and_timestamp(repo, online_signers, index=index)
    facts["lifecycle"] = record
    _publish_release_role(repo, releases, release_signers)
    lines = [f"{RELEASE_ROLE} v{releases.version}: the lifecycle of {tag} signed"]
    return lines + _snapshot_and_timestamp(repo, online_signers, index=index)


def publish_feed(
    folder: Path,
    release_signers: Sequence[Signer],
    online_signers: Sequence[Signer],
    *,
    now: datetime | None = None,
    index: IndexSeq | None = None,
) -> list[str]:
    """Bring the repository of a feed up to date with its release folders: every ``v*/``
    folder with a ``manifest.json`` that the repository does not list yet is added
    (:func:`add_release`), then the timestamp is re-signed. What ``mux-release feed`` does
    after it signs ``releases.json`` (``index``: the seq it signed, which the timestamp
    records), so that both describe the same releases."""
    folder = Path(folder)
    lines: list[str] = []
    listed = set(listed_tags(folder))
    for release_dir in sorted(folder.glob("v*/")):
        if release_dir.name in listed or not (release_dir / models.MANIFEST_NAME).is_file():
            continue
        lines += add_release(
            folder, release_dir, release_signers, online_signers, now=now, index=index
        )
    if not lines:
        lines = refresh(folder, online_signers, now=now, index=index)
    return lines


# -- rotations and threshold signing --------------------------------------------------------


@dataclass(frozen=True)
class KeyChange:
    role: str  # root, targets, snapshot, timestamp or release-workflow
    add: Sequence[Key] = ()
    remove: Sequence[str] = ()  # key ids (a prefix of 8 or more hex digits will do)
    threshold: int | None = None


def _resolve_keyid(prefix: str, keyids: Iterable[str], role: str) -> str:
    found = [k for k in keyids if k.startswith(prefix.lower())]
    if len(prefix) < 8 or len(found) != 1:
        raise UsageError(f"{prefix[:70]!r} names no single key of {role}")
    return found[0]


def rotate(
    folder: Path,
    changes: Sequence[KeyChange],
    signers: Sequence[Signer],
    *,
    expires_in: int | None = None,
    now: datetime | None = None,
) -> list[str]:
    """A new root (for root, targets, snapshot and timestamp keys) or a new targets (for the
    release workflow's keys) with ``changes``: keys added, removed (revoked) or replaced (both),
    thresholds changed. It is signed with ``signers`` and published once it verifies (a new
    root needs a threshold of the old root's keys and of its own), else staged for
    :func:`sign`."""
    repo = Repository(Path(folder), now or _now())
    root_md = repo.root()
    lines: list[str] = []
    root_changes = [c for c in changes if c.role in TOP_LEVEL]
    release_changes = [c for c in changes if c.role == RELEASE_ROLE]
    if len(root_changes) + len(release_changes) != len(changes):
        raise UsageError(
            "a key change names root, targets, snapshot, timestamp or release-workflow"
        )
    if root_changes or (not changes and expires_in is not None):
        previous = root_md.signed
        new = Root.from_dict(json.loads(json.dumps(previous.to_dict())))
        new.version = previous.version + 1
        new.expires = repo.expiry(Root.type, expires_in)
        for change in root_changes:
            role = new.roles[change.role]
            for prefix in change.remove:
                new.revoke_key(_resolve_keyid(prefix, role.keyids, change.role), change.role)
            for key in change.add:
                new.add_key(key, change.role)
            if change.threshold is not None:
                role.threshold = change.threshold
            if not 1 <= role.threshold <= len(role.keyids):
                raise UsageError(
                    f"{change.role} would need {role.threshold} of {len(role.keyids)} keys"
                )
        md = Metadata(new)
        _sign(md, signers, set(previous.roles[Root.type].keyids) | set(new.roles[Root.type].keyids))
        lines.append(_publish_or_stage_root(repo, md, previous))
    if release_changes:
        current = repo.targets()
        top = Targets.from_dict(json.loads(json.dumps(current.signed.to_dict())))
        top.version = current.signed.version + 1
        top.expires = repo.expiry(Targets.type, expires_in)
        assert top.delegations is not None
        for change in release_changes:
            role = top.delegations.roles[RELEASE_ROLE]  # type: ignore[index]
            for prefix in change.remove:
                top.revoke_key(_resolve_keyid(prefix, role.keyids, RELEASE_ROLE), RELEASE_ROLE)
            for key in change.add:
                top.add_key(key, RELEASE_ROLE)
            if change.threshold is not None:
                role.threshold = change.threshold
            if not 1 <= role.threshold <= len(role.keyids):
                raise UsageError(
                    f"{RELEASE_ROLE} would need {role.threshold} of {len(role.keyids)} keys"
                )
        targets_md = Metadata(top)
        root = repo.root().signed
        _sign(targets_md, signers, root.roles[Targets.type].keyids)
        lines.append(_publish_or_stage_targets(repo, targets_md, root, signers))
    return lines


def _publish_or_stage_root(repo: Repository, md: Metadata[Root], previous: Root) -> str:
    if _root_verified(md, previous):
        repo.publish(Root.type, md)
        return f"root v{md.signed.version} published"
    repo.stage(Root.type, md)
    result = md.signed.get_root_verification_result(previous, md.signed_bytes, md.signatures)
    return (
        f"root v{md.signed.version} staged in {repo.staged}: {len(result.first.signed)} of "
        f"{result.first.threshold} signatures of root v{previous.version}'s keys, "
        f"{len(result.second.signed)} of {result.second.threshold} of its own; each keyholder "
        "signs it with mux-release tuf sign"
    )


def _publish_or_stage_targets(
    repo: Repository, md: Metadata[Targets], root: Root, online: Sequence[Signer]
) -> str:
    if _targets_verified(md, root):
        repo.publish(Targets.type, md)
        line = f"targets v{md.signed.version} published"
        if any(s.public_key.keyid in root.roles[Timestamp.type].keyids for s in online):
            line += "; " + "; ".join(_snapshot_and_timestamp(repo, online))
        else:
            line += " (the next mux-release tuf timestamp puts it in a snapshot)"
        return line
    repo.stage(Targets.type, md)
    return (
        f"targets v{md.signed.version} staged in {repo.staged}: "
        f"{_missing(md, root, Targets.type)}; each keyholder signs it with mux-release tuf sign"
    )


def sign(
    folder: Path, role: str, signers: Sequence[Signer], *, now: datetime | None = None
) -> list[str]:
    """Add signatures to the staged version of ``role`` (root or targets) and publish it
    once it verifies."""
    repo = Repository(Path(folder), now or _now())
    md = repo.staged_version(role)
    if md is None:
        raise TufRepoError(f"no {role} waits for signatures in {repo.staged}")
    if role == Root.type:
        versions = repo.root_versions()
        previous = repo.root().signed if versions else None
        allowed = set(md.signed.roles[Root.type].keyids)
        if previous is not None:
            allowed |= set(previous.roles[Root.type].keyids)
        used = _sign(md, signers, allowed)
        if not used:
            raise TufRepoError("none of the keys given may sign this root (or they already did)")
        if previous is None:
            if _root_verified(md, None):
                repo.publish(Root.type, md)
                lines = [f"root v{md.signed.version} published"]
                for staged in (Targets.type, RELEASE_ROLE):
                    if repo.staged_version(staged) is not None:
                        lines.append(
                            f"{staged} v1 waits: sign it with mux-release tuf sign {staged}"
                        )
                return lines
            repo.stage(Root.type, md)
            return [f"root v1: {_missing(md, md.signed, Root.type)} so far"]
        return [_publish_or_stage_root(repo, md, previous)]
    if role in (Targets.type, RELEASE_ROLE):
        root = repo.root().signed
        if role == Targets.type:
            used = _sign(md, signers, root.roles[Targets.type].keyids)
            if not used:
                raise TufRepoError("none of the keys given may sign targets (or they already did)")
            return [_publish_or_stage_targets(repo, md, root, signers)]
        top = _newest_published(repo, Targets.type).signed
        assert top.delegations is not None and top.delegations.roles is not None
        _sign(md, signers, top.delegations.roles[RELEASE_ROLE].keyids)
        if top.get_verification_result(RELEASE_ROLE, md.signed_bytes, md.signatures).verified:
            repo.publish(RELEASE_ROLE, md)
            lines = [f"{RELEASE_ROLE} v{md.signed.version} published"]
            if any(s.public_key.keyid in root.roles[Timestamp.type].keyids for s in signers):
                lines += _snapshot_and_timestamp(repo, signers)
            return lines
        repo.stage(RELEASE_ROLE, md)
        return [f"{RELEASE_ROLE}: {_missing(md, top, RELEASE_ROLE)} so far"]
    raise UsageError(f"{role} is not signed by keyholders (root, targets or {RELEASE_ROLE})")


# -- what a repository says, for the tooling ------------------------------------------------


def listed_tags(folder: Path) -> list[str]:
    """The tags the published release-workflow role lists (``v<version>``), newest first."""
    repo = Repository(Path(folder))
    tags = {p.split("/", 1)[0] for p in repo.targets(RELEASE_ROLE).signed.targets}
    return sorted(tags, key=models.parse_tag, reverse=True)


def root_bytes(folder: Path, version: int | None = None) -> bytes:
    """A published root, as a build bakes it (default: the newest)."""
    repo = Repository(Path(folder))
    versions = repo.root_versions()
    if not versions:
        raise TufRepoError(f"{repo.metadata} holds no root")
    chosen = versions[-1] if version is None else version
    path = repo.metadata / f"{chosen}.root.json"
    if not path.is_file():
        raise TufRepoError(f"{path} does not exist")
    return path.read_bytes()


def verify_published(folder: Path) -> None:
    """Every published root chains from the first (a check before publishing)."""
    repo = Repository(Path(folder))
    previous: Root | None = None
    for version in repo.root_versions():
        md: Metadata[Root] = repo._read(repo.metadata / f"{version}.root.json")
        try:
            if not _root_verified(md, previous):
                raise UnsignedMetadataError(f"root v{version}")
        except UnsignedMetadataError as exc:
            raise VerificationError(f"{exc} is not signed to its thresholds") from None
        previous = md.signed
