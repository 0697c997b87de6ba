"""Documents as dicts, before they are serialised: a valid ``manifest.json`` to change one
field of (:func:`manifest_doc`)."""

from __future__ import annotations


def manifest_doc(**overrides: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "schema": 1,
        "name": "mux",
        "version": "0.2.0",
        "protocol_version": 25,
        "released_at": "2026-11-01T00:00:00Z",
        "assets": [
            {
                "name": "mux-x86_64-unknown-linux-gnu.tar.gz",
                "target": "x86_64-unknown-linux-gnu",
                "size": 10,
                "sha256": SHA,
            }
        ],
    }
    doc.update(overrides)
    return doc


SHA = "ab" * 32
