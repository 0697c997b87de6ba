"""The Sigstore bundles a release's attestation comes in, split into candidates.

A release asset holds one JSON bundle or JSON lines of them; the attestations API gives more;
any one candidate that verifies suffices. Each is bounded (:data:`MAX_BUNDLE_BYTES`,
:data:`MAX_BUNDLES`) and a candidate that is not even JSON fails in its turn
(:class:`Unparsable`), not before the others are tried.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from updater.errors import VerificationError
from updater.trust.attestation_text import one_line, strip_prefix

# A bundle with 1024 subjects (actions/attest's maximum) is a few hundred KiB.
MAX_BUNDLE_BYTES = 16 * 1024 * 1024
MAX_BUNDLES = 32

# What sigstore-python 4 parses; GitHub emits the first.
BUNDLE_MEDIA_TYPES = (
    "application/vnd.dev.sigstore.bundle.v0.3+json",
    "application/vnd.dev.sigstore.bundle+json;version=0.3",
    "application/vnd.dev.sigstore.bundle+json;version=0.2",
    "application/vnd.dev.sigstore.bundle+json;version=0.1",
)


@dataclass(frozen=True)
class Unparsable:
    """A candidate that is not even JSON; it fails with ``reason`` in its turn."""

    reason: str


def bundle_candidates(bundle: bytes | Sequence[bytes]) -> list[tuple[str, Any]]:
    if isinstance(bundle, bytes | bytearray | memoryview):
        return split_bundles(bytes(bundle))
    if not bundle:
        raise VerificationError("attestation: no bundle to verify")
    candidates: list[tuple[str, Any]] = []
    for number, raw in enumerate(bundle, start=1):
        try:
            documents = split_bundles(raw)
        except VerificationError as exc:
            documents = [("bundle", Unparsable(strip_prefix(exc.message)))]
        label = f"bundle {number}"
        candidates.extend(
            (label if inner == "bundle" else f"{label} {inner}", document)
            for inner, document in documents
        )
    if len(candidates) > MAX_BUNDLES:
        raise VerificationError(
            f"attestation: {len(candidates)} bundles, more than the {MAX_BUNDLES} allowed"
        )
    return candidates


def split_bundles(raw: bytes) -> list[tuple[str, Any]]:
    """The bundle documents in ``raw``: one JSON document, or JSON lines."""
    if len(raw) > MAX_BUNDLE_BYTES:
        raise VerificationError(
            f"attestation: bundle is {len(raw)} bytes, more than the {MAX_BUNDLE_BYTES} allowed"
        )
    try:
        text = raw.decode("utf-8").lstrip("\ufeff")
    except UnicodeDecodeError as exc:
        raise VerificationError(f"attestation: bundle is not UTF-8 text ({exc.reason})") from None
    if not text.strip():
        raise VerificationError("attestation: bundle is empty")
    try:
        return [("bundle", json.loads(text))]
    except (ValueError, RecursionError) as exc:
        whole_error = one_line(exc)

    lines: list[tuple[str, Any]] = []
    parsed_any = False
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            lines.append((f"line {number}", json.loads(line)))
            parsed_any = True
        except (ValueError, RecursionError):
            lines.append((f"line {number}", Unparsable("bundle is not valid JSON")))
    # Only JSON lines when some line is JSON of its own: a truncated pretty-printed bundle is
    # reported as one JSON error, not as a complaint about every line.
    if not parsed_any or len(lines) < 2:
        raise VerificationError(f"attestation: bundle is not valid JSON ({whole_error})")
    if len(lines) > MAX_BUNDLES:
        raise VerificationError(
            f"attestation: {len(lines)} bundles in one file, more than the {MAX_BUNDLES} allowed"
        )
    return lines
