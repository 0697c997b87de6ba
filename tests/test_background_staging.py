"""Background staging (``auto_install = "download"``), in-process: the install child's own
:func:`~updater.commands.autoinstall.run_auto_install` and ``mux update --stage``'s
:func:`~updater.commands.update.run_update`, against a loopback feed and a real install.

The servers that run it on a timer, their watchers and ``CI`` are in tests/test_auto_install.py;
the rules themselves (pure) are tested here first.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import stress
from tests.support.installs import Install, bootstrap, leftovers
from tests.support.releases import Feed, flip_byte, make_feed, make_release, serve_directory
from updater.commands.autoinstall import run_auto_install
from updater.config import buildinfo, settings
from updater.config.settings import Settings
from updater.core.autoinstall import REASON_CI, decide_auto_install
from updater.core.userstate import (
    MAX_FAILED_STAGINGS,
    UserState,
    parse_state,
    staging_failed,
    state_document,
    with_failed_staging,
)

NOW = 1767000000.0


def _decide(mode: str, **facts: object):
    base: dict[str, object] = {
        "mode": mode,
        "updates": "enabled",
        "managed_by": None,
        "version": "1.1.0",
        "protocol_version": 3,
        "is_update": True,
        "withheld": None,
        "servers": (),
    }
    return decide_auto_install(**{**base, **facts})  # type: ignore[arg-type]


def test_download_stages_whatever_the_servers_speak_and_ci_stops_every_mode() -> None:
    from updater.core.autoinstall import LiveServer

    other = (LiveServer("/run/s.sock", 2),)
    staged = _decide("download", servers=other)
    assert (staged.install, staged.stage_only, staged.restart_needed) == (True, True, ())
    assert staged.reason == 'auto_install = "download"'
    assert not _decide("compatible", servers=other).install  # it would need a restart
    for mode in ("download", "compatible", "all"):
        refused = _decide(mode, ci=True)
        assert (refused.install, refused.reason) == (False, REASON_CI)
    assert _decide("off", ci=True).reason == "auto_install is off"  # the user did not opt in
    held = _decide("download", withheld="updates are held")
    assert (held.install, held.reason, held.stage_only) == (False, "updates are held", True)
    assert _decide("download").to_json()["stage_only"] is True


def test_a_failed_staging_is_remembered_for_its_version_and_survives_the_file() -> None:
    state = with_failed_staging(UserState(), "1.1.0", NOW, "the archive's digest differs")
    text = staging_failed(state, "1.1.0")
    assert text is not None and "the archive's digest differs" in text
    assert staging_failed(state, "1.2.0") is None  # a newer release is tried
    again = parse_state(json.loads(json.dumps(state_document(state))))
    assert again is not None and again.failed_stagings == state.failed_stagings
    for n in range(MAX_FAILED_STAGINGS + 3):
        state = with_failed_staging(state, f"2.{n}.0", NOW + n, "")
    assert len(state.failed_stagings) == MAX_FAILED_STAGINGS
    assert staging_failed(state, "1.1.0") is None and staging_failed(state, "2.18.0")
    broken = {"schema": 1, "failed_stagings": {"1.0.0": {"at": "soon"}, "1.1.0": [1]}}
    parsed = parse_state(broken)
    assert parsed is not None and parsed.failed_stagings == ()


@pytest.fixture
def feed(tmp_path: Path) -> Feed:
    return make_feed(tmp_path / "f", versions=["0.1.0"])


@pytest.fixture
def installed(tmp_path: Path, sandbox_env: dict[str, str], feed: Feed, monkeypatch):
    """An install of 0.1.0 from a loopback feed; this process's user dirs are the sandbox's
    (the install child's state file, the check cache)."""
    with serve_directory(feed.path) as url:
        install = bootstrap(
            tmp_path, sandbox_env, source=url, version="0.1.0", public_key=feed.keypair.public_key
        )
        for name in ("HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR"):
            monkeypatch.setenv(name, sandbox_env[name])
        monkeypatch.delenv("CI", raising=False)
        yield install


def _settings(install: Install, feed: Feed, **changes: object) -> Settings:
    loaded = settings.load(
        install.env,
        flags=settings.Requested(home=install.home, trust_keys=[feed.keypair.public_key]),
        development=True,
    )
    return loaded._replace(**changes)


def _record(install: Install) -> dict[str, object]:
    return json.loads((install.home / "install.json").read_text())


def test_download_stages_and_installs_nothing(installed: Install, feed: Feed) -> None:
    make_release(feed.path, "0.2.0", protocol_version=1, keypair=feed.keypair)
    answer = run_auto_install(
        "0.2.0",
        1,
        _settings(installed, feed, auto_install="download"),
        buildinfo.current(),
        metered=lambda: False,
    )
    assert (answer["ok"], answer["action"]) == (True, "staged"), answer
    staged = answer["staged"]
    assert isinstance(staged, dict) and staged["version"] == "0.2.0" and staged["size_bytes"] > 0
    assert installed.active() == "0.1.0"
    assert (installed.home / "versions" / "0.2.0" / "mux").exists()
    again = run_auto_install(
        "0.2.0",
        1,
        _settings(installed, feed, auto_install="download"),
        buildinfo.current(),
        metered=lambda: False,
    )
    assert again["action"] == "skipped" and again["reason"] == (
        "mux 0.2.0 is staged: mux update applies it"
    )


def test_compatible_stages_first_then_applies_the_staged_copy(
    installed: Install, feed: Feed
) -> None:
    make_release(feed.path, "0.2.0", protocol_version=1, keypair=feed.keypair)
    answer = run_auto_install(
        "0.2.0",
        1,
        _settings(installed, feed, auto_install="compatible"),
        buildinfo.current(),
        metered=lambda: False,
    )
    assert (answer["ok"], answer["action"], answer["to"]) == (True, "updated", "0.2.0"), answer
    staged = answer["staged"]
    assert isinstance(staged, dict) and staged["version"] == "0.2.0"  # applied from the copy
    assert installed.active() == "0.2.0" and "staged" not in _record(installed)


def test_on_a_metered_connection_nothing_is_staged_unless_allowed(
    installed: Install, feed: Feed
) -> None:
    make_release(feed.path, "0.2.0", protocol_version=1, keypair=feed.keypair)
    build = buildinfo.current()
    refused = run_auto_install(
        "0.2.0", 1, _settings(installed, feed, auto_install="download"), build, metered=lambda: True
    )
    assert refused["action"] == "skipped", refused
    assert refused["reason"] == "the connection is metered (download_on_metered = true allows it)"
    assert not (installed.home / "versions" / "0.2.0").exists()
    assert "staged" not in _record(installed)
    allowed = _settings(installed, feed, auto_install="download", download_on_metered=True)
    assert run_auto_install("0.2.0", 1, allowed, build, metered=lambda: True)["action"] == "staged"


def test_a_failing_staging_is_cleaned_away_and_not_retried_for_that_version(
    installed: Install, feed: Feed
) -> None:
    release = make_release(feed.path, "0.2.0", protocol_version=1, keypair=feed.keypair)
    [archive] = release.glob("*.tar.gz")
    flip_byte(archive)
    loaded = _settings(installed, feed, auto_install="download")
    build = buildinfo.current()
    failed = run_auto_install("0.2.0", 1, loaded, build, metered=lambda: False)
    assert failed["ok"] is False and failed["version"] == "0.2.0", failed
    assert not (installed.home / "versions" / "0.2.0").exists() and not leftovers(installed)
    assert "staged" not in _record(installed)
    again = run_auto_install("0.2.0", 1, loaded, build, metered=lambda: False)
    assert again["action"] == "skipped", again
    assert str(again["reason"]).startswith("staging mux 0.2.0 failed here at ")
    # A newer release is tried (and staged).
    make_release(feed.path, "0.3.0", protocol_version=1, keypair=feed.keypair)
    newer = run_auto_install("0.3.0", 1, loaded, build, metered=lambda: False)
    assert newer["action"] == "staged", newer


def test_releases_in_a_row_leave_at_most_one_staged_version(installed: Install, feed: Feed) -> None:
    """Three releases in a row, each staged (bench/bench_stress.py stages ten): each time,
    the newest is the one staged copy on disk."""
    loaded = _settings(installed, feed)
    for n in range(2, 5):
        stress.stage_the_next_release(installed, feed, loaded, f"0.{n}.0")
    record = _record(installed)
    assert record["staged"]["version"] == "0.4.0" and installed.active() == "0.1.0"  # type: ignore[index]
    assert not leftovers(installed)
