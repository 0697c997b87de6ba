"""A release's lifecycle after publishing, parsed: stages, halt, withdrawal, critical, notes.

A lifecycle record is a JSON object that travels inside signed data, never on its own
(docs/contracts.md, "Release lifecycle"): a feed's signed ``releases.json`` (each release's
``lifecycle`` field) and the TUF repository's targets metadata (``custom.mux.lifecycle`` of
each release's manifest target). :func:`parse_record` reads it from either; it is the one
parser::

    {"released_at": "2026-12-01T12:00:00Z",
     "stages": [{"start": "2026-12-01T12:00:00Z", "percent": 5}, ...],
     "interval": {"start": "2026-12-01T12:00:00Z", "seconds": 86400},
     "halted": false,
     "withdrawn": {"reason": "...", "replacement": "v1.4.3"},
     "critical": false,
     "minimum_version": "1.3.0",
     "notes": "a short plain-text summary"}

Every field is optional; a record with none says "fully rolled out". Strict: a known field
of the wrong type, out of range or too long is a :class:`ParseError` (the whole signed
document is then refused: fail closed), never coerced; unknown fields are ignored, as in
every mux document, so a later publisher can add one. Times are RFC 3339 in UTC with a
``Z`` and whole seconds (install.sh reads them in awk). ``stages`` and ``interval`` exclude
each other; stages start in order and their percentages grow. Text fields are capped and
shown only through :func:`shown` (escaped, :func:`updater.text.safe_text`). Stdlib only.
"""

from __future__ import annotations

import calendar
import math
import re
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

from updater.errors import ParseError
from updater.text import safe_text

NOTES_LIMIT = 1000  # characters of a release's notes
REASON_LIMIT = 300  # characters of a withdrawal's reason
MAX_STAGES = 16
# Sparkle's phased rollout: an interval releases to one more of seven groups each time.
INTERVAL_GROUPS = 7
MAX_INTERVAL = 366 * 86400
_UTC_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})Z")
_TAG = re.compile(r"v\d+\.\d+\.\d+(?:[-.+]?[0-9A-Za-z.]+)?")
_VERSION = re.compile(r"\d+(?:\.\d+){0,3}(?:[-.+]?[0-9A-Za-z.]+)?")


class Stage(NamedTuple):
    start: int  # Unix time from which ``percent`` of machines are offered the release
    percent: float  # 0 < percent <= 100


class Interval(NamedTuple):
    start: int
    seconds: int  # one more of INTERVAL_GROUPS groups every ``seconds``


class Withdrawal(NamedTuple):
    reason: str  # at most REASON_LIMIT characters, raw: print through shown()
    replacement: str | None  # the tag to move to (vX.Y.Z); None: back to a kept version


class Lifecycle(NamedTuple):
    """One release's lifecycle record (see the module)."""

    released_at: int | None = None
    stages: tuple[Stage, ...] = ()
    interval: Interval | None = None
    halted: bool = False
    withdrawn: Withdrawal | None = None
    critical: bool = False
    minimum_version: str | None = None
    notes: str = ""

    @property
    def staged(self) -> bool:
        return bool(self.stages) or self.interval is not None

    def to_json(self) -> dict[str, Any]:
        """The record as :func:`parse_record` reads it (the writers' form; round-trips)."""
        doc: dict[str, Any] = {}
        if self.released_at is not None:
            doc["released_at"] = format_time(self.released_at)
        if self.stages:
            doc["stages"] = [
                {"start": format_time(s.start), "percent": _number(s.percent)} for s in self.stages
            ]
        if self.interval is not None:
            doc["interval"] = {
                "start": format_time(self.interval.start),
                "seconds": self.interval.seconds,
            }
        if self.halted:
            doc["halted"] = True
        if self.withdrawn is not None:
            doc["withdrawn"] = {"reason": self.withdrawn.reason}
            if self.withdrawn.replacement is not None:
                doc["withdrawn"]["replacement"] = self.withdrawn.replacement
        if self.critical:
            doc["critical"] = True
        if self.minimum_version is not None:
            doc["minimum_version"] = self.minimum_version
        if self.notes:
            doc["notes"] = self.notes
        return doc


class SignedLifecycle(NamedTuple):
    """Every release one signed document lists, in its order, with its lifecycle record,
    and what signed it (for reports: "the signed release list of <url>, seq 41"). A release
    without a record is fully rolled out, not halted, not withdrawn: the signed document
    says so by omission. This is the seam between the signed data and the decision
    (:mod:`updater.core.lifecycle`): a feed's index builds one, and so do the TUF
    repository's targets (:meth:`updater.trust.tuf_targets.SignedTargets.lifecycle`)."""

    listed: tuple[tuple[str, Lifecycle], ...]  # (tag, record), as listed
    origin: str

    def of(self, tag: str) -> Lifecycle:
        return next((record for listed, record in self.listed if listed == tag), Lifecycle())


RINGS = ("early", "default", "late")
MAX_RELEASE_AGE = 366 * 86400


def pin_parts(pin: str) -> tuple[int, ...]:
    """A machine's pin, ``"1.4"`` (stay on 1.4.x), as ``(1, 4)``: one to three dotted
    numbers; raises ParseError for anything else."""
    parts = pin.split(".") if isinstance(pin, str) and len(pin) <= 32 else []
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() and p.isascii() for p in parts):
        raise ParseError(f"{str(pin)[:20]!r} is not a version prefix such as 1.4")
    return tuple(int(p) for p in parts)


def shown(text: str, limit: int) -> str:
    """``text`` as one escaped line of at most ``limit`` characters, for a person or a log."""
    escaped = safe_text(text)
    return escaped if len(escaped) <= limit else escaped[: limit - 1] + "…"


def format_time(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def parse_time(value: object, what: str) -> int:
    """``2026-12-01T12:00:00Z`` to a Unix time; anything else (an offset, a fraction, no
    ``Z``, a date no calendar has) is a ParseError."""
    match = _UTC_TIME.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ParseError(f"{what} {str(value)[:40]!r} is not a UTC time like 2026-12-01T12:00:00Z")
    year, month, day, hour, minute, second = (int(part) for part in match.groups())
    if not (
        year >= 1970
        and 1 <= month <= 12
        and 1 <= day <= calendar.monthrange(year, month)[1]
        and hour < 24
        and minute < 60
        and second < 60
    ):
        raise ParseError(f"{what} {value!r} is not a valid time")
    return calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))


def parse_record(doc: object, what: str = "lifecycle") -> Lifecycle:
    """A lifecycle record (a JSON object already decoded) for the release ``what`` names."""
    if not isinstance(doc, dict):
        raise ParseError(f"{what} must be an object")
    fields: dict[str, Any] = {}
    if "released_at" in doc:
        fields["released_at"] = parse_time(doc["released_at"], f"{what}: released_at")
    if "stages" in doc:
        fields["stages"] = _stages(doc["stages"], what)
    if "interval" in doc:
        if "stages" in doc:
            raise ParseError(f"{what}: stages and interval exclude each other")
        fields["interval"] = _interval(doc["interval"], what)
    for flag in ("halted", "critical"):
        if flag in doc:
            if not isinstance(doc[flag], bool):
                raise ParseError(f"{what}: {flag} must be true or false")
            fields[flag] = doc[flag]
    if doc.get("withdrawn") is not None:
        fields["withdrawn"] = _withdrawal(doc["withdrawn"], what)
    if doc.get("minimum_version") is not None:
        version = doc["minimum_version"]
        if not isinstance(version, str) or not _VERSION.fullmatch(version) or len(version) > 64:
            raise ParseError(f"{what}: minimum_version {str(version)[:40]!r} is not a version")
        fields["minimum_version"] = version
    if "notes" in doc:
        fields["notes"] = _text(doc["notes"], NOTES_LIMIT, f"{what}: notes")
    return Lifecycle(**fields)


def parse_records(entries: Mapping[str, object | None], origin: str) -> SignedLifecycle:
    """``{tag: record or None}`` in the signed document's order (what a TUF targets role's
    ``custom`` fields give), parsed."""
    return SignedLifecycle(
        listed=tuple(
            (tag, Lifecycle() if doc is None else parse_record(doc, f"the lifecycle of {tag}"))
            for tag, doc in entries.items()
        ),
        origin=origin,
    )


def _stages(value: object, what: str) -> tuple[Stage, ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_STAGES:
        raise ParseError(f"{what}: stages must be a list of 1 to {MAX_STAGES} stages")
    stages: list[Stage] = []
    for entry in value:
        if not isinstance(entry, dict):
            raise ParseError(f"{what}: every stage must be an object")
        start = parse_time(entry.get("start"), f"{what}: a stage's start")
        percent = entry.get("percent")
        if (
            isinstance(percent, bool)
            or not isinstance(percent, (int, float))
            or not math.isfinite(percent)
            or not 0 < percent <= 100
        ):
            raise ParseError(f"{what}: a stage's percent must be a number above 0, at most 100")
        if stages and (start <= stages[-1].start or percent <= stages[-1].percent):
            raise ParseError(f"{what}: every stage must start later and reach more than the last")
        stages.append(Stage(start, float(percent)))
    return tuple(stages)


def _interval(value: object, what: str) -> Interval:
    if not isinstance(value, dict):
        raise ParseError(f"{what}: interval must be an object")
    start = parse_time(value.get("start"), f"{what}: the interval's start")
    seconds = value.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not 0 < seconds <= MAX_INTERVAL:
        raise ParseError(f"{what}: the interval's seconds must be from 1 to {MAX_INTERVAL}")
    return Interval(start, seconds)


def _withdrawal(value: object, what: str) -> Withdrawal:
    if not isinstance(value, dict):
        raise ParseError(f"{what}: withdrawn must be an object")
    reason = _text(value.get("reason"), REASON_LIMIT, f"{what}: the withdrawal's reason")
    if not reason.strip():
        raise ParseError(f"{what}: a withdrawal must give its reason")
    replacement = value.get("replacement")
    if replacement is not None and (
        not isinstance(replacement, str) or not _TAG.fullmatch(replacement) or len(replacement) > 64
    ):
        raise ParseError(f"{what}: the replacement {str(replacement)[:40]!r} is not a tag vX.Y.Z")
    return Withdrawal(reason, replacement)


def _text(value: object, limit: int, what: str) -> str:
    if not isinstance(value, str):
        raise ParseError(f"{what} must be a string")
    if len(value) > limit:
        raise ParseError(f"{what} is longer than {limit} characters")
    return value


def _number(value: float) -> int | float:
    return int(value) if value == int(value) else value
