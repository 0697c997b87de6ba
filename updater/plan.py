"""Pure planning: from what a source said and what the live servers said, to a verdict.

No I/O here. :func:`release_answer` summarises a release for the cache; :func:`plan_check`
turns that summary, the running build and the live servers into a :class:`CheckReport`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import EXIT_OK, EXIT_RESTART_NEEDED, EXIT_UPDATE_AVAILABLE

if TYPE_CHECKING:
    from .buildinfo import BuildInfo
    from .models import Manifest
    from .servers import ServerReport

REPORT_SCHEMA = 1


def release_answer(
    *,
    source_kind: str,
    source_location: str,
    tag: str,
    manifest: Manifest,
    release_url: str,
    target: str,
    update_available: bool,
    requested: bool,
) -> dict[str, Any]:
    """The cacheable part of a check: what the source says, decided against this build."""
    asset = manifest.asset_for(target)
    return {
        "ok": True,
        "source": {"kind": source_kind, "location": source_location},
        "latest": {
            "tag": tag,
            "version": manifest.version,
            "protocol_version": manifest.protocol_version,
            "released_at": manifest.released_at,
            "release_url": release_url,
            "asset": (
                {"name": asset.name, "size": asset.size, "sha256": asset.sha256} if asset else None
            ),
            "requested": requested,
        },
        "update_available": update_available,
    }


@dataclass(frozen=True)
class ServerVerdict:
    report: ServerReport
    restart_needed: bool  # speaks another protocol than the running mux
    restart_needed_after_update: bool  # speaks another protocol than the release on offer
    restart_command: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            **self.report.to_json(),
            "restart_needed": self.restart_needed,
            "restart_needed_after_update": self.restart_needed_after_update,
            "restart_command": self.restart_command,
        }


@dataclass(frozen=True)
class CheckReport:
    build: BuildInfo
    answer: dict[str, Any]
    servers: tuple[ServerVerdict, ...]
    cached: bool
    checked_at: str
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def latest(self) -> dict[str, Any] | None:
        latest = self.answer.get("latest")
        return latest if isinstance(latest, dict) else None

    @property
    def update_available(self) -> bool:
        return bool(self.answer.get("update_available"))

    @property
    def restart_needed(self) -> bool:
        return any(v.restart_needed for v in self.servers)

    @property
    def status(self) -> str:
        if self.update_available:
            return "update-available"
        if self.restart_needed:
            return "restart-needed"
        return "up-to-date"

    @property
    def exit_code(self) -> int:
        return {
            "update-available": EXIT_UPDATE_AVAILABLE,
            "restart-needed": EXIT_RESTART_NEEDED,
            "up-to-date": EXIT_OK,
        }[self.status]

    def to_json(self) -> dict[str, Any]:
        latest = self.latest
        return {
            "schema": REPORT_SCHEMA,
            "status": self.status,
            "exit_code": self.exit_code,
            "update_available": self.update_available,
            "restart_needed": self.restart_needed,
            "restart_needed_after_update": any(v.restart_needed_after_update for v in self.servers),
            "current": {
                "version": self.build.version,
                "protocol_version": self.build.protocol_version,
                "target": self.build.target,
                "development": self.build.development,
            },
            "latest": latest,
            "source": self.answer.get("source"),
            "servers": [v.to_json() for v in self.servers],
            "checked_at": self.checked_at,
            "cached": self.cached,
            "notes": list(self.notes),
        }


def plan_check(
    build: BuildInfo,
    answer: dict[str, Any],
    servers: list[ServerReport],
    *,
    cached: bool,
    checked_at: str,
    restart_command: Any,
) -> CheckReport:
    latest = answer.get("latest") if isinstance(answer.get("latest"), dict) else None
    offered_protocol = (
        latest.get("protocol_version") if latest and answer.get("update_available") else None
    )
    verdicts = []
    for report in servers:
        status = report.status
        if report.state != "live" or status is None:
            verdicts.append(ServerVerdict(report, False, False, None))
            continue
        now = status.protocol_version != build.protocol_version
        after = offered_protocol is not None and status.protocol_version != offered_protocol
        command = restart_command(report) if (now or after) else None
        verdicts.append(ServerVerdict(report, now, after, command))
    notes = []
    if latest and latest.get("asset") is None and answer.get("update_available"):
        notes.append(f"release {latest['tag']} has no build for {build.target or 'this platform'}")
    return CheckReport(
        build=build,
        answer=answer,
        servers=tuple(verdicts),
        cached=cached,
        checked_at=checked_at,
        notes=tuple(notes),
    )
