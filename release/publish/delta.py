"""``mux-release delta``: a release's file lists, and its deltas from earlier releases.

For every archive of a packaged release folder this writes ``mux-<target>.files.json``, the
signed list of every entry of the archive's tree (path, kind, size, mode, sha256), and, from
each of up to three earlier releases (the newest below this one), a delta
``mux-<target>.from-<version>.delta``: per file of the new tree either "copy this unchanged
file of the old version" or a BSDIFF40 patch (bsdiff4) from the old file of that path, or
from nothing for a new file (docs/contracts.md). Every delta is applied with the updater's
own code (:func:`updater.trust.delta.apply_delta`) to the old tree and must give exactly the
new one before it is written; one of half the full archive's size or more is not published.
``SHA256SUMS`` is rewritten over the new files (sign after this, and attest after this: the
file lists and deltas are subjects of the attestation like every other file it lists).

The earlier releases are release folders (their archives and ``manifest.json``; the release
workflow downloads them from the published releases); each archive must match its manifest
entry and, when the folder has one, its ``SHA256SUMS`` line.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import bsdiff4

from release.publish.formats import delta_header_document, file_list_document
from release.publish.package import rehash_sums
from updater.errors import MuxError, ParseError, UsageError
from updater.files import atomic_write, sha256_file
from updater.formats import delta as fmt
from updater.formats.models import (
    MANIFEST_NAME,
    SUMS_NAME,
    Manifest,
    ManifestAsset,
    archive_folder,
    parse_manifest,
    parse_sha256sums,
    parse_version,
)
from updater.trust.delta import DeltaUnusable, apply_delta
from updater.trust.unpack import unpack

MAX_PREVIOUS = 3


class DeltaError(MuxError):
    """A release or an earlier release cannot be read for its deltas."""


@dataclass(frozen=True)
class WrittenDelta:
    target: str
    from_version: str
    name: str
    size: int
    archive_size: int
    published: bool
    reason: str = ""  # why it was not published

    @property
    def share(self) -> float:
        return self.size / self.archive_size if self.archive_size else 1.0


@dataclass(frozen=True)
class DeltaReport:
    file_lists: tuple[str, ...]
    deltas: tuple[WrittenDelta, ...]


def _manifest(folder: Path) -> Manifest:
    try:
        return parse_manifest((folder / MANIFEST_NAME).read_bytes())
    except FileNotFoundError:
        raise UsageError(f"{folder} is not a release folder (no {MANIFEST_NAME})") from None
    except ParseError as exc:
        raise DeltaError(f"{folder / MANIFEST_NAME}: {exc.message}") from None


def _checked_archive(folder: Path, asset: ManifestAsset) -> Path:
    """The archive of ``asset`` in ``folder``, which must be what its release says it is."""
    path = folder / asset.name
    if not path.is_file():
        raise DeltaError(f"{folder} has no {asset.name}")
    actual = sha256_file(path)
    if actual != asset.sha256 or path.stat().st_size != asset.size:
        raise DeltaError(f"{path} is not the archive {MANIFEST_NAME} describes (sha256 {actual})")
    sums_path = folder / SUMS_NAME
    if sums_path.is_file():
        try:
            listed = parse_sha256sums(sums_path.read_bytes()).get(asset.name)
        except ParseError as exc:
            raise DeltaError(f"{sums_path}: {exc.message}") from None
        if listed is not None and listed != actual:
            raise DeltaError(f"{path} does not match its line in {sums_path}")
    return path


def read_tree(archive: Path, target: str, into: Path) -> tuple[list[fmt.TreeEntry], int]:
    """The archive's entries (below its top folder, in archive order) and their one time;
    the archive is unpacked into the empty folder ``into`` by the updater's layer 4."""
    top = archive_folder(target)
    entries: list[fmt.TreeEntry] = []
    times: set[int] = set()
    digests = unpack(archive, into, top=top)
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            times.add(int(member.mtime))
            name = member.name.removeprefix(f"{top}/")
            if member.name == top:
                continue
            if member.isdir():
                entries.append(fmt.TreeEntry(name, fmt.DIR))
            elif member.issym():
                entries.append(fmt.TreeEntry(name, fmt.LINK, target=member.linkname))
            elif member.isfile():
                mode = member.mode & 0o7777
                if mode not in fmt.FILE_MODES:
                    raise DeltaError(f"{archive}: {name} has mode {mode:04o}")
                entries.append(
                    fmt.TreeEntry(name, fmt.FILE, member.size, mode, digests[name].sha256)
                )
            else:
                raise DeltaError(f"{archive}: {name} is not a file, folder or link")
    if len(times) != 1:
        raise DeltaError(f"{archive}: its members do not share one time")
    return entries, times.pop()


def make_delta(
    old_tree: Path,
    old_entries: Sequence[fmt.TreeEntry],
    new_tree: Path,
    new_entries: Sequence[fmt.TreeEntry],
    *,
    from_version: str,
    version: str,
    target: str,
    destination: Path,
) -> int:
    """Write the delta from the old tree to the new one into ``destination``; its size."""
    old_files = {e.path: e for e in old_entries if e.kind == fmt.FILE}
    by_digest: dict[str, fmt.TreeEntry] = {}
    for entry in old_files.values():
        by_digest.setdefault(entry.sha256, entry)
    steps: list[fmt.DeltaEntry] = []
    patches: list[bytes] = []
    offset = 0
    for entry in (e for e in new_entries if e.kind == fmt.FILE):
        same = old_files.get(entry.path)
        if same is None or same.sha256 != entry.sha256:
            same = by_digest.get(entry.sha256)
        if same is not None and same.sha256 == entry.sha256:
            steps.append(fmt.DeltaEntry(entry.path, same.path, same.sha256, same.size))
            continue
        base = old_files.get(entry.path)
        new_bytes = (new_tree / entry.path).read_bytes()
        old_bytes = (old_tree / base.path).read_bytes() if base is not None else b""
        patch = bsdiff4.diff(old_bytes, new_bytes)
        steps.append(
            fmt.DeltaEntry(
                entry.path,
                None if base is None else base.path,
                None if base is None else base.sha256,
                0 if base is None else base.size,
                offset,
                len(patch),
                patched=True,
            )
        )
        patches.append(patch)
        offset += len(patch)
    header = fmt.DeltaHeader(from_version, version, target, tuple(steps), offset)
    with open(destination, "wb") as out:
        out.write(delta_header_document(header))
        for patch in patches:
            out.write(patch)
    return destination.stat().st_size


def _self_check(
    delta: Path,
    file_list: fmt.FileList,
    from_version: str,
    old_tree: Path,
    old_entries: Sequence[fmt.TreeEntry],
    scratch: Path,
) -> None:
    """Apply the delta as mux update will; it must give exactly the new tree."""
    out = Path(tempfile.mkdtemp(dir=scratch, prefix="check-"))
    try:
        with open(delta, "rb") as stream:
            apply_delta(
                stream,
                delta.stat().st_size,
                file_list,
                from_version=from_version,
                base_dir=str(old_tree),
                base_files={e.path: e.sha256 for e in old_entries if e.kind == fmt.FILE},
                destination=str(out),
            )
    except DeltaUnusable as exc:
        raise DeltaError(f"{delta.name} does not apply to {from_version}: {exc.message}") from None
    finally:
        shutil.rmtree(out, ignore_errors=True)


def write_deltas(
    release_dir: Path,
    previous: Sequence[Path],
    *,
    say: Callable[[str], None] = lambda line: None,
) -> DeltaReport:
    """Write the file lists of ``release_dir`` and its deltas from the newest
    :data:`MAX_PREVIOUS` of the ``previous`` release folders below its version; rewrite its
    ``SHA256SUMS`` (its signature is removed: sign again)."""
    release_dir = Path(release_dir)
    manifest = _manifest(release_dir)
    chosen = _earlier_releases(manifest, previous)[:MAX_PREVIOUS]
    written_lists: list[str] = []
    deltas: list[WrittenDelta] = []
    with tempfile.TemporaryDirectory(prefix="mux-delta-") as scratch_name:
        scratch = Path(scratch_name)
        for asset in manifest.assets:
            archive = _checked_archive(release_dir, asset)
            new_tree = scratch / f"new-{asset.target}"
            new_tree.mkdir()
            entries, mtime = read_tree(archive, asset.target, new_tree)
            new = _NewTree(manifest, asset, new_tree, entries, mtime)
            refs: list[fmt.DeltaRef] = []
            for old_manifest, folder in chosen:
                old_asset = old_manifest.asset_for(asset.target)
                if old_asset is None:
                    say(f"{asset.target}: {old_manifest.version} has no build for it: no delta")
                    continue
                written, ref = _write_delta(
                    new, old_manifest.version, _checked_archive(folder, old_asset), scratch, say
                )
                deltas.append(written)
                if ref is not None:
                    shutil.move(scratch / ref.name, release_dir / ref.name)
                    os.chmod(release_dir / ref.name, 0o644)
                    refs.append(ref)
            file_list = _file_list(manifest, asset, entries, mtime, tuple(refs))
            list_name = fmt.file_list_name(asset.target)
            atomic_write(release_dir / list_name, file_list_document(file_list), mode=0o644)
            written_lists.append(list_name)
            say(f"{list_name}: {len(entries)} entries, {len(refs)} deltas")
    rehash_sums(release_dir)
    return DeltaReport(tuple(written_lists), tuple(deltas))


def _earlier_releases(manifest: Manifest, previous: Sequence[Path]) -> list[tuple[Manifest, Path]]:
    """The ``previous`` release folders with their manifests, newest first; each must be
    older than ``manifest``'s release."""
    version = parse_version(manifest.version)
    earlier: list[tuple[Manifest, Path]] = []
    for folder in previous:
        old = _manifest(Path(folder))
        if parse_version(old.version) >= version:
            raise UsageError(f"{folder} is mux {old.version}, not older than {manifest.version}")
        earlier.append((old, Path(folder)))
    earlier.sort(key=lambda item: parse_version(item[0].version), reverse=True)
    return earlier


@dataclass(frozen=True)
class _NewTree:
    """One archive of the release the deltas lead to, unpacked into ``tree``."""

    manifest: Manifest
    asset: ManifestAsset
    tree: Path
    entries: list[fmt.TreeEntry]
    mtime: int


def _write_delta(
    new: _NewTree,
    from_version: str,
    old_archive: Path,
    scratch: Path,
    say: Callable[[str], None],
) -> tuple[WrittenDelta, fmt.DeltaRef | None]:
    """The delta from ``old_archive`` (mux ``from_version``) to ``new``, written into
    ``scratch`` and applied there as mux update will; its reference for the file list, or
    None when it is too large to publish."""
    asset = new.asset
    old_tree = scratch / f"old-{asset.target}-{from_version}"
    old_tree.mkdir()
    old_entries, _ = read_tree(old_archive, asset.target, old_tree)
    name = fmt.delta_name(asset.target, from_version)
    path = scratch / name
    size = make_delta(
        old_tree,
        old_entries,
        new.tree,
        new.entries,
        from_version=from_version,
        version=new.manifest.version,
        target=asset.target,
        destination=path,
    )
    if size >= fmt.MAX_DELTA_SHARE * asset.size:
        reason = (
            f"{size} bytes, {100 * size / asset.size:.1f}% of the "
            f"{asset.size}-byte archive (a delta must be under "
            f"{100 * fmt.MAX_DELTA_SHARE:.0f}%)"
        )
        say(f"{name}: not published: {reason}")
        return WrittenDelta(asset.target, from_version, name, size, asset.size, False, reason), None
    probe = _file_list(new.manifest, asset, new.entries, new.mtime, ())
    _self_check(path, probe, from_version, old_tree, old_entries, scratch)
    ref = fmt.DeltaRef(from_version, name, size, sha256_file(path))
    say(f"{name}: {size} bytes, {100 * size / asset.size:.2f}% of the {asset.size}-byte archive")
    shutil.rmtree(old_tree, ignore_errors=True)
    return WrittenDelta(asset.target, from_version, name, size, asset.size, True), ref


def _file_list(
    manifest: Manifest,
    asset: ManifestAsset,
    entries: Sequence[fmt.TreeEntry],
    mtime: int,
    deltas: tuple[fmt.DeltaRef, ...],
) -> fmt.FileList:
    file_list = fmt.FileList(
        version=manifest.version,
        target=asset.target,
        archive=fmt.ArchiveRef(asset.name, asset.size, asset.sha256),
        mtime=mtime,
        entries=tuple(entries),
        deltas=deltas,
    )
    # What mux will read back: the writer's output must parse to the same list.
    raw = file_list_document(file_list)
    if fmt.parse_file_list(raw) != file_list:
        raise DeltaError(f"the file list of {asset.name} does not read back as written")
    return file_list
