"""One JSON language (issue 38, item 10): every document mux prints carries ``schema``, errors
are objects with a kind and a layer (usage errors click finds included), the watch stream's
lines are typed and its events timed, and one idea has one name (the schema 1 names kept
beside the new ones for one schema version). In-process, through the renderer and the hub."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.support.offers import release_offer
from updater.cli import app as cli_app
from updater.cli.render import (
    REPORT_SCHEMA,
    check_document,
    error_document,
    report_error,
    servers_document,
    update_document,
    verdict_document,
    version_document,
)
from updater.commands.update import UpdateAction, UpdatePlan, UpdateResult
from updater.config import buildinfo
from updater.core.offer import OfferedAsset, ReleaseOffer
from updater.core.report import CheckReport
from updater.core.request import Decision
from updater.core.transfer import Transfer
from updater.core.verdicts import ServerReport, server_verdicts
from updater.daemon.hub import WatchHub
from updater.errors import MuxError, NetworkError, UsageError, VerificationError
from updater.install.layout import Layout
from updater.protocol import StatusLine, WatchEvent, parse_watch_event
from updater.servers.watch import first_line
from updater.trust.layers import layer_failure

RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def test_the_schema_is_bumped() -> None:
    assert REPORT_SCHEMA == 2


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "kind", "layer", "code"),
    [
        (
            layer_failure("signature", "no trusted key verifies it", "pass --trust-key"),
            "verification",
            "signature",
            3,
        ),
        (VerificationError("the feed expired at 2026-01-01 00:00:00 UTC"), "verification", None, 3),
        (UsageError("--hold: '7' has no unit"), "usage", None, 2),
        (NetworkError("cannot resolve example.invalid", hint="check the name"), "network", None, 1),
        (MuxError("something else"), "error", None, 1),
    ],
)
def test_an_error_is_an_object_with_its_kind_and_layer(
    error: MuxError, kind: str, layer: str | None, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert report_error(error, as_json=True) == code
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc == {
        "schema": 2,
        "error": {"kind": kind, "layer": layer, "message": error.message, "hint": error.hint},
        "exit_code": code,
        "hint": error.hint,  # schema 1's top-level hint, kept for schema 2
    }
    assert doc == error_document(error)
    assert err == f"mux: error: {error}\n"


def test_without_json_an_error_is_one_line_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert report_error(UsageError("bad"), as_json=False) == 2
    assert capsys.readouterr() == ("", "mux: error: bad\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["update", "--json", "--no-such-flag"], "No such option: --no-such-flag"),
        (["server", "status", "--json", "--bogus"], "No such option: --bogus"),
        (["update", "--check", "--json", "--max-age"], "Option '--max-age' requires an argument."),
    ],
)
def test_a_usage_error_click_finds_is_json_too_under_json(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_app.run(args) == 2
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["schema"] == 2 and doc["exit_code"] == 2
    assert doc["error"]["kind"] == "usage" and doc["error"]["layer"] is None
    assert doc["error"]["message"] == message
    # The person reads click's own words, in one line as every error.
    assert err.startswith("mux: error: ") and message in err and err.count("\n") == 1, err


def test_a_usage_error_without_json_prints_no_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_app.run(["update", "--no-such-flag"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "mux: error: No such option: --no-such-flag (see mux update --help)\n"


def test_a_bare_command_still_shows_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_app.run(["server"]) == 2
    out, err = capsys.readouterr()
    assert "Usage: mux server" in out + err and "mux: error" not in out + err


# -- check and update ------------------------------------------------------------------------


def _offer() -> ReleaseOffer:
    return release_offer(Decision.UPDATE)._replace(
        asset=OfferedAsset("mux-x.tar.gz", 1234, "ab" * 32)
    )


def _live(version: str, protocol: int) -> ServerReport:
    status = StatusLine("mux", protocol, version, 42, "2026-01-01T00:00:00Z", f"/v/{version}/mux")
    return ServerReport("/run/mux/a.sock", "live", status, "ok", executable=f"/v/{version}/mux")


def test_the_check_names_a_packager_s_delay_and_sizes_in_bytes() -> None:
    report = CheckReport(
        build=buildinfo.current(),
        offer=_offer(),
        servers=(),
        cached=False,
        checked_at="2026-01-02T00:00:00Z",
        held_until="2026-01-03T00:00:00Z",
    )
    doc = json.loads(json.dumps(check_document(report)))
    assert doc["schema"] == 2
    assert doc["packager_delay_until"] == doc["held_until"] == "2026-01-03T00:00:00Z"
    assert doc["hold_until"] is None  # the user's own hold: another idea, another name
    assert doc["latest"]["asset"]["size_bytes"] == doc["latest"]["asset"]["size"] == 1234
    assert doc["current"]["version"] == report.build.version


def test_the_update_names_its_versions_as_the_check_does() -> None:
    result = UpdateResult(
        action=UpdateAction.DRY_RUN,
        layout=Layout("/home/u/.local/share/mux", "/home/u/.local/bin"),
        from_version="1.0.0",
        to_version="2.0.0",
        target="x86_64-unknown-linux-gnu",
        protocol_version=2,
        plan=UpdatePlan(
            tag="v2.0.0",
            release_url="/feed/v2.0.0/",
            asset="mux-x.tar.gz",
            asset_url="/feed/v2.0.0/mux-x.tar.gz",
            size=1234,
            sha256="ab" * 32,
            checks=("signature",),
            version_dir="/home/u/.local/share/mux/versions/2.0.0",
            link="/home/u/.local/bin/mux",
        ),
        transfer=Transfer("full", 1234, 1234),
    )
    doc = json.loads(json.dumps(update_document(result)))
    assert doc["schema"] == 2
    assert doc["current"] == {"version": "1.0.0"}
    assert doc["latest"] == {"version": "2.0.0", "protocol_version": 2}
    assert (doc["from_version"], doc["to_version"]) == ("1.0.0", "2.0.0")  # kept for schema 2
    assert doc["plan"]["size_bytes"] == doc["plan"]["size"] == 1234
    assert doc["transfer"]["archive_size_bytes"] == doc["transfer"]["archive_size"] == 1234


def test_a_first_install_has_no_current_version() -> None:
    result = UpdateResult(
        action=UpdateAction.UPDATED,
        layout=Layout("/h", "/b"),
        from_version=None,
        to_version="1.0.0",
        target="x86_64-unknown-linux-gnu",
        protocol_version=1,
    )
    doc = update_document(result)
    assert doc["current"] == {"version": None} and doc["latest"]["version"] == "1.0.0"


# -- servers: `compatible` has one meaning ---------------------------------------------------


@pytest.mark.parametrize(
    ("version", "protocol", "compatible", "move"),
    [
        ("1.0.0", 1, True, False),  # the same version: same protocol, nothing to move
        ("0.9.0", 1, True, True),  # another version, same protocol: move when convenient
        ("0.9.0", 2, False, False),  # another protocol: a restart is needed
    ],
)
def test_compatible_means_the_same_protocol_everywhere(
    version: str, protocol: int, compatible: bool, move: bool
) -> None:
    (verdict,) = server_verdicts(
        [_live(version, protocol)], running_protocol=1, current_version="1.0.0"
    )
    entry = verdict_document(verdict)
    assert (entry["compatible"], entry["move_when_convenient"]) == (compatible, move)
    assert servers_document([verdict]) == {"schema": 2, "servers": [entry]}


def test_a_server_without_a_status_line_is_neither() -> None:
    report = ServerReport("/run/mux/b.sock", "stale", None, "connection refused")
    (verdict,) = server_verdicts([report], running_protocol=1)
    assert verdict_document(verdict)["compatible"] is None


def test_mux_version_json_carries_the_schema() -> None:
    doc = version_document(buildinfo.current())
    assert doc["schema"] == 2 and doc["version"] == buildinfo.current().version


# -- the watch stream ------------------------------------------------------------------------


def _queued(hub: WatchHub, status: dict[str, Any]) -> list[dict[str, Any]]:
    watcher = hub.admit(status)
    assert watcher is not None
    try:
        return [json.loads(line) for line in watcher.lines]
    finally:
        hub.abandon(watcher)


def test_the_first_line_is_typed_and_events_are_timed() -> None:
    hub = WatchHub()
    try:
        hub.publish(WatchEvent("update-available", {"version": "2.0.0"}))
        first, event = _queued(hub, {"service": "mux", "version": "1.0.0"})
        assert first == {"service": "mux", "version": "1.0.0", "type": "status", "schema": 2}
        assert event["type"] == "update-available" and RFC3339.fullmatch(event["at"])
        # A watcher that connects later is told when it happened, not when it connected.
        _first, again = _queued(hub, {"service": "mux"})
        assert again == event
    finally:
        hub.close("the test is over")


def test_an_event_s_time_survives_the_client_and_an_older_server_says_none() -> None:
    line = b'{"type": "update-installed", "data": {}, "at": "2026-01-01T00:00:00Z"}'
    assert parse_watch_event(line).to_json()["at"] == "2026-01-01T00:00:00Z"
    older = parse_watch_event(b'{"type": "update-installed", "data": {}}')
    assert older.at is None and "at" not in older.to_json()


def test_an_older_server_s_first_line_is_schema_1() -> None:
    assert first_line({"service": "mux"}) == {"service": "mux", "type": "status", "schema": 1}
    assert first_line({"service": "mux", "schema": 2})["schema"] == 2
    assert first_line({"service": "mux", "schema": True})["schema"] == 1  # not a number
