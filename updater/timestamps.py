"""RFC 3339 UTC timestamps, to the second, as every mux document writes them (stdlib only)."""

from __future__ import annotations

import time

RFC3339_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def rfc3339(epoch: float | None = None) -> str:
    """``2026-11-20T12:00:00Z`` for ``epoch`` (seconds since 1970, default now)."""
    return time.strftime(RFC3339_FORMAT, time.gmtime(epoch))
