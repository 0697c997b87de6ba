"""The release layout's documents, written: the inverse of :mod:`updater.formats.models`' parsers.

Only release tooling writes ``manifest.json``, ``SHA256SUMS`` and a feed's ``releases.json``;
the installed mux reads them. Every writer's output parses back to what it was given
(``tests/test_models.py`` checks the round trips).
"""

from __future__ import annotations

import json
from typing import Any

from updater.formats.models import MANIFEST_SCHEMA, FeedRelease, Manifest


def manifest_document(manifest: Manifest) -> dict[str, Any]:
    """``manifest.json`` as a JSON object (docs/contracts.md)."""
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
