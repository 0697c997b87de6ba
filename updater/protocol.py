"""The server status contract and control surface: the protocol-bearing code of mux.

Everything in this module is part of what a mux client and a mux server must agree on.
``mux-release protocol`` fingerprints this file: changing it without bumping
``PROTOCOL_VERSION`` fails the release check. Keep unrelated code out of it.
"""

from __future__ import annotations

import json
from types import MappingProxyType

from ._records import NamedTuple

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing: a sidebar's check
if TYPE_CHECKING:  # asks every live server for its status line, through this module
    from collections.abc import Mapping
    from typing import Any

# 2: the status line is a NamedTuple, read without importing dataclasses or typing (the same
# fields and JSON on the wire as 1).
PROTOCOL_VERSION = 2

SERVICE_NAME = "mux"
STATUS_PATH = "/api/status"
# The shutdown request must keep working across every protocol version: it is how a new
# client restarts an old server (the restart command mux prints relies on it).
SHUTDOWN_PATH = "/api/shutdown"
SHUTDOWN_ACCEPTED = 202  # answered before the server stops


class StatusLineError(ValueError):
    """The bytes a server answered are not a mux status line."""

    def __init__(self, reason: str, kind: str) -> None:
        super().__init__(reason)
        self.kind = kind  # "garbage" | "foreign" | "no-protocol"


class StatusLine(NamedTuple):
    service: str
    protocol_version: int
    version: str
    pid: int | None
    started_at: str | None
    extra: Mapping[str, Any] = MappingProxyType({})

    def to_json(self) -> dict[str, Any]:
        return {
            **self.extra,
            "service": self.service,
            "protocol_version": self.protocol_version,
            "version": self.version,
            "pid": self.pid,
            "started_at": self.started_at,
        }


def parse_status_line(raw: bytes) -> StatusLine:
    """Parse a ``GET /api/status`` body; unknown fields are kept in ``extra`` and ignored."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise StatusLineError(f"not JSON ({exc.__class__.__name__})", "garbage") from None
    if not isinstance(doc, dict):
        raise StatusLineError("not a JSON object", "garbage")
    if doc.get("service") != SERVICE_NAME:
        raise StatusLineError(f"another service ({str(doc.get('service'))[:40]!r})", "foreign")
    protocol = doc.get("protocol_version")
    if isinstance(protocol, bool) or not isinstance(protocol, int):
        raise StatusLineError("status line has no integer protocol_version", "no-protocol")
    version = doc.get("version")
    pid = doc.get("pid")
    started_at = doc.get("started_at")
    known = {"service", "protocol_version", "version", "pid", "started_at"}
    return StatusLine(
        service=SERVICE_NAME,
        protocol_version=protocol,
        version=version if isinstance(version, str) else "unknown",
        pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
        started_at=started_at if isinstance(started_at, str) else None,
        extra={k: v for k, v in doc.items() if k not in known},
    )
