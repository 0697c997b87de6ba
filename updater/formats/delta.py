"""A release's signed file list and its deltas, parsed (pure functions, no I/O).

Per target a release may publish ``mux-<target>.files.json``, the file list: every entry of
its archive's top folder (path, kind, size, mode, sha256) and the deltas that build the same
tree from an earlier release's files; and each delta ``mux-<target>.from-<version>.delta``.
Both are ordinary release files: listed in the signed ``SHA256SUMS`` (and attested), so a
reader checks a file list's digest before parsing it, and a delta's size (the file list's)
and digest before reading a byte of it. docs/contracts.md describes both formats; the writers
are release tooling (:mod:`release.publish.delta`). Every parser raises :class:`ParseError`
and nothing else.

A delta is ``MUXDELTA`` + a version byte + a 4-byte big-endian header length, the header
(JSON), then the patches back to back. Each file of the new tree is either ``copy`` (a file of
the old version, unchanged) or ``patch`` (a BSDIFF40 patch from an old file, or from nothing
for a new file) at an offset of the patch area.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from updater.errors import ParseError
from updater.formats import models

FILE_LIST_SCHEMA = 1
DELTA_SCHEMA = 1
FILE = "file"
DIR = "dir"
LINK = "link"

MAX_FILE_LIST_BYTES = 4 * 1024 * 1024
MAX_ENTRIES = 50_000  # as many members as an archive may have (updater.trust.unpack)
MAX_TREE_BYTES = 2 * 1024**3  # what an archive may unpack to (updater.trust.unpack)
MAX_DELTAS = 8  # a file list names at most this many (mux-release writes three)
DELTA_MAGIC = b"MUXDELTA\x01"
DELTA_PREFIX_SIZE = len(DELTA_MAGIC) + 4
MAX_DELTA_HEADER = 4 * 1024 * 1024
# A delta is worth downloading only when it is smaller than this share of the full archive:
# mux-release refuses to publish a larger one, and mux refuses to use one.
MAX_DELTA_SHARE = 0.5
# bsdiff's header: magic, then the control block's, the diff block's and the output's sizes.
BSDIFF_MAGIC = b"BSDIFF40"
BSDIFF_HEADER_SIZE = 32
# The modes an archive gives a file (release.folder.archive): what a list may name.
FILE_MODES = (0o755, 0o644)

_MODE_RE = re.compile(r"0[0-7]{3}")


def file_list_name(target: str) -> str:
    return f"mux-{target}.files.json"


def delta_name(target: str, from_version: str) -> str:
    return f"mux-{target}.from-{from_version}.delta"


@dataclass(frozen=True)
class ArchiveRef:
    """The archive a file list describes (its manifest entry, repeated)."""

    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class TreeEntry:
    """One entry of the archive's top folder, by its path relative to that folder."""

    path: str
    kind: str  # FILE, DIR or LINK
    size: int = 0
    mode: int = 0o755
    sha256: str = ""
    target: str = ""  # a link's target, as written (relative, without "..")


@dataclass(frozen=True)
class DeltaRef:
    """A delta the release publishes: from which version, under which name, how big."""

    from_version: str
    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class FileList:
    version: str
    target: str
    archive: ArchiveRef
    mtime: int  # every member's time in the archive
    entries: tuple[TreeEntry, ...]
    deltas: tuple[DeltaRef, ...]

    @property
    def files(self) -> dict[str, TreeEntry]:
        return {e.path: e for e in self.entries if e.kind == FILE}

    @property
    def total_size(self) -> int:
        return sum(e.size for e in self.entries if e.kind == FILE)

    def delta_from(self, version: str) -> DeltaRef | None:
        return next((d for d in self.deltas if d.from_version == version), None)


def _load(raw: bytes, what: str, limit: int) -> dict[str, Any]:
    if len(raw) > limit:
        raise ParseError(f"{what} is larger than {limit} bytes")
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ParseError(f"{what} is not valid JSON") from None
    if not isinstance(doc, dict):
        raise ParseError(f"{what} is not a JSON object")
    return doc


def _int(value: object, what: str, *, maximum: int = MAX_TREE_BYTES) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise ParseError(f"{what} must be an integer from 0 to {maximum}")
    return value


def _str(value: object, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 4096:
        raise ParseError(f"{what} must be a non-empty string")
    return value


def _sha256(value: object, what: str) -> str:
    if not models.is_sha256(value):
        raise ParseError(f"{what} has no valid sha256")
    assert isinstance(value, str)
    return value


def check_tree_path(path: object, what: str) -> str:
    """``path`` when it is a safe relative path inside the tree, in its one spelling
    (no empty, ``.`` or ``..`` part, no leading or trailing slash, no control characters,
    no backslash); else ParseError. The rules of an archive's member names."""
    text = _str(path, what)
    if any(ord(c) < 32 or c == "\x7f" for c in text) or "\\" in text:
        raise ParseError(f"{what}: unsafe path {text[:80]!r}")
    parts = text.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ParseError(f"{what}: path {text[:80]!r} is not a plain path inside the folder")
    return text


def _link_target(entry_path: str, target: object, what: str) -> str:
    text = _str(target, what)
    pure = PurePosixPath(text)
    if pure.is_absolute() or ".." in pure.parts or any(ord(c) < 32 for c in text):
        raise ParseError(f"{what}: link {entry_path!r} -> {text[:80]!r} leaves its folder")
    return text


def parse_file_list(raw: bytes, *, name: str = "the file list") -> FileList:
    """A file list, with every rule an archive's members obey: paths inside the folder and
    each given once, links relative without ``..`` to a file of the list, sizes and counts
    capped, the ``mux`` executable at the top."""
    doc = _load(raw, name, MAX_FILE_LIST_BYTES)
    if doc.get("schema") != FILE_LIST_SCHEMA:
        raise ParseError(f"{name}: unsupported schema {str(doc.get('schema'))[:20]!r}")
    version = _str(doc.get("version"), f"{name}: version")
    models.parse_version(version)
    target = _str(doc.get("target"), f"{name}: target")
    archive_doc = doc.get("archive")
    if not isinstance(archive_doc, dict):
        raise ParseError(f"{name}: archive must be an object")
    archive = ArchiveRef(
        name=_str(archive_doc.get("name"), f"{name}: archive name"),
        size=_int(archive_doc.get("size"), f"{name}: archive size", maximum=1 << 40),
        sha256=_sha256(archive_doc.get("sha256"), f"{name}: archive"),
    )
    mtime = _int(doc.get("mtime"), f"{name}: mtime", maximum=1 << 40)
    entries = _parse_entries(doc.get("entries"), name)
    deltas = _parse_deltas(doc.get("deltas", []), target, name)
    return FileList(version, target, archive, mtime, tuple(entries), tuple(deltas))


def _parse_entries(entries_doc: object, name: str) -> list[TreeEntry]:
    """A file list's entries: each path once, under a listed folder, links to a file of the
    list, the files' sizes capped together, an executable ``mux`` at the top."""
    if not isinstance(entries_doc, list) or len(entries_doc) > MAX_ENTRIES:
        raise ParseError(f"{name}: entries must be a list of at most {MAX_ENTRIES}")
    entries: list[TreeEntry] = []
    kinds: dict[str, str] = {}
    total = 0
    for item in entries_doc:
        if not isinstance(item, dict):
            raise ParseError(f"{name}: every entry must be an object")
        path = check_tree_path(item.get("path"), f"{name} entry")
        if path in kinds:
            raise ParseError(f"{name} lists {path!r} twice")
        entry = _parse_entry(item, path, name)
        total += entry.size
        if total > MAX_TREE_BYTES:
            raise ParseError(f"{name}: the files add up to more than {MAX_TREE_BYTES} bytes")
        kinds[entry.path] = entry.kind
        entries.append(entry)
    for entry in entries:  # every parent is a folder of the list
        parts = entry.path.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if kinds.get(parent) != DIR:
                raise ParseError(f"{name}: the folder of {entry.path!r} is not listed as one")
    for entry in entries:
        if entry.kind == LINK and _resolve_link(entry, kinds, {e.path: e for e in entries}) is None:
            raise ParseError(f"{name}: link {entry.path!r} does not name a file of the list")
    if kinds.get("mux") != FILE or next(e for e in entries if e.path == "mux").mode != 0o755:
        raise ParseError(f"{name}: no executable mux at the top")
    return entries


def _parse_entry(item: dict[str, Any], path: str, name: str) -> TreeEntry:
    """The entry at ``path`` of a file list: a file (mode, size, sha256), a folder or a link."""
    kind = item.get("type")
    if kind == FILE:
        mode_text = item.get("mode")
        if not isinstance(mode_text, str) or not _MODE_RE.fullmatch(mode_text):
            raise ParseError(f"{name}: {path!r} has no mode of the form 0755")
        mode = int(mode_text, 8)
        if mode not in FILE_MODES:
            raise ParseError(f"{name}: {path!r} has mode {mode_text}, not 0755 or 0644")
        size = _int(item.get("size"), f"{name}: size of {path!r}")
        return TreeEntry(path, FILE, size, mode, _sha256(item.get("sha256"), path))
    if kind == DIR:
        return TreeEntry(path, DIR)
    if kind == LINK:
        return TreeEntry(path, LINK, target=_link_target(path, item.get("target"), f"{name} entry"))
    raise ParseError(f"{name}: {path!r} is not a file, folder or link")


def _parse_deltas(deltas_doc: object, target: str, name: str) -> list[DeltaRef]:
    """A file list's deltas: each from an earlier version, named for it."""
    if not isinstance(deltas_doc, list) or len(deltas_doc) > MAX_DELTAS:
        raise ParseError(f"{name}: deltas must be a list of at most {MAX_DELTAS}")
    deltas = []
    for item in deltas_doc:
        if not isinstance(item, dict):
            raise ParseError(f"{name}: every delta must be an object")
        from_version = _str(item.get("from"), f"{name}: delta from")
        models.parse_version(from_version)
        delta_file = _str(item.get("name"), f"{name}: delta name")
        if delta_file != delta_name(target, from_version):
            raise ParseError(f"{name}: delta {delta_file[:80]!r} is not named for its version")
        deltas.append(
            DeltaRef(
                from_version=from_version,
                name=delta_file,
                size=_int(item.get("size"), f"{name}: size of {delta_file}", maximum=1 << 40),
                sha256=_sha256(item.get("sha256"), delta_file),
            )
        )
    return deltas


def _resolve_link(
    entry: TreeEntry, kinds: dict[str, str], by_path: dict[str, TreeEntry]
) -> str | None:
    """The file a link names, through any chain of links; None when it names no file."""
    seen: set[str] = set()
    while entry.kind == LINK:
        if entry.path in seen:
            return None
        seen.add(entry.path)
        folder = entry.path.rpartition("/")[0]
        parts = [p for p in f"{folder}/{entry.target}".split("/") if p not in ("", ".")]
        path = "/".join(parts)
        found = by_path.get(path)
        if found is None:
            return None
        entry = found
    return entry.path if entry.kind == FILE else None


# -- a delta's header ----------------------------------------------------------------------


@dataclass(frozen=True)
class DeltaEntry:
    """How one file of the new tree is made: a copy of ``source`` (an old file), or a
    patch of ``length`` bytes at ``offset`` of the patch area, applied to ``source`` (None:
    a new file, patched from nothing)."""

    path: str
    source: str | None
    source_sha256: str | None
    source_size: int
    offset: int = 0
    length: int = 0
    patched: bool = False


@dataclass(frozen=True)
class DeltaHeader:
    from_version: str
    version: str
    target: str
    entries: tuple[DeltaEntry, ...]
    patch_area: int  # bytes of patches after the header

    def by_path(self) -> dict[str, DeltaEntry]:
        return {e.path: e for e in self.entries}


def header_length(prefix: bytes, *, name: str = "the delta") -> int:
    """The header's length, from the delta's first :data:`DELTA_PREFIX_SIZE` bytes."""
    if len(prefix) != DELTA_PREFIX_SIZE or not prefix.startswith(DELTA_MAGIC):
        raise ParseError(f"{name} is not a mux delta (no {DELTA_MAGIC[:8].decode()} header)")
    length = int.from_bytes(prefix[len(DELTA_MAGIC) :], "big")
    if not 0 < length <= MAX_DELTA_HEADER:
        raise ParseError(f"{name}: a header of {length} bytes (at most {MAX_DELTA_HEADER})")
    return length


def parse_delta_header(raw: bytes, *, size: int, name: str = "the delta") -> DeltaHeader:
    """The header of a delta of ``size`` bytes in all; its patches must lie in the rest of
    the file, each once, in order, with nothing left over."""
    doc = _load(raw, f"{name}'s header", MAX_DELTA_HEADER)
    if doc.get("schema") != DELTA_SCHEMA:
        raise ParseError(f"{name}: unsupported schema {str(doc.get('schema'))[:20]!r}")
    from_version = _str(doc.get("from"), f"{name}: from")
    version = _str(doc.get("version"), f"{name}: version")
    target = _str(doc.get("target"), f"{name}: target")
    area = size - DELTA_PREFIX_SIZE - len(raw)
    if area < 0:
        raise ParseError(f"{name} is shorter than its header")
    entries_doc = doc.get("entries")
    if not isinstance(entries_doc, list) or len(entries_doc) > MAX_ENTRIES:
        raise ParseError(f"{name}: entries must be a list of at most {MAX_ENTRIES}")
    entries = []
    seen: set[str] = set()
    position = 0
    for item in entries_doc:
        if not isinstance(item, dict):
            raise ParseError(f"{name}: every entry must be an object")
        path = check_tree_path(item.get("path"), f"{name} entry")
        if path in seen:
            raise ParseError(f"{name} makes {path!r} twice")
        seen.add(path)
        op = item.get("op")
        source_doc = item.get("source")
        source = None if source_doc is None else check_tree_path(source_doc, f"{name} source")
        source_sha256 = None if source is None else _sha256(item.get("source_sha256"), path)
        source_size = 0 if source is None else _int(item.get("source_size"), f"{path} source")
        if op == "copy":
            if source is None:
                raise ParseError(f"{name}: {path!r} is a copy of nothing")
            entries.append(DeltaEntry(path, source, source_sha256, source_size))
            continue
        if op != "patch":
            raise ParseError(f"{name}: {path!r} has no known op")
        offset = _int(item.get("offset"), f"{name}: offset of {path!r}", maximum=1 << 40)
        length = _int(item.get("length"), f"{name}: length of {path!r}", maximum=1 << 40)
        if offset != position or length < BSDIFF_HEADER_SIZE or offset + length > area:
            raise ParseError(f"{name}: the patch of {path!r} is not where the header says")
        position += length
        entries.append(
            DeltaEntry(path, source, source_sha256, source_size, offset, length, patched=True)
        )
    if position != area:
        raise ParseError(f"{name}: {area - position} bytes after its last patch")
    return DeltaHeader(from_version, version, target, tuple(entries), area)


def _int64(raw: bytes) -> int:
    """bsdiff's 8-byte integer: little-endian magnitude, the top bit its sign."""
    value = int.from_bytes(raw, "little")
    if value & (1 << 63):
        return -(value & ~(1 << 63))
    return value


def parse_bsdiff_header(raw: bytes, *, what: str) -> tuple[int, int, int]:
    """A BSDIFF40 patch's block sizes: control (compressed), diff (compressed), output."""
    if len(raw) != BSDIFF_HEADER_SIZE or not raw.startswith(BSDIFF_MAGIC):
        raise ParseError(f"{what} is not a BSDIFF40 patch")
    control, diff, output = (_int64(raw[i : i + 8]) for i in (8, 16, 24))
    if min(control, diff, output) < 0:
        raise ParseError(f"{what}: a negative size in its header")
    return control, diff, output


def control_entry(raw: bytes) -> tuple[int, int, int]:
    """One 24-byte control entry: (diff bytes, extra bytes, old-position move)."""
    return _int64(raw[:8]), _int64(raw[8:16]), _int64(raw[16:24])
