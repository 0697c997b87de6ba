"""Rendering reports for people (plain lines) and programs (one JSON object).

Stdlib only, so the cached check can render without importing rich.
"""

from __future__ import annotations

import json
from typing import Any

from .plan import CheckReport, ServerVerdict


def to_json_line(doc: dict[str, Any]) -> str:
    return json.dumps(doc, sort_keys=True)


def _server_line(verdict: ServerVerdict, *, new_protocol: int | None = None) -> list[str]:
    report = verdict.report
    status = report.status
    if status is None:
        return [f"  {report.address}: {report.state} ({report.detail})"]
    who = f"{report.address} (pid {status.pid}, mux {status.version}, protocol {status.protocol_version})"
    if new_protocol is None:
        return [f"  {who}"]
    return [f"  {who} → protocol {new_protocol}", f"    restart it with: {verdict.restart_command}"]


def render_check(report: CheckReport) -> str:
    build = report.build
    latest = report.latest
    lines: list[str] = []
    current = f"mux {build.version}" + (" (development build)" if build.development else "")
    if latest is None:
        lines.append(f"{current}: no release information")
    elif report.update_available:
        released = f", released {latest['released_at']}" if latest.get("released_at") else ""
        verb = "is available" if not latest.get("requested") else "was requested"
        lines.append(f"{current} → {latest['version']} {verb}{released}")
        lines.append(f"  release: {latest['release_url']}")
        lines.append(
            "  install it with: mux update"
            + (f" --version {latest['version']}" if latest.get("requested") else "")
        )
    else:
        lines.append(f"{current} is up to date (latest release {latest['tag']})")
    for note in report.notes:
        lines.append(f"  note: {note}")

    live = [v for v in report.servers if v.report.status is not None]
    others = [v for v in report.servers if v.report.status is None]
    now = [v for v in live if v.restart_needed]
    after = [v for v in live if v.restart_needed_after_update and not v.restart_needed]
    if now:
        lines.append(
            f"{len(now)} live server(s) speak another protocol than this mux "
            f"(protocol {build.protocol_version}); restart when convenient, it ends the programs in it:"
        )
        for verdict in now:
            lines.extend(_server_line(verdict, new_protocol=build.protocol_version))
    if after and latest:
        lines.append(
            f"after the update, {len(after)} live server(s) will need a restart "
            f"(mux {latest['version']} speaks protocol {latest['protocol_version']}):"
        )
        for verdict in after:
            lines.extend(_server_line(verdict, new_protocol=latest["protocol_version"]))
    quiet = [v for v in live if v not in now and v not in after]
    if quiet:
        lines.append(f"{len(quiet)} live server(s) speak this mux's protocol: nothing to do")
    if others:
        lines.append("skipped:")
        for verdict in others:
            lines.extend(_server_line(verdict))
    if report.cached:
        lines.append(f"(from the check at {report.checked_at})")
    return "\n".join(lines)
