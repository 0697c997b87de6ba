"""The release layout's documents, parsed (pure functions, no I/O).

A release holds ``mux-<target>.tar.gz`` per target, ``manifest.json``, ``SHA256SUMS``,
``SHA256SUMS.minisig`` and ``mux-<version>.sigstore.json``. A static feed adds
``releases.json``. Every parser raises :class:`ParseError` and nothing else; unknown fields
are ignored. The writers are release tooling (:mod:`release.publish.formats`). ``packaging`` is
imported on first use, so that the cached check can import this module for free.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from packaging.version import InvalidVersion, Version

from updater.errors import ParseError
from updater.formats.lifecycle import Lifecycle, SignedLifecycle, parse_record

if TYPE_CHECKING:
    from packaging.version import Version

MANIFEST_NAME = "manifest.json"
SUMS_NAME = "SHA256SUMS"
SUMS_SIGNATURE_NAME = "SHA256SUMS.minisig"
FEED_INDEX_NAME = "releases.json"
TUF_METADATA_DIR = "metadata"  # a feed's TUF repository, beside its releases
MANIFEST_SCHEMA = 1
# A release's notes (Markdown, in its signed manifest): mux-release refuses a file of more
# bytes than this; mux keeps at most RELEASE_NOTES_KEPT characters of what a manifest says,
# so that what it carries on (the check's answer and cache, a server's event, one JSON line
# under 64 KiB even with every character \u-escaped) stays bounded whatever the manifest holds.
RELEASE_NOTES_LIMIT = 64 * 1024
RELEASE_NOTES_KEPT = 4096

_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_SAFE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
# A release tag: v + a version. Checked with the regex first (stdlib), then by packaging.
TAG_RE = re.compile(r"v\d+\.\d+\.\d+(?:[-.+]?[0-9A-Za-z.]+)?")
# RFC 3339 date-time (section 5.6); the calendar is checked by datetime.
_RFC3339_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})"
)


def archive_name(target: str) -> str:
    return f"mux-{target}.tar.gz"


def archive_folder(target: str) -> str:
    """The one top folder every member of ``mux-<target>.tar.gz`` sits under."""
    return f"mux-{target}"


def attestation_name(version: str) -> str:
    return f"mux-{version}.sigstore.json"


def tag_for(version: str) -> str:
    return f"v{version}"


def parse_tag(tag: str) -> Version:
    """``vX.Y.Z`` (optionally with a pre-release suffix) to a comparable version."""
    if not isinstance(tag, str) or not TAG_RE.fullmatch(tag):
        raise ParseError(f"{str(tag)[:60]!r} is not a release tag of the form vX.Y.Z")

    try:
        return Version(tag[1:])
    except InvalidVersion:
        raise ParseError(f"{tag[:60]!r} is not a valid version") from None


def parse_version(text: str) -> Version:

    try:
        return Version(text.removeprefix("v"))
    except (InvalidVersion, TypeError, AttributeError):
        raise ParseError(f"{str(text)[:60]!r} is not a valid version") from None


def is_sha256(value: object) -> bool:
    return isinstance(value, str) and _SHA256_RE.fullmatch(value) is not None


def is_safe_asset_name(name: object) -> bool:
    return isinstance(name, str) and len(name) < 256 and _SAFE_NAME_RE.fullmatch(name) is not None


def parse_rfc3339(value: object, what: str) -> str:
    """``value`` when it is an RFC 3339 date-time (``2026-11-20T12:00:00Z``); else ParseError."""

    match = _RFC3339_RE.fullmatch(value) if isinstance(value, str) else None
    try:
        if match is None:
            raise ValueError
        year, month, day, hour, minute, second = (int(match[i]) for i in range(1, 7))
        offset = match[8].upper()
        zone = UTC
        if offset != "Z":
            sign = -1 if offset[0] == "-" else 1
            hours, minutes = int(offset[1:3]), int(offset[4:6])
            if hours > 23 or minutes > 59:
                raise ValueError
            zone = timezone(sign * timedelta(hours=hours, minutes=minutes))
        # A leap second (:60) is valid RFC 3339; datetime has none, so check it as :59.
        datetime(year, month, day, hour, minute, min(second, 59), tzinfo=zone)
        if second > 60:
            raise ValueError
    except ValueError:
        raise ParseError(f"{what} {str(value)[:60]!r} is not an RFC 3339 time") from None
    assert isinstance(value, str)
    return value


def _load_json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ParseError(f"{what} is not valid JSON") from None
    if not isinstance(doc, dict):
        raise ParseError(f"{what} is not a JSON object")
    return doc


@dataclass(frozen=True)
class ManifestAsset:
    name: str
    target: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    name: str
    version: str
    protocol_version: int
    released_at: str
    assets: tuple[ManifestAsset, ...]
    release_notes: str = ""  # raw signed Markdown, at most RELEASE_NOTES_KEPT characters

    def asset_for(self, target: str) -> ManifestAsset | None:
        return next((a for a in self.assets if a.target == target), None)

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(a.target for a in self.assets)


def _int_field(doc: dict[str, Any], key: str, what: str) -> int:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ParseError(f"{what}: {key} must be a non-negative integer")
    return value


def _str_field(doc: dict[str, Any], key: str, what: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value:
        raise ParseError(f"{what}: {key} must be a non-empty string")
    return value


def parse_manifest(raw: bytes) -> Manifest:
    doc = _load_json_object(raw, MANIFEST_NAME)
    if doc.get("schema") != MANIFEST_SCHEMA:
        raise ParseError(f"{MANIFEST_NAME}: unsupported schema {str(doc.get('schema'))[:20]!r}")
    version = _str_field(doc, "version", MANIFEST_NAME)
    parse_version(version)
    assets_doc = doc.get("assets")
    if not isinstance(assets_doc, list):
        raise ParseError(f"{MANIFEST_NAME}: assets must be a list")
    assets = []
    for entry in assets_doc:
        if not isinstance(entry, dict):
            raise ParseError(f"{MANIFEST_NAME}: every asset must be an object")
        name = _str_field(entry, "name", f"{MANIFEST_NAME} asset")
        if not is_safe_asset_name(name):
            raise ParseError(f"{MANIFEST_NAME}: unsafe asset name {name[:60]!r}")
        sha256 = entry.get("sha256")
        if not is_sha256(sha256):
            raise ParseError(f"{MANIFEST_NAME}: asset {name} has no valid sha256")
        assert isinstance(sha256, str)
        assets.append(
            ManifestAsset(
                name=name,
                target=_str_field(entry, "target", f"{MANIFEST_NAME} asset"),
                size=_int_field(entry, "size", f"{MANIFEST_NAME} asset {name}"),
                sha256=sha256,
            )
        )
    return Manifest(
        name=_str_field(doc, "name", MANIFEST_NAME),
        version=version,
        protocol_version=_int_field(doc, "protocol_version", MANIFEST_NAME),
        released_at=(
            parse_rfc3339(doc["released_at"], f"{MANIFEST_NAME}: released_at")
            if "released_at" in doc
            else ""
        ),
        assets=tuple(assets),
        release_notes=_release_notes(doc),
    )


def _release_notes(doc: dict[str, Any]) -> str:
    """The manifest's ``release_notes`` (optional), cut to :data:`RELEASE_NOTES_KEPT`
    characters at a line's end, with ``…`` where it was cut; not a string: ParseError."""
    notes = doc.get("release_notes", "")
    if not isinstance(notes, str):
        raise ParseError(f"{MANIFEST_NAME}: release_notes must be a string")
    if len(notes) <= RELEASE_NOTES_KEPT:
        return notes
    kept = notes[: RELEASE_NOTES_KEPT - 2]
    line_end = kept.rfind("\n")
    return (kept[:line_end] if line_end > RELEASE_NOTES_KEPT // 2 else kept) + "\n…"


def parse_sha256sums(raw: bytes) -> dict[str, str]:
    """``sha256sum`` output (text or ``*binary`` mode) to ``{file name: digest}``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ParseError(f"{SUMS_NAME} is not UTF-8 text") from None
    sums: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        digest, sep, name = line.partition(" ")
        if not sep or not is_sha256(digest.lower()) or name[:1] not in (" ", "*"):
            raise ParseError(f"{SUMS_NAME} line {number} is not '<sha256>  <file>'")
        name = name[1:]
        if not is_safe_asset_name(name):
            raise ParseError(f"{SUMS_NAME} line {number} names an unsafe file")
        if name in sums and sums[name] != digest.lower():
            raise ParseError(f"{SUMS_NAME} lists {name} twice with different digests")
        sums[name] = digest.lower()
    if not sums:
        raise ParseError(f"{SUMS_NAME} is empty")
    return sums


@dataclass(frozen=True)
class FeedRelease:
    tag: str
    # The flag releases.json carries for humans. Readers never decide on it (it is not what
    # the version says, and it was not signed apart from the list): ``version.is_prerelease``.
    prerelease: bool
    # What the signed index says of the release after publishing (None: nothing, which is
    # fully rolled out): :mod:`updater.formats.lifecycle`.
    lifecycle: Lifecycle | None = None

    @property
    def version(self) -> Version:
        return parse_tag(self.tag)


def index_lifecycle(releases: Sequence[FeedRelease], origin: str) -> SignedLifecycle:
    """Every release a verified index lists with its lifecycle record (none: fully rolled
    out), in its order."""
    return SignedLifecycle(
        listed=tuple((r.tag, r.lifecycle or Lifecycle()) for r in releases), origin=origin
    )


def parse_releases_json(raw: bytes) -> list[FeedRelease]:
    """A static feed's ``releases.json``: ``{"releases": [{"tag", "prerelease", "lifecycle"},
    ...]}`` (``lifecycle`` optional: :func:`updater.formats.lifecycle.parse_record`, strict).

    A bare list of the same objects is accepted too.
    """
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ParseError(f"{FEED_INDEX_NAME} is not valid JSON") from None
    entries = doc.get("releases") if isinstance(doc, dict) else doc
    if not isinstance(entries, list):
        raise ParseError(f"{FEED_INDEX_NAME}: releases must be a list")
    releases = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise ParseError(f"{FEED_INDEX_NAME}: every release must be an object")
        tag = entry.get("tag")
        parse_tag(tag)  # type: ignore[arg-type]
        assert isinstance(tag, str)
        if entry.get("draft") is True:
            continue  # drafts are never offered
        record = entry.get("lifecycle")
        lifecycle = None if record is None else parse_record(record, f"the lifecycle of {tag}")
        releases.append(
            FeedRelease(tag=tag, prerelease=entry.get("prerelease") is True, lifecycle=lifecycle)
        )
    return releases
