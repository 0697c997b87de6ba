"""Skip and hold, failed starts and notice rates: the pure rules, the state file, the CLI.

The rules (updater.core.userstate, updater.core.autoinstall) are pure functions, tested as
such; the state file is real (FIFOs, garbage, concurrent writers); the flags run the real
``mux`` against a loopback feed and show what ``--check --json`` and ``mux update`` make of
them, and the background check and watch events against a real server.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.feeds import trusting, write_feed, write_release
from tests.support.inprocess import run_in_process
from tests.support.installs import bootstrap
from tests.support.releases import make_feed
from tests.support.watching import event, spawn, watch_start
from updater.commands import userstate as state_file
from updater.core.autoinstall import LiveServer, allowed_on, decide_auto_install
from updater.core.userstate import (
    DAY,
    UserState,
    may_notify,
    parse_state,
    rollback_due,
    state_document,
    with_failed_start,
    with_hold,
    with_notice,
    with_rollback,
    with_skip,
    withheld,
    without_failure,
    without_hold,
    without_skip,
)
from updater.errors import MuxError

NOW = 1_800_000_000.0


# -- the pure rules ---------------------------------------------------------------------------


def test_skipped_failed_and_held_versions_are_withheld_in_that_order() -> None:
    state = UserState()
    assert withheld(state, "1.1.0", NOW) is None
    skipped = with_skip(state, "v1.1.0")  # typed with its v: the release's spelling is kept
    assert skipped.skipped == ("1.1.0",)
    why = withheld(skipped, "1.1.0", NOW)
    assert why is not None and (why.reason, why.undo) == ("skipped", "mux update --unskip 1.1.0")
    assert withheld(skipped, "1.2.0", NOW) is None  # a newer release is offered
    failed = with_failed_start(state, "1.1.0", NOW, "it hung")
    why = withheld(failed, "1.1.0", NOW)
    assert why is not None and why.reason == "failed" and "it hung" in why.detail
    assert why.undo == "mux update --version 1.1.0"
    assert withheld(failed, "1.2.0", NOW) is None  # until a newer release
    held = with_hold(state, NOW + 7 * DAY)
    why = withheld(held, "1.2.0", NOW)
    assert why is not None and (why.reason, why.undo) == ("held", "mux update --unhold")
    assert withheld(held, "1.2.0", NOW + 7 * DAY) is None  # a hold ends on its own
    both = with_hold(with_skip(state, "1.1.0"), NOW + DAY)
    assert withheld(both, "1.1.0", NOW).reason == "skipped"  # type: ignore[union-attr]
    assert withheld(without_skip(both, "1.1.0"), "1.1.0", NOW).reason == "held"  # type: ignore[union-attr]
    assert withheld(without_hold(without_skip(both, "1.1.0")), "1.1.0", NOW) is None


def test_two_failed_starts_of_the_active_version_move_the_link_back_once() -> None:
    once = with_failed_start(UserState(), "1.1.0", NOW, "exit 1")
    assert not rollback_due(once, "1.1.0", active="1.1.0")
    twice = with_failed_start(once, "1.1.0", NOW + 1, "exit 1")
    assert twice.failure("1.1.0").starts == 2  # type: ignore[union-attr]
    assert rollback_due(twice, "1.1.0", active="1.1.0")
    assert not rollback_due(twice, "1.1.0", active="1.0.0")  # not the active version
    back = with_rollback(twice, "1.1.0", "1.0.0")
    assert not rollback_due(back, "1.1.0", active="1.1.0")  # done once
    assert without_failure(back, "1.1.0").failed == ()


def test_at_most_one_notice_per_version_per_surface_per_day() -> None:
    state = UserState()
    assert may_notify(state, "watch:a", "1.1.0", NOW)
    told = with_notice(state, "watch:a", "1.1.0", NOW)
    assert not may_notify(told, "watch:a", "1.1.0", NOW + DAY - 1)
    assert may_notify(told, "watch:a", "1.1.0", NOW + DAY)  # the next day
    assert may_notify(told, "watch:b", "1.1.0", NOW)  # another surface
    assert may_notify(told, "watch:a", "1.2.0", NOW)  # another version
    assert may_notify(told, "watch:a", "1.1.0", NOW - 60)  # a clock that went back
    # Old entries are dropped as new ones are written: the file stays small.
    later = with_notice(told, "watch:b", "1.2.0", NOW + 2 * DAY)
    assert [surface for surface, _ in later.notices] == ["watch:b"]


def test_the_state_document_round_trips_and_garbage_inside_it_is_dropped() -> None:
    state = with_notice(
        with_rollback(
            with_failed_start(with_hold(with_skip(UserState(), "1.1.0"), NOW), "1.2.0", NOW, "x"),
            "1.2.0",
            "1.0.0",
        ),
        "watch:/s.sock",
        "1.3.0",
        NOW,
    )
    assert parse_state(json.loads(json.dumps(state_document(state)))) == state
    messy = {
        "schema": 1,
        "skipped": ["1.1.0", 3, ""],
        "hold_until": "tomorrow",
        "failed_starts": {"1.2.0": {"count": "2"}, "1.3.0": {"count": 1, "last_at": NOW}},
        "notices": {"watch:a": {"1.1.0": "now"}},
    }
    parsed = parse_state(messy)
    assert parsed is not None
    assert parsed.skipped == ("1.1.0",) and parsed.hold_until is None
    assert [f.version for f in parsed.failed] == ["1.3.0"] and parsed.notices == ()
    assert parse_state({"schema": 2}) is None and parse_state([]) is None


SERVERS = (LiveServer("/run/a.sock", 2), LiveServer("/run/b.sock", 2))


@pytest.mark.parametrize(
    ("facts", "install", "reason"),
    [
        ({}, True, 'auto_install = "compatible"'),
        ({"mode": "off"}, False, "auto_install is off"),
        ({"updates": "check-only"}, False, 'the machine policy sets updates = "check-only"'),
        ({"managed_by": "Homebrew"}, False, "Homebrew installs updates of this mux"),
        ({"is_update": False}, False, "is not newer than the installed mux"),
        ({"withheld": "mux 1.1.0 is skipped"}, False, "mux 1.1.0 is skipped"),
        ({"protocol_version": 3}, False, "it would need a restart"),
        ({"protocol_version": 3, "mode": "all"}, True, 'auto_install = "all"'),
        ({"servers": ()}, True, 'auto_install = "compatible"'),  # no server: nothing to restart
    ],
)
def test_the_auto_install_rule(facts: dict, install: bool, reason: str) -> None:
    base = {
        "mode": "compatible",
        "updates": "enabled",
        "managed_by": None,
        "version": "1.1.0",
        "protocol_version": 2,
        "is_update": True,
        "withheld": None,
        "servers": SERVERS,
    }
    decided = decide_auto_install(**{**base, **facts})
    assert decided.install is install and reason in decided.reason, decided
    if facts.get("mode") == "all":
        assert decided.restart_needed == ("/run/a.sock", "/run/b.sock")


def test_the_network_s_cost_is_asked_last_and_unknown_is_not_metered() -> None:
    assert allowed_on(None, download_on_metered=False) is None
    assert allowed_on(False, download_on_metered=False) is None
    assert "metered" in (allowed_on(True, download_on_metered=False) or "")
    assert allowed_on(True, download_on_metered=True) is None


# -- the state file ---------------------------------------------------------------------------


def test_the_state_file_is_private_and_a_missing_one_is_empty(tmp_path: Path) -> None:
    path = str(tmp_path / "state" / "update-state.json")
    assert state_file.read_state(path) == UserState()
    state_file.change_state(path, lambda s: with_skip(s, "1.1.0"))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert state_file.read_state(path).skipped == ("1.1.0",)


@pytest.mark.parametrize("kind", ["fifo", "garbage", "other-schema", "folder"])
def test_a_state_file_mux_cannot_take_is_one_error_never_a_hang(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "update-state.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "garbage":
        path.write_text("{not json")
    elif kind == "other-schema":
        path.write_text('{"schema": 99}')
    else:
        path.mkdir()
    with pytest.raises(MuxError, match=f"cannot read {path}") as refused:
        state_file.read_state(str(path))
    assert refused.value.hint and "remove it" in refused.value.hint


def test_concurrent_writers_never_lose_each_other_s_change(tmp_path: Path) -> None:
    """Eight processes each skip their own version at once: all eight are kept."""
    path = tmp_path / "update-state.json"
    code = (
        "import sys; from updater.commands.userstate import change_state;"
        "from updater.core.userstate import with_skip;"
        "change_state(sys.argv[1], lambda s: with_skip(s, sys.argv[2]))"
    )
    writers = [
        subprocess.Popen([sys.executable, "-c", code, str(path), f"1.{n}.0"]) for n in range(8)
    ]
    assert [w.wait(60) for w in writers] == [0] * 8
    assert sorted(state_file.read_state(str(path)).skipped) == [f"1.{n}.0" for n in range(8)]


# -- the flags, and what the check and mux update make of them ---------------------------------


@pytest.fixture
def feed(tmp_path: Path) -> Path:
    root = tmp_path / "check-feed"
    for version in ("1.0.0", "9.0.0"):
        write_release(root, version)
    write_feed(root, [("v1.0.0", False), ("v9.0.0", False)])
    return root


def check_doc(env: dict[str, str], feed: Path, *extra: str) -> tuple[int, dict]:
    result = run_in_process(
        ["update", "--check", "--json", "--source", str(feed), *trusting(), *extra], env
    )
    return result.returncode, json.loads(result.stdout)


def test_skip_and_hold_are_kept_shown_by_the_check_and_undone(
    sandbox_env: dict[str, str], feed: Path
) -> None:
    code, doc = check_doc(sandbox_env, feed)
    assert (code, doc["update_available"], doc["withheld"]) == (10, True, None)
    skipped = run_in_process(["update", "--skip", "9.0.0"], sandbox_env)
    assert skipped.returncode == 0, skipped.stderr
    assert skipped.stdout.strip() == (
        "mux 9.0.0 will not be offered or installed automatically (mux update --unskip 9.0.0 "
        "undoes it)"
    )
    state = Path(sandbox_env["XDG_STATE_HOME"]) / "mux" / "update-state.json"
    assert json.loads(state.read_text())["skipped"] == ["9.0.0"]
    for extra in ((), ("--max-age", "1h")):  # the cached answer says the same
        code, doc = check_doc(sandbox_env, feed, *extra)
        assert (code, doc["status"], doc["update_available"]) == (0, "up-to-date", False)
        assert doc["withheld"]["reason"] == "skipped" and doc["skipped"] == ["9.0.0"]
        assert doc["install_command"] is None
    # Asked for by version, it is still there for the asking.
    code, doc = check_doc(sandbox_env, feed, "--version", "9.0.0")
    assert (code, doc["withheld"]) == (10, None)
    held = run_in_process(["update", "--hold", "7d", "--json"], sandbox_env)
    assert held.returncode == 0 and json.loads(held.stdout)["action"] == "hold"
    assert json.loads(held.stdout)["schema"] == 2  # every document mux prints says its schema
    assert run_in_process(["update", "--unskip", "9.0.0"], sandbox_env).returncode == 0
    code, doc = check_doc(sandbox_env, feed)
    assert (code, doc["withheld"]["reason"]) == (0, "held")
    until = doc["hold_until"]
    assert until is not None and doc["withheld"]["until"] == until
    text = run_in_process(["update", "--check", "--source", str(feed), *trusting()], sandbox_env)
    assert "mux 9.0.0 is not offered (held)" in text.stdout
    assert "note: updates are held until" in text.stdout
    assert (
        run_in_process(["update", "--unhold"], sandbox_env).stdout.strip()
        == "updates are offered again"
    )
    code, doc = check_doc(sandbox_env, feed)
    assert (code, doc["withheld"], doc["hold_until"]) == (10, None, None)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--skip", "soon"], "--skip 'soon' is not a release version"),
        (["--hold", "forever"], "--hold: invalid duration"),
        (["--hold", "400d"], "give a duration from 1s to 366d"),
        (["--skip", "1.0.0", "--hold", "1d"], "--skip and --hold do not go together"),
        (["--unhold", "--check"], "--check and --unhold do not go together"),
    ],
)
def test_bad_skip_and_hold_flags_are_usage_errors(
    sandbox_env: dict[str, str], args: list[str], words: str
) -> None:
    result = run_in_process(["update", *args], sandbox_env)
    assert result.returncode == 2, result.stderr
    assert words in result.stderr


def test_mux_update_honours_skip_and_hold_and_version_bypasses_them(
    tmp_path: Path, sandbox_env: dict[str, str]
) -> None:
    feed = make_feed(tmp_path, versions=["1.0.0", "1.1.0"])
    mux = bootstrap(
        tmp_path,
        sandbox_env,
        source=str(feed.path),
        version="1.0.0",
        public_key=feed.keypair.public_key,
    )
    assert mux.run("update", "--skip", "1.1.0").returncode == 0
    result = mux.run("update", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["action"], doc["withheld"]["reason"]) == ("withheld", "skipped")
    assert mux.active() == "1.0.0"
    text = mux.run("update")
    assert text.stdout.splitlines()[:3] == [
        "mux 1.0.0 stays: mux 1.1.0 is skipped (mux update --skip 1.1.0)",
        "  to have it offered again: mux update --unskip 1.1.0",
        "  to install it anyway: mux update --version 1.1.0",
    ]
    assert mux.run("update", "--version", "1.1.0").returncode == 0
    assert mux.active() == "1.1.0"


# -- the background check and the watch stream --------------------------------------------------


def test_a_server_tells_of_a_version_once_a_day_even_after_a_restart(
    tmp_path: Path, sandbox_env: dict[str, str]
) -> None:
    feed = make_feed(tmp_path, versions=["1.0.0", "1.1.0"])
    env = {**sandbox_env, "MUX_UPDATE_CHECK_INTERVAL": "1"}
    mux = bootstrap(
        tmp_path, env, source=str(feed.path), version="1.0.0", public_key=feed.keypair.public_key
    )
    socket = Path(env["XDG_RUNTIME_DIR"]) / "mux" / "once.sock"
    log = socket.with_suffix(".log")

    def watch():
        watcher, lines = spawn(mux, "server", "watch", "--socket", str(socket))
        watch_start(lines)
        return watcher, lines

    assert mux.run("server", "start", "--socket", str(socket)).returncode == 0
    watcher, lines = watch()
    kind, data = event(lines.next(60))
    assert (kind, data["version"]) == ("update-available", "1.1.0")
    assert mux.run("server", "restart", "--socket", str(socket)).returncode == 0
    assert [event(line)[0] for line in lines.rest()] == ["server-stopping"]
    watcher.wait(10)
    watcher, lines = watch()  # the new server on the same socket: the same surface
    deadline = time.monotonic() + 60
    while "announced here within the last day: not again" not in log.read_text():
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)  # polling the log for a condition, with a deadline
    # Another surface (another socket) still tells of it.
    other = Path(env["XDG_RUNTIME_DIR"]) / "mux" / "other.sock"
    assert mux.run("server", "start", "--socket", str(other)).returncode == 0
    other_watcher, other_lines = spawn(mux, "server", "watch", "--socket", str(other))
    watch_start(other_lines)
    assert event(other_lines.next(60))[0] == "update-available"
    assert mux.run("server", "stop", "--socket", str(socket)).returncode == 0
    assert [event(line)[0] for line in lines.rest()] == ["server-stopping"]
    for process in (watcher, other_watcher):
        process.terminate()
        process.wait(10)
