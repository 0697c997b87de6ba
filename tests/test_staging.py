"""``mux update --stage`` and the update that applies it, through a loopback feed and the
installed mux (real processes: the install's files, its lock and its link are the point)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support import stress
from tests.support.installs import Install, bootstrap, keep_pristine, leftovers
from tests.support.processes import feed_verb
from tests.support.releases import Feed, make_feed, serve_directory_recording


@pytest.fixture
def feed(tmp_path: Path) -> Feed:
    return make_feed(tmp_path / "f", versions=["0.1.0", "0.2.0"])


@pytest.fixture
def served(feed: Feed):
    with serve_directory_recording(feed.path) as (url, paths):
        yield url, paths


@pytest.fixture
def installed(tmp_path: Path, sandbox_env, feed: Feed, served) -> Install:
    url, paths = served
    install = bootstrap(
        tmp_path, sandbox_env, source=url, version="0.1.0", public_key=feed.keypair.public_key
    )
    paths.clear()
    return install


def _json(install: Install, *args: str, code: int = 0) -> dict[str, Any]:
    result = install.run("update", "--json", *args)
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return json.loads(result.stdout)


def _record(install: Install) -> dict[str, Any]:
    return json.loads((install.home / "install.json").read_text())


def _stage(install: Install) -> dict[str, Any]:
    doc = _json(install, "--stage")
    assert doc["action"] == "staged", doc
    assert install.active() == "0.1.0"  # nothing switched
    assert (install.home / "versions" / "0.2.0" / "mux").exists()
    return doc


def test_a_staged_release_is_applied_without_a_download(installed: Install, served) -> None:
    _, paths = served
    staged = _stage(installed)
    assert staged["staged"]["version"] == "0.2.0" and staged["staged"]["size_bytes"] > 0
    assert any(p.endswith(".tar.gz") for p in paths)  # staging downloaded the archive
    kinds = {k["version"]: k["kind"] for k in staged["kept_versions"]}
    assert kinds == {"0.1.0": "active", "0.2.0": "staged"}
    assert _record(installed)["staged"]["version"] == "0.2.0"
    again = _json(installed, "--stage")  # staging what is staged fetches no archive again
    assert again["action"] == "staged"
    paths.clear()
    applied = _json(installed)
    assert applied["action"] == "updated" and installed.active() == "0.2.0"
    assert applied["staged"]["version"] == "0.2.0"
    assert any("applied the copy staged" in note for note in applied["notes"])
    assert not any(p.endswith((".tar.gz", ".delta")) for p in paths), paths
    assert "staged" not in _record(installed)
    assert _record(installed)["previous"] == "0.1.0"
    assert installed.reported_version()["version"] == "0.2.0"
    assert not leftovers(installed)


def test_a_staged_tree_changed_on_disk_is_refused_and_downloaded_again(
    installed: Install, served
) -> None:
    _, paths = served
    _stage(installed)
    server = next((installed.home / "versions" / "0.2.0").rglob("server.py"))
    server.write_text(server.read_text() + "\n# changed after staging\n")
    paths.clear()
    result = installed.run("update", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    assert "failed its check" in result.stderr and "downloading it again" in result.stderr
    assert doc["action"] == "updated" and doc["staged"] is None
    assert any(p.endswith(".tar.gz") for p in paths)  # the release came again
    assert installed.active() == "0.2.0"
    assert "changed after staging" not in server.read_text()
    assert not leftovers(installed)


@pytest.mark.parametrize(
    "verb", [("halt", "--tag", "v0.2.0"), ("withdraw", "--tag", "v0.2.0", "--reason", "bad")]
)
def test_a_release_halted_or_withdrawn_after_it_was_staged_is_refused_and_removed(
    installed: Install, feed: Feed, verb: tuple[str, ...]
) -> None:
    _stage(installed)
    done = feed_verb(feed, *verb)
    assert done.returncode == 0, done.stdout + done.stderr
    result = installed.run("update", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no longer on offer" in result.stderr
    assert installed.active() == "0.1.0"
    assert not (installed.home / "versions" / "0.2.0").exists()
    assert "staged" not in _record(installed)


def test_unstage_and_prune_drop_the_staged_copy(installed: Install) -> None:
    _stage(installed)
    dropped = _json(installed, "--unstage")
    assert dropped["action"] == "unstaged" and dropped["staged"]["version"] == "0.2.0"
    assert not (installed.home / "versions" / "0.2.0").exists()
    assert _json(installed, "--unstage")["notes"] == ["nothing was staged"]
    _stage(installed)
    pruned = _json(installed, "--prune")
    assert "0.2.0" in pruned["removed_versions"]
    assert sorted(os.listdir(installed.home / "versions")) == ["0.1.0"]


def test_rollback_never_goes_to_the_staged_version(installed: Install) -> None:
    _stage(installed)
    result = installed.run("update", "--rollback")
    assert result.returncode == 1 and "no previous version" in result.stderr
    assert installed.active() == "0.1.0"


def test_stage_refuses_what_it_does_not_take(installed: Install) -> None:
    result = installed.run("update", "--stage", "--rollback")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "--stage" in result.stderr and "--rollback" in result.stderr


def test_a_recent_signed_answer_applies_the_staged_release_without_the_network(
    installed: Install, served
) -> None:
    _, paths = served
    # An answer counts while it is younger than the check interval (the tests' default: 0).
    installed = Install(
        installed.home, installed.bin_dir, {**installed.env, "MUX_UPDATE_CHECK_INTERVAL": "1h"}
    )
    _stage(installed)
    checked = installed.run("update", "--check", "--json")
    assert checked.returncode == 10, checked.stdout + checked.stderr  # the answer is cached
    paths.clear()
    applied = _json(installed)
    assert paths == []  # not one request: the lifecycle's answer came from the check cache
    assert applied["action"] == "updated" and installed.active() == "0.2.0"
    assert any("signed answer that offers it is" in note for note in applied["notes"])
    assert installed.reported_version()["version"] == "0.2.0"


def test_an_answer_older_than_the_check_interval_is_read_again(installed: Install, served) -> None:
    _, paths = served
    _stage(installed)
    assert installed.run("update", "--check").returncode == 10
    paths.clear()
    # The tests' check interval is 0: no answer is recent enough.
    assert installed.env.get("MUX_UPDATE_CHECK_INTERVAL", "0") in ("0", "0s")
    result = installed.run("update", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert paths, "the lifecycle was read from the feed"
    assert not any(p.endswith(".tar.gz") for p in paths)  # the staged copy was applied
    assert installed.active() == "0.2.0"


KILLS = 3  # kill -9 landed mid-run, for staging and for applying each (bench_stress: 30 runs)
MAX_KILL_RUNS = 6  # a run can finish before its kill on a loaded machine: more runs


@pytest.mark.parametrize("moment", ["staging", "applying"])
def test_kill_9_while_staging_or_applying_leaves_a_runnable_mux(
    installed: Install, moment: str
) -> None:
    """``kill -9`` of ``mux update --stage`` or of the update that applies the staged copy,
    at moments spread over a reference run's length (a half, a quarter, three quarters, ...:
    tests/support/stress.py, ``Moments``) until three landed mid-run (at most six runs);
    after each, the link runs a whole version and the next ``mux update`` finishes with
    nothing left behind."""
    if moment == "applying":
        _stage(installed)
    reset = keep_pristine(installed, installed.home.parent / "pristine")
    args = ["--stage"] if moment == "staging" else []
    moments = stress.Moments(stress.timed(installed, "update", *args))  # a reference run
    killed = stress.kills_landed(
        moments,
        lambda delay, where: stress.staging_round(installed, args, delay, where),
        wanted=KILLS,
        runs=MAX_KILL_RUNS,
        reset=reset,
        label=f"{moment}, ",
    )
    assert killed >= KILLS, f"only {killed} of {MAX_KILL_RUNS} runs were killed mid-run"


def test_a_copy_staged_from_another_source_is_not_applied(installed: Install, served) -> None:
    _, paths = served
    _stage(installed)
    record = _record(installed)
    record["versions"]["0.2.0"]["source"] = "https://elsewhere.example/feed"
    (installed.home / "install.json").write_text(json.dumps(record))
    paths.clear()
    result = installed.run("update", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verified for another release, source or target" in result.stderr
    assert json.loads(result.stdout)["staged"] is None
    assert any(p.endswith(".tar.gz") for p in paths)  # downloaded and verified again
    assert installed.active() == "0.2.0" and not leftovers(installed)


def test_a_staged_copy_whose_folder_went_is_downloaded_again(installed: Install) -> None:
    _stage(installed)
    shutil.rmtree(installed.home / "versions" / "0.2.0")
    result = installed.run("update", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["action"] == "updated" and installed.active() == "0.2.0"
    assert "staged" not in _record(installed)


def test_a_staged_entry_that_is_not_whole_is_dropped_not_a_crash(installed: Install) -> None:
    _stage(installed)
    text = (installed.home / "install.json").read_text()
    record = json.loads(text)
    size = record["staged"]["bytes"]
    (installed.home / "install.json").write_text(
        text.replace(f'"bytes": {size}', '"bytes": Infinity')
    )
    assert '"bytes": Infinity' in (installed.home / "install.json").read_text()
    for args in (["--unstage"], []):
        result = installed.run("update", *args)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Traceback" not in result.stderr
    assert installed.active() == "0.2.0" and "staged" not in _record(installed)
