"""Times and durations as mux reads and writes them (stdlib only): RFC 3339 UTC in documents,
``utc_text`` in messages, ``15m``-style durations from flags and variables."""

from __future__ import annotations

import re
import time

RFC3339_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def rfc3339(epoch: float | None = None) -> str:
    """``2026-11-20T12:00:00Z`` for ``epoch`` (seconds since 1970, default now)."""
    return time.strftime(RFC3339_FORMAT, time.gmtime(epoch))


def utc_text(epoch: int) -> str:
    """``2026-11-20 12:00:00 UTC``, as install.sh prints signed times in its messages; a time
    no calendar holds (a forged ``expires:10**30``) as its number."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))
    except (OverflowError, OSError, ValueError):
        return f"{epoch} (Unix time)"


_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, None: 1}


def parse_duration(text: str, *, unit_required: bool = False) -> float:
    """``90``, ``90s``, ``15m``, ``1h``, ``2d``, ``1h30m`` to seconds: a bare number is
    seconds, unless ``unit_required`` (``--hold 7`` meant days, not seconds: refused)."""
    remaining = text.strip().lower()
    if not remaining:
        raise ValueError("empty duration")
    total = 0.0
    while remaining:
        match = _DURATION_RE.match(remaining)
        if not match or not match.group(0):
            raise ValueError(f"invalid duration {text!r} (use e.g. 90s, 15m, 1h, 2d)")
        if unit_required and match.group(2) is None:
            raise ValueError(f"{text.strip()!r} has no unit: give one, e.g. 7d or 12h")
        total += float(match.group(1)) * _UNITS[match.group(2)]
        remaining = remaining[match.end() :].lstrip()
    return total
