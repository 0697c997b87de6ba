"""The plugin of docs/scripting.md against every kind of ``update-available`` a server sends.

``tests/test_watch.py`` runs the plugin against a real server; here ``mux server watch`` is a
stand-in on PATH that prints lines made by mux's own event code (``plan.offer_notice``,
``encode``), so that each way an update is installed (mux update, a packager, an
administrator) reaches the exact script.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.offers import release_offer
from tests.support.watching import plugin_script
from updater.core.notices import offer_notice
from updater.core.report import Manager
from updater.core.request import Decision
from updater.daemon.hub import encode
from updater.protocol import StatusLine
from updater.servers.watch import first_line, server_event


def _lines() -> bytes:
    offer = release_offer(Decision.UPDATE)
    status = StatusLine("mux", 2, "1.0.0", 42, "2026-01-01T00:00:00Z", "/v/1.0.0/mux")
    entry = {"address": "/run/mux/default.sock", "state": "live", "version": "1.0.0"}
    brew = Manager("packager", "Homebrew", "brew upgrade mux", "/x/mux-packager.json", 0.0)
    admin = Manager("policy", "the machine policy", None, "/etc/mux/policy.toml")
    # What `mux server watch` prints: the status line itself, then the server's entry.
    at = "2026-01-01T00:00:01Z"
    lines = [encode(first_line(status.to_json())), encode(server_event(entry, at))]
    for manager in (None, brew, admin):
        notice = offer_notice(offer, installed_version="1.0.0", manager=manager)
        assert notice is not None
        lines.append(encode({"type": notice.type, "data": notice.data, "at": at}))
    lines.append(encode({"type": "some-later-event", "data": {"version": "9"}}))
    return b"".join(lines)


@pytest.mark.parametrize("shell", ["dash", "sh", "busybox"])
def test_the_plugin_says_what_installs_the_update(tmp_path: Path, shell: str) -> None:
    command = [shell] if shell != "busybox" else ["busybox", "sh"]
    if shutil.which(command[0]) is None:
        pytest.skip(f"{command[0]} is not installed")
    stream = tmp_path / "stream.ndjson"
    stream.write_bytes(_lines())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "mux"  # `mux server watch` that prints the recorded stream
    fake.write_text(f'#!/bin/sh\n[ "$1 $2" = "server watch" ] || exit 2\ncat "{stream}"\n')
    fake.chmod(0o755)
    plugin = tmp_path / "mux-notify"
    plugin.write_text(plugin_script())
    result = subprocess.run(
        [*command, str(plugin)],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.splitlines() == [
        "watching mux 1.0.0",
        "mux 2.0.0 is available: mux update",
        "mux 2.0.0 is available: brew upgrade mux",
        "mux 2.0.0 is available: only an administrator can install it here",
    ]
