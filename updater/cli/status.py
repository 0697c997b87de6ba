"""``mux status``: the view of the install, as text or one JSON object (mounted by
:mod:`updater.cli.app`).

The command asks the servers (as ``mux server status`` does), has
:mod:`updater.commands.status` gather the rest and :mod:`updater.core.install_view` build the
document; :func:`status_lines` renders that document as text, so the text and ``--json``
never say different things.
"""

from __future__ import annotations

import json
import os
import time
from typing import Annotated, Any

import typer

from updater.cli.render import (
    REPORT_SCHEMA,
    human_size,
    safe_text,
    to_json_line,
    verdict_document,
)
from updater.cli.server import server_verdicts_of
from updater.commands.status import gather_status
from updater.config import buildinfo
from updater.core.install_view import install_status
from updater.servers.addresses import SERVER_URL_ENV, every_server_address
from updater.servers.status import query_all


def _size(size: int | None) -> str:
    return "size unknown" if size is None else human_size(size)  # the one size format


def _file_line(label: str, entry: dict[str, Any]) -> str:
    path = entry["path"] or "none"
    if entry["problem"]:
        return f"{label}: {path}: cannot be used: {entry['problem']}"
    if not entry["exists"]:
        return f"{label}: {path} (none)"
    sets = entry["sets"]
    said = "; ".join(f"{name} = {json.dumps(value)}" for name, value in sets.items())
    return f"{label}: {path}: {said or 'sets nothing'}"


def _install_lines(doc: dict[str, Any]) -> list[str]:
    link, home = doc["link"], doc["home"]
    if home["path"] is None:
        return [f"install: none ({home['problem']})"]
    target = link["target"] or "missing"
    version = f" (mux {link['version']})" if link["version"] else " (not into this install)"
    lines = [f"mux link: {link['path']} -> {target}{version if link['target'] else ''}"]
    lines.append(f"MUX_HOME: {home['path']}")
    versions = doc["versions"]
    lines.append(f"versions: {len(versions)}, {_size(doc['disk_bytes'])}")
    width = max((len(v["version"]) for v in versions), default=0)
    for entry in versions:
        name = entry["version"].ljust(width)
        lines.append(f"  {name}  {_size(entry['size_bytes']):>9}  {entry['reason']}")
    return lines


def _server_lines(servers: list[dict[str, Any]]) -> list[str]:
    if not servers:
        return ["servers: none"]
    lines = [f"servers: {len(servers)}"]
    for server in servers:
        state = server["state"]
        if state == "live":
            said = f"mux {server['version']}, protocol {server['protocol_version']}"
            said += f", pid {server['pid']}"
            if server.get("restart_needed"):
                said += f"; needs a restart: {server['restart_command']}"
        else:
            said = f"{state} ({server['detail']})"
        lines.append(f"  {server['address']}: {said}")
    return lines


def status_lines(doc: dict[str, Any]) -> list[str]:
    """``mux status`` as text: one fact a line, from the document ``--json`` prints."""
    lines = _install_lines(doc)
    source = doc["source"]
    set_by = source["set_by"] or "the default"
    lines.append(f"source: {source['location']} (from {set_by})")
    lines.append(_file_line("config", doc["config"]))
    lines.append(_file_line("policy", doc["policy"]))
    skipped = doc["skipped"]
    lines.append(f"skipped: {', '.join(skipped) if skipped else 'none'}")
    held = doc["hold_until"]
    lines.append(f"held until {held} (mux update --unhold ends it)" if held else "held: no")
    lines += _server_lines(doc["servers"])
    return [safe_text(line) for line in lines]


def status_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Show this install: the mux link, MUX_HOME, the versions kept and why, their size, the
    source and where it came from, config.toml and policy.toml with what each sets, skips
    and holds, and the servers."""
    build = buildinfo.current()
    reports = query_all(every_server_address(os.environ.get(SERVER_URL_ENV)))
    servers = [verdict_document(v) for v in server_verdicts_of(reports)]
    facts = gather_status(build, reports, servers, now=time.time())
    doc = {"schema": REPORT_SCHEMA, **install_status(facts)}
    if as_json:
        print(to_json_line(doc))
        return
    for line in status_lines(doc):
        print(line)
