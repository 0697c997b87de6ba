"""The release layout's documents, written: the inverse of :mod:`updater.formats.models`' parsers.

Only release tooling writes ``manifest.json``, ``SHA256SUMS``, a feed's ``releases.json`` and the
file lists and deltas' headers;
the installed mux reads them. Every writer's output parses back to what it was given
(``tests/test_models.py`` checks the round trips).
"""

from __future__ import annotations

import json
from typing import Any

from updater.formats import delta as delta_format
from updater.formats.delta import DeltaHeader, FileList
from updater.formats.models import MANIFEST_SCHEMA, FeedRelease, Manifest


def manifest_document(manifest: Manifest) -> dict[str, Any]:
    """``manifest.json`` as a JSON object (docs/contracts.md); ``release_notes`` only when
    the release has notes."""
    notes = {"release_notes": manifest.release_notes} if manifest.release_notes else {}
    return {
        "schema": MANIFEST_SCHEMA,
        "name": manifest.name,
        "version": manifest.version,
        "protocol_version": manifest.protocol_version,
        "released_at": manifest.released_at,
        "assets": [
            {"name": a.name, "target": a.target, "size": a.size, "sha256": a.sha256}
            for a in manifest.assets
        ],
        **notes,
    }


def format_sha256sums(digests: dict[str, str]) -> bytes:
    """``sha256sum`` text, sorted by name: the inverse of ``models.parse_sha256sums``."""
    return "".join(f"{digests[name]}  {name}\n" for name in sorted(digests)).encode()


def format_releases_json(releases: list[FeedRelease]) -> bytes:
    """A static feed's ``releases.json``, newest first."""
    ordered = sorted(releases, key=lambda r: r.version, reverse=True)
    entries: list[dict[str, Any]] = []
    for release in ordered:
        entry: dict[str, Any] = {"tag": release.tag, "prerelease": release.prerelease}
        if release.lifecycle is not None:
            entry["lifecycle"] = release.lifecycle.to_json()
        entries.append(entry)
    # ensure_ascii: a reason or a note in any script stays plain ASCII JSON (install.sh's awk)
    return (json.dumps({"releases": entries}, indent=2, ensure_ascii=True) + "\n").encode()


def file_list_document(file_list: FileList) -> bytes:
    """A release's ``mux-<target>.files.json`` (docs/contracts.md): the inverse of
    ``updater.formats.delta.parse_file_list``."""
    entries: list[dict[str, Any]] = []
    for entry in file_list.entries:
        if entry.kind == delta_format.FILE:
            entries.append(
                {
                    "path": entry.path,
                    "type": entry.kind,
                    "size": entry.size,
                    "mode": f"{entry.mode:04o}",
                    "sha256": entry.sha256,
                }
            )
        elif entry.kind == delta_format.LINK:
            entries.append({"path": entry.path, "type": entry.kind, "target": entry.target})
        else:
            entries.append({"path": entry.path, "type": entry.kind})
    doc = {
        "schema": delta_format.FILE_LIST_SCHEMA,
        "name": "mux",
        "version": file_list.version,
        "target": file_list.target,
        "archive": {
            "name": file_list.archive.name,
            "size": file_list.archive.size,
            "sha256": file_list.archive.sha256,
        },
        "mtime": file_list.mtime,
        "entries": entries,
        "deltas": [
            {"from": d.from_version, "name": d.name, "size": d.size, "sha256": d.sha256}
            for d in file_list.deltas
        ],
    }
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def delta_header_document(header: DeltaHeader) -> bytes:
    """A delta's prefix and header (its patches follow): the inverse of
    ``updater.formats.delta.parse_delta_header``."""
    entries: list[dict[str, Any]] = []
    for entry in header.entries:
        item: dict[str, Any] = {"path": entry.path, "op": "patch" if entry.patched else "copy"}
        item["source"] = entry.source
        if entry.source is not None:
            item["source_sha256"] = entry.source_sha256
            item["source_size"] = entry.source_size
        if entry.patched:
            item["offset"] = entry.offset
            item["length"] = entry.length
        entries.append(item)
    doc = {
        "schema": delta_format.DELTA_SCHEMA,
        "from": header.from_version,
        "version": header.version,
        "target": header.target,
        "entries": entries,
    }
    raw = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    return delta_format.DELTA_MAGIC + len(raw).to_bytes(4, "big") + raw
