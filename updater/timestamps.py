"""Times as mux writes them (stdlib only): RFC 3339 UTC in documents, ``utc_text`` in messages."""

from __future__ import annotations

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
