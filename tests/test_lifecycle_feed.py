"""A release's lifecycle through a real feed on a loopback server: the verbs as real
``mux-release`` processes, the readers as real ``mux`` processes (``--check``, ``mux update``).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from release.publish.lifecycle import change_lifecycle
from tests.support.feeds import write_release
from tests.support.github import FakeGitHub, github_env, serve_github
from tests.support.inprocess import run_in_process
from tests.support.installs import Install, bootstrap, check
from tests.support.processes import feed_verb
from tests.support.releases import (
    Feed,
    make_feed,
    serve_directory,
    serve_directory_recording,
)
from tests.support.watching import event, spawn, watch_start
from updater.errors import EXIT_WITHDRAWN
from updater.formats.trusted_comments import FEED_SIGNATURE_NAME


def verb(feed: Feed, *args: str) -> str:
    done = feed_verb(feed, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def set_bucket(install: Install, bucket: int) -> None:
    state = Path(install.env["XDG_STATE_HOME"]) / "mux"
    state.mkdir(parents=True, exist_ok=True)
    (state / "rollout-bucket").write_text(f"{bucket}\n")


@pytest.fixture
def feed(tmp_path: Path) -> Feed:
    return make_feed(tmp_path / "f", versions=["0.1.0", "0.2.0"])


@pytest.fixture
def served(feed: Feed):
    with serve_directory(feed.path) as url:
        yield url


@pytest.fixture
def installed(tmp_path: Path, sandbox_env, feed: Feed, served: str) -> Install:
    return bootstrap(
        tmp_path, sandbox_env, source=served, version="0.1.0", public_key=feed.keypair.public_key
    )


def test_a_staged_release_is_offered_by_bucket_and_by_version_whatever_the_stage(
    installed: Install, feed: Feed
) -> None:
    out = verb(feed, "rollout", "--tag", "v0.2.0", "--stages", "5,25@1d,100@3d")
    assert "stages 5% from" in out and "seq" in out
    set_bucket(installed, 9000)  # outside 5 %: held back until the 100 % stage, three days on
    result, doc = check(installed)
    assert result.returncode == 0, result.stderr
    assert doc["status"] == "up-to-date" and doc["rollout_bucket"] == 9000
    held = doc["lifecycle"]["held_back"]
    assert [(h["version"], h["why"]) for h in held] == [("0.2.0", "rollout")]
    offered_at = time.mktime(time.strptime(held[0]["offered_at"], "%Y-%m-%dT%H:%M:%SZ"))
    assert abs(offered_at - time.timezone - (time.time() + 3 * 86400)) < 600
    # An explicit version ignores the stages.
    exact, doc = check(installed, "--version", "0.2.0")
    assert exact.returncode == 10 and doc["status"] == "update-available"
    set_bucket(installed, 400)  # inside 5 %
    inside, doc = check(installed)
    assert inside.returncode == 10, inside.stdout + inside.stderr
    assert doc["latest"]["version"] == "0.2.0" and doc["lifecycle"]["held_back"] == []


def test_the_bucket_is_drawn_once_kept_and_sent_nowhere(
    tmp_path: Path, sandbox_env, feed: Feed
) -> None:
    with serve_directory_recording(feed.path) as (url, paths):
        install = bootstrap(
            tmp_path, sandbox_env, source=url, version="0.1.0", public_key=feed.keypair.public_key
        )
        buckets = set()
        for _ in range(3):
            result, doc = check(install)
            assert result.returncode == 10
            buckets.add(doc["rollout_bucket"])
    assert len(buckets) == 1
    (bucket,) = buckets
    kept = Path(sandbox_env["XDG_STATE_HOME"]) / "mux" / "rollout-bucket"
    assert kept.read_text() == f"{bucket}\n"
    assert paths and all("?" not in p and "bucket" not in p for p in paths), paths


def test_a_halted_release_is_offered_to_nobody_and_stays_where_installed(
    installed: Install, feed: Feed
) -> None:
    verb(feed, "halt", "--tag", "v0.2.0")
    result, doc = check(installed)
    assert result.returncode == 0 and doc["lifecycle"]["held_back"][0]["why"] == "halted"
    update = installed.run("update")
    assert update.returncode == 0 and installed.active() == "0.1.0", update.stdout
    verb(feed, "resume", "--tag", "v0.2.0")
    assert installed.run("update").returncode == 0 and installed.active() == "0.2.0"
    verb(feed, "halt", "--tag", "v0.2.0")
    stays, doc = check(installed)
    assert stays.returncode == 0 and doc["status"] == "up-to-date", stays.stdout


def test_a_withdrawn_release_moves_back_offline_and_the_server_keeps_its_pid(
    installed: Install, feed: Feed
) -> None:
    assert installed.run("update").returncode == 0 and installed.active() == "0.2.0"
    started = installed.run("server", "start")
    assert started.returncode == 0, started.stderr
    before = json.loads(installed.run("server", "status", "--json").stdout)["servers"][0]
    hostile = "data loss \x1b]52;c;aGk=\x07 on resize\n" + "é"
    verb(feed, "withdraw", "--tag", "v0.2.0", "--reason", hostile)

    result, doc = check(installed)
    assert result.returncode == EXIT_WITHDRAWN, result.stdout + result.stderr
    assert doc["status"] == "withdrawn"
    withdrawn = doc["lifecycle"]["withdrawn"]
    assert withdrawn["reason"] == hostile  # JSON carries it as signed, escaped by JSON
    assert (withdrawn["move"], withdrawn["move_to"]) == ("kept", "0.1.0")
    text = installed.run("update", "--check")
    assert text.returncode == EXIT_WITHDRAWN
    assert "\x1b" not in text.stdout and "\\x1b]52" in text.stdout
    assert "move off it with: mux update" in text.stdout

    started_at = time.monotonic()
    moved = installed.run("update")
    elapsed = time.monotonic() - started_at
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert installed.active() == "0.1.0"
    assert "withdrawn by its publisher" in moved.stdout and "\x1b" not in moved.stdout
    assert "moved back to the kept mux 0.1.0" in moved.stdout
    after = json.loads(installed.run("server", "status", "--json").stdout)["servers"][0]
    assert after["pid"] == before["pid"] and after["version"] == "0.2.0"
    assert (installed.home / "versions" / "0.2.0" / "mux").exists()  # the server runs from it
    # Offline: no archive is fetched, only the signed index; the kept build is re-verified and
    # run once, as --rollback does (the figure is printed; the bound is for a loaded machine).
    print(f"withdrawn -> kept move: {elapsed:.2f} s")
    assert elapsed < 20

    again, doc = check(installed)
    assert again.returncode == 0, again.stdout
    assert doc["lifecycle"]["held_back"][0]["why"] == "withdrawn"
    refused = installed.run("update", "--version", "0.2.0")
    assert refused.returncode == 1 and "--allow-withdrawn" in refused.stderr
    assert "\x1b" not in refused.stderr
    taken = installed.run("update", "--version", "0.2.0", "--allow-withdrawn")
    assert taken.returncode == 0, taken.stderr
    assert installed.active() == "0.2.0"


def test_a_withdrawal_with_a_replacement_moves_there(tmp_path: Path, sandbox_env) -> None:
    feed = make_feed(tmp_path / "f", versions=["0.1.0", "0.2.0", "0.3.0"])
    with serve_directory(feed.path) as url:
        install = bootstrap(
            tmp_path, sandbox_env, source=url, version="0.2.0", public_key=feed.keypair.public_key
        )
        verb(feed, "rollout", "--tag", "v0.3.0", "--stages", "1,100@7d")
        set_bucket(install, 9999)  # far outside the stage: the replacement skips it
        verb(feed, "withdraw", "--tag", "v0.2.0", "--reason", "bad", "--replacement", "v0.3.0")
        result, doc = check(install)
        assert result.returncode == EXIT_WITHDRAWN
        assert doc["lifecycle"]["withdrawn"]["move"] == "replacement"
        moved = install.run("update")
        assert moved.returncode == 0, moved.stdout + moved.stderr
        assert install.active() == "0.3.0" and "withdrawn" in moved.stdout


def test_the_check_predicts_the_move_to_a_replacement_outside_its_stage(
    tmp_path: Path, sandbox_env
) -> None:
    """0.2.0 (protocol 2) withdrawn for 0.3.0 (protocol 3), which has not reached this
    machine's stage: the check describes 0.3.0, what mux update installs, and the live
    server that will need a restart (issue 38, item 13: it described 0.1.0 and "nothing to
    do")."""
    protocols = {"0.1.0": 2, "0.2.0": 2, "0.3.0": 3}
    feed = make_feed(tmp_path / "f", versions=list(protocols), protocols=protocols)
    with serve_directory(feed.path) as url:
        install = bootstrap(
            tmp_path, sandbox_env, source=url, version="0.2.0", public_key=feed.keypair.public_key
        )
        started = install.run("server", "start")
        assert started.returncode == 0, started.stderr
        verb(feed, "rollout", "--tag", "v0.3.0", "--stages", "1,100@7d")
        set_bucket(install, 9999)
        verb(feed, "withdraw", "--tag", "v0.2.0", "--reason", "bad", "--replacement", "v0.3.0")
        result, doc = check(install)
        assert result.returncode == EXIT_WITHDRAWN, result.stderr
        assert doc["lifecycle"]["withdrawn"]["move_to"] == "0.3.0"
        assert doc["latest"]["version"] == "0.3.0" and doc["latest"]["protocol_version"] == 3
        assert doc["restart_needed_after_update"] is True
        text = install.run("update", "--check").stdout
        assert "after the update, 1 live server(s) will need a restart" in text, text
        assert "nothing to do" not in text


def test_a_withdrawal_with_nowhere_to_go_is_its_own_exit_code(tmp_path: Path, sandbox_env) -> None:
    feed = make_feed(tmp_path / "f", versions=["0.1.0"])
    with serve_directory(feed.path) as url:
        install = bootstrap(
            tmp_path, sandbox_env, source=url, version="0.1.0", public_key=feed.keypair.public_key
        )
        verb(feed, "withdraw", "--tag", "v0.1.0", "--reason", "broken")
        result, doc = check(install)
        assert result.returncode == EXIT_WITHDRAWN and doc["install_command"] is None
        # A real process: the withdrawal's exit code (11) and its lines as a shell sees them.
        stuck = install.run("update", process=True)
        assert stuck.returncode == EXIT_WITHDRAWN, stuck.stdout + stuck.stderr
        assert len(stuck.stderr.strip().splitlines()) <= 2 and "Traceback" not in stuck.stderr
        assert install.active() == "0.1.0"


def test_critical_skips_the_stages_and_a_minimum_version_requires_the_update(
    installed: Install, feed: Feed
) -> None:
    verb(feed, "rollout", "--tag", "v0.2.0", "--stages", "1,100@7d", "--notes", "fixes \x1b[2J")
    set_bucket(installed, 9999)
    held, _ = check(installed)
    assert held.returncode == 0
    verb(feed, "critical", "--tag", "v0.2.0", "--minimum-version", "0.2.0")
    result, doc = check(installed)
    assert result.returncode == 10, result.stdout + result.stderr
    assert doc["status"] == "update-required" and doc["lifecycle"]["critical"] is True
    assert doc["lifecycle"]["minimum_version"] == "0.2.0"
    assert doc["lifecycle"]["notes"] == "fixes \x1b[2J"
    text = installed.run("update", "--check")
    assert "release notes of 0.2.0: fixes \\x1b[2J" in text.stdout and "\x1b" not in text.stdout


def test_an_unsigned_or_rolled_back_lifecycle_change_is_refused(
    installed: Install, feed: Feed
) -> None:
    index, signature = feed.path / "releases.json", feed.path / FEED_SIGNATURE_NAME
    before_halt = (index.read_bytes(), signature.read_bytes())
    verb(feed, "halt", "--tag", "v0.2.0")
    halted, _ = check(installed)
    assert halted.returncode == 0, halted.stdout + halted.stderr  # and its seq is recorded
    after_halt = (index.read_bytes(), signature.read_bytes())
    # A mirror that hides the halt by serving the index from before it: a rollback.
    index.write_bytes(before_halt[0])
    signature.write_bytes(before_halt[1])
    hidden, _ = check(installed)
    assert hidden.returncode == 3 and "rollback" in hidden.stderr, hidden.stderr
    # An edit nobody signed.
    doc = json.loads(after_halt[0])
    doc["releases"][0]["lifecycle"].pop("halted")
    index.write_text(json.dumps(doc))
    signature.write_bytes(after_halt[1])
    unsigned, _ = check(installed)
    assert unsigned.returncode == 3 and "not signed by a key" in unsigned.stderr
    # The publisher never carries state its own signature does not vouch for (here a note
    # nobody signed; an index without state starts the next one afresh).
    doc = json.loads(after_halt[0])
    doc["releases"][0]["lifecycle"]["notes"] = "written by nobody the key vouches for"
    index.write_text(json.dumps(doc))
    carried = feed_verb(feed, "resume", "--tag", "v0.2.0")
    assert carried.returncode == 1 and "no signature" in carried.stderr, carried.stderr
    assert len(carried.stderr.strip().splitlines()) <= 2


def test_a_hostile_reason_or_note_cannot_exceed_its_cap(installed: Install, feed: Feed) -> None:
    long_reason = feed_verb(feed, "withdraw", "--tag", "v0.2.0", "--reason", "x" * 301)
    assert long_reason.returncode == 1 and "longer than 300" in long_reason.stderr
    long_notes = feed_verb(feed, "critical", "--tag", "v0.2.0", "--notes", "n" * 1001)
    assert long_notes.returncode == 1 and "longer than 1000" in long_notes.stderr
    result, doc = check(installed)
    assert result.returncode == 10 and doc["lifecycle"]["withdrawn"] is None


def test_a_withdrawal_reaches_a_running_server_within_one_check_interval(
    installed: Install, feed: Feed
) -> None:
    assert installed.run("update").returncode == 0 and installed.active() == "0.2.0"
    installed.env["MUX_UPDATE_CHECK_INTERVAL"] = "1"
    assert installed.run("server", "start").returncode == 0
    watcher, lines = spawn(installed, "server", "watch")
    assert watch_start(lines)[0]["version"] == "0.2.0"
    verb(feed, "withdraw", "--tag", "v0.2.0", "--reason", "eats \x1b[2J files")
    withdrawn_at = time.monotonic()
    kind, data = event(lines.next(timeout=30))
    while kind != "release-withdrawn":
        kind, data = event(lines.next(timeout=30))
    took = time.monotonic() - withdrawn_at
    print(f"withdrawal -> release-withdrawn event: {took:.2f} s (check interval 1 s)")
    assert data["reason"] == "eats \\x1b[2J files"  # escaped in the event itself
    assert (data["move"], data["move_to"], data["command"]) == ("kept", "0.1.0", "mux update")
    # Moving off it ends the event: a watcher that connects afterwards is not told.
    assert installed.run("update").returncode == 0 and installed.active() == "0.1.0"
    kind, data = event(lines.next(timeout=30))
    assert kind == "update-installed" and data["version"] == "0.1.0"
    late, late_lines = spawn(installed, "server", "watch")
    watch_start(late_lines)
    assert installed.run("server", "stop").returncode == 0
    assert [event(line)[0] for line in late_lines.rest()] == ["update-installed", "server-stopping"]
    watcher.wait(10)
    late.wait(10)


def write_policy(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o644)
    return path


def test_the_policy_pin_ring_and_cooldown_bind_mux(
    installed: Install, feed: Feed, tmp_path: Path
) -> None:
    # A development mux (version 0.1.0, as installed) reads MUX_POLICY_FILE; an installed
    # build reads only the path it was built with.
    policy = write_policy(tmp_path / "own" / "policy.toml", 'pin = "0.1"\nring = "early"\n')
    env = {**installed.env, "MUX_POLICY_FILE": str(policy), "MUX_HOME": str(installed.home)}
    trust = ("--trust-key", feed.keypair.public_key)

    def dev(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return run_in_process(list(args), {**env, **extra})

    result = dev("update", "--check", "--json", *trust)
    doc = json.loads(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert doc["lifecycle"]["pin"] == "0.1" and doc["lifecycle"]["ring"] == "early"
    assert doc["lifecycle"]["held_back"][0]["why"] == "pin"
    asked = dev("update", "--version", "0.2.0", *trust)
    assert asked.returncode == 4 and "pin" in asked.stderr, asked.stderr
    louder = dev("update", "--check", *trust, MUX_UPDATE_RING="late")
    assert louder.returncode == 4 and 'ring = "early"' in louder.stderr, louder.stderr
    # The cooldown counts from the signed released_at: a release an hour old is held 72 h.
    young = int(time.time()) - 3600
    change_lifecycle(
        feed.path,
        feed.keypair.secret_key(),
        "v0.2.0",
        lambda record: record._replace(released_at=young),
    )
    write_policy(policy, 'minimum_release_age = "72h"\n')
    cooling = dev("update", "--check", "--json", *trust)
    assert cooling.returncode == 0, cooling.stdout + cooling.stderr
    (held,) = json.loads(cooling.stdout)["lifecycle"]["held_back"]
    assert held["why"] == "cooldown" and held["offered_at"] is not None
    stays = dev("update", *trust)
    assert stays.returncode == 0, stays.stdout + stays.stderr
    assert installed.active() == "0.1.0"


def test_github_has_no_signed_lifecycle_and_says_so(tmp_path: Path, sandbox_env) -> None:
    root = tmp_path / "releases"
    root.mkdir()
    with serve_github(FakeGitHub(root=root)) as github:
        write_release(github.root, "9.0.0")
        env = {**sandbox_env, **github_env(github)}
        result = run_in_process(["update", "--check", "--json"], env)
        doc = json.loads(result.stdout)
        assert result.returncode == 10, result.stdout + result.stderr
        assert doc["lifecycle"]["available"] is False
        assert "GitHub's release pages carry no signed lifecycle" in doc["lifecycle"]["origin"]
        assert doc["lifecycle"]["withdrawn"] is None and doc["lifecycle"]["held_back"] == []
        # The pin still holds, by the signed manifest.
        policy = write_policy(tmp_path / "own" / "policy.toml", 'pin = "8"\n')
        held = run_in_process(
            ["update", "--check", "--json"], {**env, "MUX_POLICY_FILE": str(policy)}
        )
        assert held.returncode == 0, held.stdout + held.stderr
        assert json.loads(held.stdout)["lifecycle"]["held_back"][0]["why"] == "pin"
