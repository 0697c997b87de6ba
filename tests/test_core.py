"""The pure core, updater.core: the request's decision, server verdicts, notices, the check's
report, install.json rules.

No I/O here: these are the rules ``mux update --check``, ``mux update`` and ``mux-release
repin`` act on, tested as tables and, where a rule is a property, with hypothesis. The
end-to-end tests (test_check.py, test_update.py, test_repin.py) run the same code for real.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.version import Version

from tests.support.offers import release_offer
from updater.cli.render import server_status_lines, verdict_document
from updater.config.buildinfo import BuildInfo
from updater.core.notices import (
    EVENT_RESTART_NEEDED,
    EVENT_UPDATE_AVAILABLE,
    EVENT_UPDATE_INSTALLED,
    InstalledBuild,
    link_notices,
    offer_notice,
)
from updater.core.offer import ReleaseOffer
from updater.core.report import CheckedInstall, CheckReport, plan_check
from updater.core.request import Decision, ReleaseRequest
from updater.core.retention import (
    ServerHold,
    record_install,
    record_rollback,
    rollback_choice,
    settle,
)
from updater.core.verdicts import ServerReport, server_verdicts
from updater.errors import UsageError
from updater.protocol import StatusLine

LATEST = ReleaseRequest.latest()
LATEST_DOWN = ReleaseRequest.latest(allow_downgrade=True)
EXACT = ReleaseRequest.exactly("1.0.0")
EXACT_DOWN = ReleaseRequest.exactly("1.0.0", allow_downgrade=True)


# -- ReleaseRequest.decide -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "current", "offered", "decision"),
    [
        (LATEST, None, "1.0.0", Decision.INSTALL),
        (EXACT, None, "1.0.0", Decision.INSTALL),
        (LATEST, "1.0.0", "1.0.0", Decision.UP_TO_DATE),
        (EXACT, "1.0.0", "1.0.0", Decision.UP_TO_DATE),
        (LATEST, "1.0.0", "1.1.0", Decision.UPDATE),
        (EXACT, "0.9.0", "1.0.0", Decision.UPDATE),
        (LATEST, "1.1.0", "1.0.0", Decision.NEWER_INSTALLED),
        (EXACT, "1.1.0", "1.0.0", Decision.DOWNGRADE_REFUSED),
        (EXACT_DOWN, "1.1.0", "1.0.0", Decision.DOWNGRADE),
        (LATEST_DOWN, "1.1.0", "1.0.0", Decision.DOWNGRADE),  # repin --latest --allow-downgrade
        # Versions compare as versions, not as strings.
        (LATEST, "1.9.0", "1.10.0", Decision.UPDATE),
        (LATEST, "1.0.0rc1", "1.0.0", Decision.UPDATE),
        (LATEST, "1.0.0", "1.0.0rc1", Decision.NEWER_INSTALLED),
        (LATEST, "1.0.0-rc1", "1.0.0rc1", Decision.UP_TO_DATE),  # two spellings, one version
        (LATEST, "v1.0.0", "1.0.0", Decision.UP_TO_DATE),
    ],
)
def test_decide(
    request_: ReleaseRequest, current: str | None, offered: str, decision: Decision
) -> None:
    assert request_.decide(current, offered) is decision


@pytest.mark.parametrize(
    ("decision", "installs", "offers_release"),
    [
        (Decision.INSTALL, True, True),
        (Decision.UPDATE, True, True),
        (Decision.DOWNGRADE, True, True),
        (Decision.UP_TO_DATE, False, False),
        # --check --version OLDER reports it (exit 10); mux update refuses without the flag.
        (Decision.DOWNGRADE_REFUSED, False, True),
        (Decision.NEWER_INSTALLED, False, False),
    ],
)
def test_what_each_decision_means(decision: Decision, installs: bool, offers_release: bool) -> None:
    assert (decision.installs, decision.offers_release) == (installs, offers_release)


versions = st.builds(
    lambda major, minor, patch, pre: Version(f"{major}.{minor}.{patch}{pre}"),
    st.integers(0, 30),
    st.integers(0, 30),
    st.integers(0, 30),
    st.sampled_from(["", "rc1", "rc2", "a1", "b3"]),
)
requests = st.builds(
    ReleaseRequest,
    exact_tag=st.sampled_from([None, "v1.0.0"]),
    include_pre=st.booleans(),
    allow_downgrade=st.booleans(),
)


@given(requests, versions, versions)
def test_decide_installs_exactly_what_is_newer_or_allowed(
    request_: ReleaseRequest, current: Version, offered: Version
) -> None:
    decision = request_.decide(current, offered)
    assert (decision is Decision.UP_TO_DATE) == (offered == current)
    assert (decision is Decision.UPDATE) == (offered > current)
    older = offered < current
    assert decision.installs == (offered > current or (older and request_.allow_downgrade))
    # An older release is on offer only when asked for by version, or allowed outright.
    if older and decision.offers_release:
        assert request_.exact or request_.allow_downgrade


@given(requests, versions)
def test_a_fresh_install_takes_whatever_is_offered(
    request_: ReleaseRequest, offered: Version
) -> None:
    assert request_.decide(None, offered) is Decision.INSTALL


@pytest.mark.parametrize(
    ("typed", "tag"),
    [
        ("1.2.3", "v1.2.3"),
        ("v1.2.3", "v1.2.3"),
        # As typed: the tag of a release built as 1.2.3-rc1 (install.sh asks for the same).
        ("1.2.3-rc1", "v1.2.3-rc1"),
        ("1.2.3rc1", "v1.2.3rc1"),
        (" 1.2.3 ", "v1.2.3"),
    ],
)
def test_one_tag_rule_for_an_exact_request(typed: str, tag: str) -> None:
    request_ = ReleaseRequest.from_flags(version=typed, pre=False, allow_downgrade=False)
    assert request_.tag() == tag and request_.exact


@pytest.mark.parametrize("typed", ["", "1.2", "latest", "1.2.3 4", "v", "../1.2.3"])
def test_a_version_that_names_no_release_is_a_usage_error(typed: str) -> None:
    with pytest.raises(UsageError, match="is not a release version"):
        ReleaseRequest.exactly(typed)


def test_allow_downgrade_only_means_something_with_a_version() -> None:
    assert not ReleaseRequest.from_flags(
        version=None, pre=True, allow_downgrade=True
    ).allow_downgrade
    assert ReleaseRequest.from_flags(
        version="1.0.0", pre=False, allow_downgrade=True
    ).allow_downgrade
    assert ReleaseRequest.latest().tag() is None


def test_the_cache_key_tells_requests_apart() -> None:
    keys = [
        r.cache_key()
        for r in (
            LATEST,
            ReleaseRequest.latest(include_pre=True),
            EXACT,
            ReleaseRequest.exactly("2.0.0"),
        )
    ]
    assert len({repr(k) for k in keys}) == len(keys)
    # --allow-downgrade does not change what the source offers, so not the question either.
    assert EXACT.cache_key() == EXACT_DOWN.cache_key()


# -- server verdicts -------------------------------------------------------------------------


def live(address: str, protocol: int) -> ServerReport:
    status = StatusLine("mux", protocol, "0.1.0", 42, "2026-01-01T00:00:00Z")
    return ServerReport(address, "live", status, f"mux 0.1.0, protocol {protocol}")


def dead(address: str, state: Any) -> ServerReport:
    return ServerReport(address, state, None, "no answer")


@pytest.mark.parametrize(
    ("report", "running", "offered", "now", "after"),
    [
        (live("/a.sock", 1), 1, None, False, False),
        (live("/a.sock", 1), 2, None, True, False),  # after mux update switched to protocol 2
        (live("/a.sock", 1), 1, 2, False, True),  # --check: an update would need a restart
        (live("/a.sock", 1), 2, 2, True, True),
        (live("/a.sock", 2), 1, 2, True, False),
        (dead("/b.sock", "stale"), 2, 3, False, False),
        (dead("/c.sock", "hung"), 2, 3, False, False),
        (dead("/d.sock", "garbage"), 2, 3, False, False),
    ],
)
def test_server_verdicts(
    report: ServerReport, running: int, offered: int | None, now: bool, after: bool
) -> None:
    (verdict,) = server_verdicts([report], running_protocol=running, offered_protocol=offered)
    assert (verdict.restart_needed, verdict.restart_needed_after_update) == (now, after)
    expected = f"mux server restart --socket {report.address}" if (now or after) else None
    assert verdict.restart_command == expected
    assert verdict.live == (report.state == "live")


def _with_build(report: ServerReport, version: str, installed: bool | None) -> ServerReport:
    assert report.status is not None
    status = report.status._replace(version=version)
    return report._replace(status=status, build_installed=installed)


@pytest.mark.parametrize(
    ("version", "protocol", "installed", "restart", "compatible", "deleted"),
    [
        ("1.0.0", 1, True, False, False, False),  # the current version: nothing to say
        ("0.9.0", 1, True, False, True, False),  # older, same protocol: compatible
        ("0.9.0", 1, None, False, True, False),  # where it runs from is unknown: still compatible
        ("0.9.0", 2, True, True, False, False),  # another protocol: a pending restart
        ("0.9.0", 1, False, True, False, True),  # its build was deleted: restart it
        ("1.0.0", 1, False, True, False, True),
    ],
)
def test_server_verdicts_against_the_current_version(
    version: str,
    protocol: int,
    installed: bool | None,
    restart: bool,
    compatible: bool,
    deleted: bool,
) -> None:
    report = _with_build(live("/a.sock", protocol), version, installed)
    (verdict,) = server_verdicts([report], running_protocol=1, current_version="1.0.0")
    assert (verdict.restart_needed, verdict.compatible, verdict.build_deleted) == (
        restart,
        compatible,
        deleted,
    )
    wanted = restart or compatible
    assert verdict.restart_command == ("mux server restart --socket /a.sock" if wanted else None)
    check = plan_check(
        BUILD,
        release_offer(Decision.UP_TO_DATE),
        [report],
        CheckedInstall("x"),
        cached=False,
        checked_at="",
    )
    # A compatible server is not a pending restart: the check says up to date (exit 0).
    assert check.exit_code == (20 if restart else 0)


def test_a_loopback_server_is_restarted_by_url() -> None:
    (verdict,) = server_verdicts([live("http://127.0.0.1:7070", 1)], running_protocol=2)
    assert verdict.restart_command == "mux server restart --url http://127.0.0.1:7070"


@pytest.mark.parametrize(
    ("executable", "known", "expected"),
    [
        ("/home/u/.mux/versions/1.0.0/mux", {"/home/u/.mux/versions/1.0.0/mux"}, True),
        ("/tmp/theirs/mux", {"/home/u/.mux/versions/1.0.0/mux"}, False),
        (None, {"/home/u/.mux/versions/1.0.0/mux"}, False),  # it says nothing of its build
        ("/tmp/theirs/mux", None, None),  # not asked
    ],
)
def test_a_build_mux_does_not_know_is_said_so_and_never_run(
    executable: str | None, known: set[str] | None, expected: bool | None
) -> None:
    report = live("/a.sock", 1)._replace(executable=executable)
    known_builds = frozenset(known) if known is not None else None
    (verdict,) = server_verdicts([report], running_protocol=1, known_builds=known_builds)
    assert verdict.build_known is expected
    lines = server_status_lines([verdict], 1, "0.1.0")
    assert ("not a build of this install" in lines[0]) is (expected is False)
    assert verdict_document(verdict)["build_known"] is expected


BUILD = BuildInfo(version="1.0.0", protocol_version=1, target="x", repo="", development=False)


@pytest.mark.parametrize(
    ("decision", "servers", "status", "exit_code"),
    [
        (Decision.UPDATE, [], "update-available", 10),
        (Decision.UP_TO_DATE, [], "up-to-date", 0),
        (Decision.UP_TO_DATE, [live("/a.sock", 1)], "up-to-date", 0),
        (Decision.UP_TO_DATE, [live("/a.sock", 7)], "restart-needed", 20),
        (Decision.UPDATE, [live("/a.sock", 7)], "update-available", 10),
        (Decision.NEWER_INSTALLED, [], "up-to-date", 0),
        (Decision.DOWNGRADE_REFUSED, [], "update-available", 10),
    ],
)
def test_check_status_and_exit_code(
    decision: Decision, servers: list[ServerReport], status: str, exit_code: int
) -> None:
    report = plan_check(
        BUILD, release_offer(decision), servers, CheckedInstall("x"), cached=False, checked_at="now"
    )
    assert isinstance(report, CheckReport)
    assert (report.status, report.exit_code) == (status, exit_code)


def test_the_offered_protocol_matters_only_when_an_update_is_on_offer() -> None:
    servers = [live("/a.sock", 1)]
    up_to_date = plan_check(
        BUILD,
        release_offer(Decision.UP_TO_DATE),
        servers,
        CheckedInstall("x"),
        cached=False,
        checked_at="",
    )
    update = plan_check(
        BUILD,
        release_offer(Decision.UPDATE),
        servers,
        CheckedInstall("x"),
        cached=False,
        checked_at="",
    )
    assert not up_to_date.servers[0].restart_needed_after_update
    assert update.servers[0].restart_needed_after_update


def test_a_release_without_a_build_for_this_target_is_noted() -> None:
    report = plan_check(
        BUILD,
        release_offer(Decision.UPDATE, asset=False),
        [],
        CheckedInstall("x"),
        cached=False,
        checked_at="",
    )
    assert report.notes == ("release v2.0.0 has no build for x",)


@pytest.mark.parametrize("decision", list(Decision))
def test_an_offer_survives_the_cache(decision: Decision) -> None:
    for asset in (True, False):
        offer = release_offer(decision, asset=asset)
        assert ReleaseOffer.from_cache(offer.to_cache()) == offer


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"ok": False, "error": "x"},
        {"ok": True},
        {**release_offer(Decision.UPDATE).to_cache(), "decision": "maybe"},
    ],
)
def test_anything_else_in_the_cache_is_no_offer(doc: dict[str, Any]) -> None:
    assert ReleaseOffer.from_cache(doc) is None


# -- install.json: settle, record, rollback --------------------------------------------------


def entry(version: str) -> dict[str, str]:
    return {"files_sha256": version}


@pytest.mark.parametrize(
    ("record", "active", "installed", "running", "remove", "previous"),
    [
        # Nothing is linked: nothing is touched.
        ({"active": "1", "versions": {}}, None, ["1", "2"], None, (), "unchanged"),
        # A clean switch from 1 to 2 that was recorded before the link moved.
        ({"active": "1", "previous": "0"}, "2", ["0", "1", "2"], None, ("0",), "1"),
        # Already settled: nothing changes.
        ({"active": "2", "previous": "1", "versions": {}}, "2", ["1", "2"], None, (), "unchanged"),
        # A kill between moving the link and recording it: the recorded active is previous.
        ({"active": "2", "previous": "1"}, "3", ["1", "2", "3"], None, ("1",), "2"),
        # The previous version's folder is gone: no previous.
        ({"active": "2", "previous": "1"}, "2", ["2"], None, (), None),
        # Three versions and no record: keep only the active one (and never the running one).
        ({}, "3", ["1", "2", "3"], "1", ("2",), None),
        # A record from someone else, with garbage in it.
        ({"active": 7, "previous": ["x"], "versions": "no"}, "2", ["1", "2"], None, ("1",), None),
        # "previous" naming the active version is no previous.
        ({"active": "2", "previous": "2"}, "2", ["1", "2"], None, ("1",), None),
    ],
)
def test_settle(
    record: dict[str, Any],
    active: str | None,
    installed: list[str],
    running: str | None,
    remove: tuple[str, ...],
    previous: str | None,
) -> None:
    settlement = settle(record, active=active, installed=installed, running=running)
    assert settlement.remove == remove
    if previous == "unchanged":
        assert settlement.record is None
    else:
        assert settlement.record is not None
        assert (settlement.record["active"], settlement.record["previous"]) == (active, previous)


names = st.sampled_from(["0.1.0", "0.2.0", "0.3.0", "1.0.0", "2.0.0rc1"])


def hold(version: str, address: str = "/s.sock", pid: int = 7, answering: bool = True):
    return ServerHold(version, address, pid, answering)


@pytest.mark.parametrize(
    ("active", "previous", "installed", "holds", "remove", "kept"),
    [
        # A server on 1 survives the update to 2, to 3 and to 4.
        ("2", "1", ["1", "2"], [hold("1")], (), {"2": "active", "1": "previous"}),
        (
            "3",
            "2",
            ["1", "2", "3"],
            [hold("1")],
            (),
            {"3": "active", "2": "previous", "1": "server"},
        ),
        (
            "4",
            "3",
            ["1", "3", "4"],
            [hold("1")],
            (),
            {"4": "active", "3": "previous", "1": "server"},
        ),
        # Once it is gone, the next settle removes 1.
        ("4", "3", ["1", "3", "4"], [], ("1",), {"4": "active", "3": "previous"}),
        # Two servers on two old versions; a hung one holds its version too.
        (
            "5",
            "4",
            ["1", "2", "3", "4", "5"],
            [hold("1", "/a"), hold("3", "/b", answering=False)],
            ("2",),
            {"5": "active", "4": "previous", "1": "server", "3": "server"},
        ),
        # A server on a version that is not installed (deleted by hand) keeps nothing.
        ("3", "2", ["2", "3"], [hold("1")], (), {"3": "active", "2": "previous"}),
        # A server on the active version: active is the reason.
        ("3", "2", ["1", "2", "3"], [hold("3")], ("1",), {"3": "active", "2": "previous"}),
    ],
)
def test_settle_keeps_every_version_a_server_runs_from(
    active: str,
    previous: str,
    installed: list[str],
    holds: list[ServerHold],
    remove: tuple[str, ...],
    kept: dict[str, str],
) -> None:
    record = {"active": active, "previous": previous, "versions": {v: entry(v) for v in installed}}
    settlement = settle(record, active=active, installed=installed, holds=holds)
    assert settlement.remove == remove
    assert {k.version: k.kind for k in settlement.kept} == kept
    record_after = settlement.record if settlement.record is not None else record
    assert set(record_after["versions"]) == set(kept)  # a kept version keeps its file list


def test_the_reason_names_each_server_and_its_pid() -> None:
    settlement = settle(
        {"active": "3", "previous": "2"},
        active="3",
        installed=["1", "2", "3"],
        holds=[hold("1", "/run/a.sock", 11), hold("1", "/run/b.sock", 12, answering=False)],
    )
    (server,) = [k for k in settlement.kept if k.kind == "server"]
    assert server.reason == (
        "server /run/a.sock (pid 11) runs from it; "
        "server /run/b.sock (pid 12, not answering) runs from it"
    )


@given(
    record=st.fixed_dictionaries(
        {},
        optional={
            "active": st.one_of(names, st.integers(), st.none()),
            "previous": st.one_of(names, st.integers(), st.none()),
            "versions": st.one_of(
                st.dictionaries(names, st.just({"files_sha256": "x"})), st.text()
            ),
            "bin_dir": st.just("/bin"),
        },
    ),
    installed=st.lists(names, unique=True),
    data=st.data(),
)
def test_settle_keeps_the_active_the_previous_and_the_running_version(
    record: dict[str, Any], installed: list[str], data: st.DataObject
) -> None:
    active = data.draw(st.one_of(st.none(), st.sampled_from(installed) if installed else st.none()))
    running = data.draw(st.one_of(st.none(), names))
    held = data.draw(st.lists(names, max_size=3))
    holds = [hold(version, f"/s{i}.sock", i) for i, version in enumerate(held)]
    settlement = settle(record, active=active, installed=installed, running=running, holds=holds)
    if active is None:
        assert settlement == settle({}, active=None, installed=[])
        return
    settled = settlement.record if settlement.record is not None else record
    kept = [v for v in installed if v not in settlement.remove]
    assert set(settlement.remove) <= set(installed)
    assert active in kept and (running not in settlement.remove)
    assert not set(held) & set(settlement.remove)  # never what a server runs from
    assert settled["active"] == active
    previous = settled["previous"]
    assert previous is None or (previous != active and previous in kept)
    assert set(kept) - {running, *held} <= {active, previous}  # nothing else stays
    assert {k.version for k in settlement.kept} == set(kept) | {active}  # each with a reason
    assert set(settled["versions"]) <= {active, previous, running, *held}
    assert settled.get("bin_dir") == record.get("bin_dir")  # unknown fields survive
    # Settling twice is settling once.
    again = settle(settled, active=active, installed=kept, running=running, holds=holds)
    assert again.record is None and again.remove == ()


def test_record_install_adds_the_version_and_keeps_the_rest() -> None:
    record = {"active": "1", "previous": "0", "versions": {"1": entry("1")}, "custom": [1]}
    updated = record_install(
        record,
        "2",
        archive_sha256="a",
        files_sha256="f",
        target="t",
        source="s",
        bin_dir="/bin",
    )
    assert record == {"active": "1", "previous": "0", "versions": {"1": entry("1")}, "custom": [1]}
    assert updated["active"] == "1"  # the link has not moved yet
    assert updated["versions"]["2"] == {
        "archive_sha256": "a",
        "files_sha256": "f",
        "target": "t",
        "source": "s",
        "installed_by": "mux update",
    }
    assert (updated["schema"], updated["bin_dir"], updated["custom"]) == (1, "/bin", [1])
    assert record_install(
        {"versions": "garbage"},
        "2",
        archive_sha256="a",
        files_sha256="f",
        target="t",
        source="s",
        bin_dir="/b",
    )["versions"].keys() == {"2"}


@pytest.mark.parametrize(
    ("record", "active", "installed", "choice"),
    [
        ({"previous": "1"}, "2", ["1", "2"], "1"),
        ({"previous": "1"}, "2", ["2"], None),  # its folder is gone
        ({}, "2", ["1", "2"], "1"),  # no record: the only other version
        ({}, "3", ["1", "2", "3"], None),  # no record and two others: ambiguous
        ({"previous": "2"}, "2", ["1", "2"], "1"),
        ({"previous": 5}, "2", ["2"], None),
        ({}, None, ["1"], "1"),
    ],
)
def test_rollback_choice(
    record: dict[str, Any], active: str | None, installed: list[str], choice: str | None
) -> None:
    assert rollback_choice(record, active=active, installed=installed) == choice


def test_record_rollback_swaps_active_and_previous() -> None:
    assert record_rollback({"active": "2", "previous": "1", "x": 1}, to="1", from_="2") == {
        "active": "1",
        "previous": "2",
        "x": 1,
    }


# -- what a server tells its watchers ----------------------------------------------------------


@pytest.mark.parametrize(
    ("installed", "types", "compatible"),
    [
        (InstalledBuild("1.1.0", 2), [EVENT_UPDATE_INSTALLED], True),
        (InstalledBuild("1.2.0", 3), [EVENT_UPDATE_INSTALLED, EVENT_RESTART_NEEDED], False),
        (InstalledBuild("1.2.0", None), [EVENT_UPDATE_INSTALLED], None),  # protocol unknown
        (InstalledBuild("1.0.0", 2), [EVENT_UPDATE_INSTALLED], True),  # back to the server's
    ],
)
def test_link_notices(installed: InstalledBuild, types: list[str], compatible: bool | None) -> None:
    notices = link_notices(
        server_version="1.0.0", server_protocol=2, installed=installed, restart_command="R"
    )
    assert [n.type for n in notices] == types
    data = notices[0].data
    assert (data["version"], data["protocol_version"]) == installed
    assert data["compatible"] is compatible
    assert data["restart_command"] == (None if installed.version == "1.0.0" else "R")
    if EVENT_RESTART_NEEDED in types:
        assert notices[1].data["restart_command"] == "R"
        assert notices[1].data["server_protocol_version"] == 2


@pytest.mark.parametrize(
    ("installed", "announced"),
    [("1.0.0", True), ("1.9.9", True), ("2.0.0", False), ("3.0.0", False)],
)
def test_offer_notice_only_for_a_newer_release(installed: str, announced: bool) -> None:
    notice = offer_notice(release_offer(Decision.UPDATE), installed_version=installed)
    if not announced:
        assert notice is None
        return
    assert notice is not None and notice.type == EVENT_UPDATE_AVAILABLE
    assert notice.data == {  # the check's "latest", and what installs it
        **release_offer(Decision.UPDATE).to_cache()["latest"],
        "install_command": "mux update",
        "managed_by": None,
        "critical": False,  # no signed lifecycle record: nothing critical, no notes
        "notes": "",
    }


def test_offer_notice_names_the_packager_and_waits_out_its_delay() -> None:
    """The offer was released at 2026-01-01T00:00:00Z; the packager waits a day."""
    from updater.core.report import Manager

    released = 1767225600.0
    brew = Manager("packager", "Homebrew", "brew upgrade mux", "/x/mux-packager.json", 86400.0)
    offer = release_offer(Decision.UPDATE)
    early = offer_notice(offer, installed_version="1.0.0", manager=brew, now=released + 3600)
    assert early is None
    due = offer_notice(offer, installed_version="1.0.0", manager=brew, now=released + 86400)
    assert due is not None
    assert due.data["install_command"] == "brew upgrade mux"
    assert due.data["managed_by"] == brew.to_json()
    admin = Manager("policy", "the machine policy", None, "/etc/mux/policy.toml")
    ruled = offer_notice(offer, installed_version="1.0.0", manager=admin, now=released)
    assert ruled is not None and ruled.data["install_command"] is None


# -- holds by running processes, and settling the record only (review-11 F1, F3) -------------


def test_processes_that_hold_a_version_keep_it_and_servers_name_themselves():
    from updater.core.retention import InUseHold, ServerHold, settle

    record = {"active": "1.3.0", "previous": "1.2.0", "versions": {}}
    installed = ["1.0.0", "1.1.0", "1.2.0", "1.3.0", "0.9.0"]
    holds = [
        ServerHold("1.0.0", "/run/a.sock", 41, True),
        InUseHold("1.0.0", (41, 77)),  # the server, and a watcher of it
        InUseHold("1.1.0", (55,)),
        InUseHold("0.9.0"),  # the OS named no pid
    ]
    settled = settle(record, active="1.3.0", installed=installed, holds=holds)
    assert settled.remove == ()
    reasons = {k.version: (k.kind, k.reason) for k in settled.kept}
    assert reasons["1.0.0"] == (
        "server",
        "server /run/a.sock (pid 41) runs from it; in use by a running mux (pid 77)",
    )
    assert reasons["1.1.0"] == ("in-use", "in use by a running mux (pid 55)")
    assert reasons["0.9.0"] == ("in-use", "in use by a running mux")
    only_server = settle(
        record,
        active="1.3.0",
        installed=installed,
        holds=[ServerHold("1.0.0", "/run/a.sock", 41, False), InUseHold("1.0.0", (41,))],
    )
    assert {k.version: k.reason for k in only_server.kept}["1.0.0"] == (
        "server /run/a.sock (pid 41, not answering) runs from it"
    )
    assert set(only_server.remove) == {"1.1.0", "0.9.0"}


def test_settling_the_record_only_removes_nothing_and_keeps_every_entry():
    from updater.core.retention import settle

    entries = {v: {"files_sha256": v} for v in ("1.0.0", "1.1.0", "1.2.0")}
    record = {"active": "1.1.0", "previous": "1.0.0", "versions": entries}
    # A kill between moving the link to 1.2.0 and recording it: the record follows the link.
    settled = settle(record, active="1.2.0", installed=list(entries), prune=False)
    assert settled.remove == ()
    assert settled.record is not None
    assert (settled.record["active"], settled.record["previous"]) == ("1.2.0", "1.1.0")
    assert settled.record["versions"] == entries
    pruned = settle(record, active="1.2.0", installed=list(entries))
    assert pruned.remove == ("1.0.0",)
