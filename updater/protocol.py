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

# 2: the status line names the server's ``executable``; ``GET /api/watch`` streams events;
# the status line is a NamedTuple (reading it imports neither dataclasses nor typing).
PROTOCOL_VERSION = 2

SERVICE_NAME = "mux"
STATUS_PATH = "/api/status"
# The shutdown request must keep working across every protocol version: it is how a new
# client restarts an old server (the restart command mux prints relies on it).
SHUTDOWN_PATH = "/api/shutdown"
SHUTDOWN_ACCEPTED = 202  # answered before the server stops
# A stream of JSON lines: first the status line, then one event per line, as they happen,
# until the server stops. An event is ``{"type": str, "data": object}``; readers skip the
# types they do not know, so events are added without a protocol bump.
WATCH_PATH = "/api/watch"
WATCH_CONTENT_TYPE = "application/x-ndjson"
MAX_WATCH_LINE = 64 * 1024  # a longer line is not a mux line


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
    # The resolved path of the build the server runs from (…/versions/<version>/mux); None
    # when the server does not say (protocol 1): readers then ask the operating system.
    executable: str | None = None
    extra: Mapping[str, Any] = MappingProxyType({})

    def to_json(self) -> dict[str, Any]:
        return {
            **self.extra,
            "service": self.service,
            "protocol_version": self.protocol_version,
            "version": self.version,
            "pid": self.pid,
            "started_at": self.started_at,
            **({"executable": self.executable} if self.executable is not None else {}),
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
    executable = doc.get("executable")
    known = {"service", "protocol_version", "version", "pid", "started_at", "executable"}
    return StatusLine(
        service=SERVICE_NAME,
        protocol_version=protocol,
        version=version if isinstance(version, str) else "unknown",
        pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
        started_at=started_at if isinstance(started_at, str) else None,
        executable=executable if isinstance(executable, str) and executable else None,
        extra={k: v for k, v in doc.items() if k not in known},
    )


class WatchEvent:
    """One event line of the watch stream (a plain class: ``mux version`` imports this
    module, and a NamedTuple costs more to define than the rest of it)."""

    __slots__ = ("at", "data", "type")

    def __init__(self, type: str, data: dict[str, Any], at: str | None = None) -> None:
        self.type = type
        self.data = data
        # When it happened (RFC 3339 UTC): stamped by the server's hub when it is published
        # (updater.daemon.hub); None on a line of an older server's stream, which had none.
        self.at = at

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WatchEvent) and (self.type, self.data) == (other.type, other.data)

    def __hash__(self) -> int:
        return hash(self.type)

    def __repr__(self) -> str:
        return f"WatchEvent({self.type!r}, {self.data!r})"

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "data": self.data, **({"at": self.at} if self.at else {})}


def parse_watch_event(raw: bytes) -> WatchEvent:
    """Parse one event line (after the first, which is the status line).

    Raises :class:`StatusLineError` (kind ``"garbage"``) for anything that is not a JSON
    object with a string ``type`` and an object ``data``; the type itself is not checked.
    """
    if len(raw) > MAX_WATCH_LINE:
        raise StatusLineError("watch line is larger than 64 KiB", "garbage")
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise StatusLineError(f"not JSON ({exc.__class__.__name__})", "garbage") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("type"), str):
        raise StatusLineError("not an event (no string type)", "garbage")
    data = doc.get("data", {})
    if not isinstance(data, dict):
        raise StatusLineError("event data is not an object", "garbage")
    at = doc.get("at")
    return WatchEvent(doc["type"], data, at if isinstance(at, str) else None)
