"""The release lifecycle of a build that trusts a TUF root: halts and withdrawals reach it only
through the TUF targets (``custom.mux.lifecycle`` of each release's manifest target), written
by the same ``mux-release`` verbs that sign the feed's index, and refused when anyone but the
release key wrote them. Real installs, real processes, a loopback feed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from release.publish import tuf_repo
from release.publish.feed import read_index_signature
from tests.support.installs import Install, check, snapshot
from tests.support.processes import feed_verb
from tests.support.releases import serve_directory
from tests.support.tuf import TufFeed, feed, forge, installed, served
from updater.errors import EXIT_USAGE, EXIT_VERIFICATION, EXIT_WITHDRAWN
from updater.formats.minisign import PublicKey
from updater.formats.models import FEED_INDEX_NAME
from updater.formats.trusted_comments import FEED_SIGNATURE_NAME

__all__ = ["feed", "installed", "served"]  # fixtures, imported for pytest


BOTH = ("release", "online")  # the TUF keys the feed workflow gives mux-release


def verb(feed: TufFeed, *args: str) -> str:
    done = feed_verb(feed, *args, tuf_keys=BOTH)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def signed_record(feed: TufFeed, tag: str) -> dict:
    releases = tuf_repo.Repository(feed.path).targets(tuf_repo.RELEASE_ROLE).signed
    return releases.targets[f"{tag}/manifest.json"].unrecognized_fields["custom"]["mux"][
        "lifecycle"
    ]


def test_a_new_release_starts_with_its_manifest_s_released_at(feed: TufFeed) -> None:
    """The cooldown counts from it: a TUF build must see it as the index's readers do."""
    manifest = json.loads((feed.releases["0.2.0"] / "manifest.json").read_text())
    index = json.loads((feed.path / FEED_INDEX_NAME).read_text())
    (listed,) = [r for r in index["releases"] if r["tag"] == "v0.2.0"]
    assert signed_record(feed, "v0.2.0") == {"released_at": listed["lifecycle"]["released_at"]}
    assert listed["lifecycle"]["released_at"][:19] == manifest["released_at"][:19]


def test_a_withdrawal_signed_in_tuf_moves_a_tuf_build_back_whatever_the_index_says(
    installed: Install, feed: TufFeed
) -> None:
    assert installed.run("update").returncode == 0 and installed.active() == "0.2.0"
    index = {n: (feed.path / n).read_bytes() for n in (FEED_INDEX_NAME, FEED_SIGNATURE_NAME)}
    out = verb(feed, "withdraw", "--tag", "v0.2.0", "--reason", "corrupts \x1b[2J scrollback")
    lines = out.splitlines()
    assert lines[0] == "changed: v0.2.0: withdrawn" and lines[1].startswith("  was: ")
    assert any(line.startswith("signed: the TUF repository: release-workflow v") for line in lines)
    assert lines[-1].startswith("publish: ")
    assert signed_record(feed, "v0.2.0")["withdrawn"] == {"reason": "corrupts \x1b[2J scrollback"}
    # The index a TUF build never reads goes back to before the withdrawal: only TUF decides.
    for name, data in index.items():
        (feed.path / name).write_bytes(data)

    result, doc = check(installed)
    assert result.returncode == EXIT_WITHDRAWN, result.stdout + result.stderr
    assert doc["status"] == "withdrawn"
    assert doc["lifecycle"]["origin"].startswith("the signed TUF targets of ")
    assert (doc["lifecycle"]["withdrawn"]["move"], doc["lifecycle"]["withdrawn"]["move_to"]) == (
        "kept",
        "0.1.0",
    )
    text = installed.run("update", "--check")
    assert text.returncode == EXIT_WITHDRAWN and "\x1b" not in text.stdout

    moved = installed.run("update")
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert "moved back to the kept mux 0.1.0" in moved.stdout and installed.active() == "0.1.0"
    refused = installed.run("update", "--version", "0.2.0")
    assert refused.returncode == 1 and "--allow-withdrawn" in refused.stderr
    assert installed.active() == "0.1.0"


def test_a_mirror_that_hides_a_withdrawal_is_refused_once_its_timestamp_expires(
    installed: Install, feed: TufFeed
) -> None:
    assert installed.run("update").returncode == 0 and installed.active() == "0.2.0"
    metadata = feed.path / "metadata"
    hiding = shutil.copytree(metadata, feed.path.parent / "before-the-withdrawal")
    verb(feed, "withdraw", "--tag", "v0.2.0", "--reason", "bad")
    signed = shutil.copytree(metadata, feed.path.parent / "after-the-withdrawal")

    def mirror_serves(folder: Path) -> None:
        shutil.rmtree(metadata)
        shutil.copytree(folder, metadata)

    mirror_serves(hiding)
    hidden, _ = check(installed)
    assert hidden.returncode == 0, hidden.stdout + hidden.stderr  # within its timestamp's day
    late = Install(
        installed.home, installed.bin_dir, {**installed.env, "MUX_TUF_CLOCK_AHEAD": "25h"}
    )
    expired = late.run("update", "--check")
    assert expired.returncode == EXIT_VERIFICATION, expired.stdout + expired.stderr
    assert "timestamp" in expired.stderr and "expired at" in expired.stderr

    mirror_serves(signed)
    seen, _ = check(installed)
    assert seen.returncode == EXIT_WITHDRAWN, seen.stdout + seen.stderr
    # Once the withdrawal was seen, the mirror's older metadata is a rollback: refused at once.
    mirror_serves(hiding)
    rolled_back = installed.run("update", "--check")
    assert rolled_back.returncode == EXIT_VERIFICATION, rolled_back.stdout + rolled_back.stderr
    assert "timestamp" in rolled_back.stderr and "Traceback" not in rolled_back.stderr


def test_a_mirror_at_another_url_cannot_hide_a_withdrawal_already_seen(
    installed: Install, feed: TufFeed, tmp_path: Path
) -> None:
    """Issue 35, finding 3: the rollback floor was kept per URL, so the same repository at
    a second URL (a mirror synced before the withdrawal, its timestamp still valid) started
    again from root v1, and ``mux update`` installed the withdrawn release. The floor is the
    repository's: at any URL, its older state is a rollback."""
    mirror = shutil.copytree(feed.path, tmp_path / "mirror")  # releases and metadata, as synced
    verb(feed, "withdraw", "--tag", "v0.2.0", "--reason", "bad")
    seen, doc = check(installed)  # at the feed's own URL: the withdrawal is seen
    assert seen.returncode == 0, seen.stdout + seen.stderr
    assert doc["lifecycle"]["origin"].startswith("the signed TUF targets of ")
    before = snapshot(installed.home, installed.bin_dir)
    with serve_directory(mirror) as other:
        at_mirror = Install(
            installed.home, installed.bin_dir, {**installed.env, "MUX_UPDATE_SOURCE": other}
        )
        result = at_mirror.run("update")
        assert result.returncode == EXIT_VERIFICATION, result.stdout + result.stderr
        assert "timestamp metadata" in result.stderr and "went back" in result.stderr
        assert "Traceback" not in result.stderr
        checked = at_mirror.run("update", "--check")
        assert checked.returncode == EXIT_VERIFICATION, checked.stdout + checked.stderr
    after = snapshot(installed.home, installed.bin_dir)
    for state in (before, after):
        state.pop(str(installed.home / ".lock"), None)
    assert after == before and installed.active() == "0.1.0"


def test_a_halt_signed_in_tuf_holds_the_release_and_resume_offers_it(
    installed: Install, feed: TufFeed
) -> None:
    verb(feed, "halt", "--tag", "v0.2.0")
    result, doc = check(installed)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [(h["version"], h["why"]) for h in doc["lifecycle"]["held_back"]] == [
        ("0.2.0", "halted")
    ]
    assert installed.run("update").returncode == 0 and installed.active() == "0.1.0"
    verb(feed, "resume", "--tag", "v0.2.0")
    result, doc = check(installed)
    assert result.returncode == 10 and doc["latest"]["version"] == "0.2.0", result.stdout


def test_a_lifecycle_written_without_the_release_key_is_refused(
    installed: Install, feed: TufFeed
) -> None:
    """Whoever holds the online key (the feed workflow's) can re-sign the snapshot and the
    timestamp, but not the release-workflow role: lifting a halt with it is refused."""
    verb(feed, "halt", "--tag", "v0.2.0")
    current = tuf_repo.Repository(feed.path).targets(tuf_repo.RELEASE_ROLE)
    released = current.signed.targets["v0.2.0/manifest.json"].unrecognized_fields
    released["custom"]["mux"]["lifecycle"].pop("halted")
    current.signed.version += 1
    forge(
        feed.path,
        current,
        feed.signers(feed.keys.ONLINE),
        name=f"{current.signed.version}.{tuf_repo.RELEASE_ROLE}.json",
    )
    feed.refresh()  # a snapshot and timestamp over the forged role, with the real online key
    before = snapshot(installed.home, installed.bin_dir)
    result = installed.run("update")
    assert result.returncode == EXIT_VERIFICATION, result.stdout + result.stderr
    assert "release-workflow" in result.stderr and "Traceback" not in result.stderr
    after = snapshot(installed.home, installed.bin_dir)
    for state in (before, after):
        state.pop(str(installed.home / ".lock"), None)
    assert after == before and installed.active() == "0.1.0"


def test_a_signed_record_the_client_cannot_read_fails_the_whole_answer(
    installed: Install, feed: TufFeed
) -> None:
    k = feed.keys
    tuf_repo.set_lifecycle(
        feed.path, "v0.2.0", {"halted": "soon"}, k.signers(k.RELEASE), k.signers(k.ONLINE)
    )
    result = installed.run("update", "--check")
    assert result.returncode == EXIT_VERIFICATION, result.stdout + result.stderr
    (line, *_hint) = result.stderr.strip().splitlines()
    assert "lifecycle record mux cannot read" in line and "halted must be true or false" in line
    assert installed.active() == "0.1.0"


@pytest.mark.parametrize("given", [(), ("release",), ("online",)])
def test_a_verb_refuses_a_tuf_feed_without_both_tuf_keys_and_signs_nothing(
    feed: TufFeed, given: tuple[str, ...]
) -> None:
    """Signing the index alone would leave every TUF build on the halted release."""
    before = snapshot(feed.path)
    done = feed_verb(feed, "halt", "--tag", "v0.2.0", tuf_keys=given)
    assert done.returncode == EXIT_USAGE, done.stdout + done.stderr
    assert "has a TUF repository" in done.stderr and "Traceback" not in done.stderr
    assert snapshot(feed.path) == before


def test_a_release_engineer_s_second_run_of_the_same_change_signs_no_new_role(
    feed: TufFeed,
) -> None:
    verb(feed, "halt", "--tag", "v0.2.0")
    version = tuf_repo.Repository(feed.path).targets(tuf_repo.RELEASE_ROLE).signed.version
    out = verb(feed, "halt", "--tag", "v0.2.0")
    assert f"release-workflow v{version} already carries this lifecycle of v0.2.0" in out
    assert tuf_repo.Repository(feed.path).targets(tuf_repo.RELEASE_ROLE).signed.version == version
    # Listing the release again finds the same files: the lifecycle is no part of them.
    k = feed.keys
    again = tuf_repo.add_release(
        feed.path, feed.releases["0.2.0"], k.signers(k.RELEASE), k.signers(k.ONLINE)
    )
    assert again == ["v0.2.0 is already listed with these files: nothing to do"]
    assert signed_record(feed, "v0.2.0")["halted"] is True


def test_a_verb_refuses_when_the_index_and_tuf_disagree_and_signs_nothing(feed: TufFeed) -> None:
    """An index that lost its records (here: the one from before a withdrawal, validly signed
    then) must not be the base of a change that would lift the withdrawal TUF builds obey."""
    index = {n: (feed.path / n).read_bytes() for n in (FEED_INDEX_NAME, FEED_SIGNATURE_NAME)}
    verb(feed, "withdraw", "--tag", "v0.2.0", "--reason", "bad")
    for name, data in index.items():
        (feed.path / name).write_bytes(data)
    before = snapshot(feed.path)
    done = feed_verb(feed, "rollout", "--tag", "v0.2.0", "--full", tuf_keys=BOTH)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "disagree on the lifecycle of v0.2.0" in done.stderr and "Traceback" not in done.stderr
    assert snapshot(feed.path) == before
    assert signed_record(feed, "v0.2.0")["withdrawn"] == {"reason": "bad"}


def test_a_refresh_signs_a_new_timestamp_and_lists_nothing_new(feed: TufFeed) -> None:
    """A release folder whose own feed run failed reaches TUF builds only with its index."""
    shutil.copytree(feed.releases["0.2.0"], feed.path / "v0.3.0")
    stamp = tuf_repo.Repository(feed.path).timestamp().signed.version
    done = feed_verb(feed, "feed", "--refresh", tuf_keys=("online",))
    assert done.returncode == 0, done.stdout + done.stderr
    assert tuf_repo.Repository(feed.path).timestamp().signed.version == stamp + 1
    assert tuf_repo.lifecycle_of(feed.path, "v0.3.0") is None  # not listed


# -- a feed that lost its signed index (issue 35, finding 4) ----------------------------------


def _lose_the_index(feed: TufFeed) -> None:
    for name in (FEED_INDEX_NAME, FEED_SIGNATURE_NAME):
        (feed.path / name).unlink()


def _index(feed: TufFeed) -> tuple[dict[str, dict], int]:
    listed = json.loads((feed.path / FEED_INDEX_NAME).read_bytes())["releases"]
    comment = read_index_signature(feed.path, [PublicKey.parse(feed.keypair.public_key)])
    return {r["tag"]: r.get("lifecycle", {}) for r in listed}, comment.seq


def test_a_feed_that_lost_its_index_continues_from_its_tuf_repository(feed: TufFeed) -> None:
    """A fresh checkout of the Pages branch without releases.json and its signature: the
    withdrawal and the seq come back from the signed TUF metadata (release-workflow's record,
    the timestamp's ``custom.mux.index``), not seq 1 without records (what the old code
    wrote, so install.sh on a fresh machine installed the withdrawn release)."""
    verb(feed, "withdraw", "--tag", "v0.2.0", "--reason", "bad")
    _records, published = _index(feed)
    state = tuf_repo.signed_state(feed.path)
    assert state.index == tuf_repo.IndexSeq(feed.keypair.key_id, published)
    assert state.records["v0.2.0"]["withdrawn"] == {"reason": "bad"}

    _lose_the_index(feed)
    out = verb(feed, "feed")  # with both TUF keys, as the feed workflow runs it
    assert f"seq {published + 1} (from the TUF repository metadata/)" in out, out
    records, seq = _index(feed)
    assert seq == published + 1 and records["v0.2.0"]["withdrawn"] == {"reason": "bad"}
    assert "withdrawn" not in records["v0.1.0"]
    # The new timestamp records the new seq; a refresh and a bare TUF timestamp keep it.
    assert tuf_repo.signed_state(feed.path).index == (feed.keypair.key_id, seq)
    verb(feed, "feed", "--refresh")
    assert tuf_repo.signed_state(feed.path).index == (feed.keypair.key_id, seq + 1)
    feed.refresh()
    assert tuf_repo.signed_state(feed.path).index == (feed.keypair.key_id, seq + 1)

    # A lifecycle verb on a lost index continues the same way (it no longer finds the index
    # and TUF "disagreeing" and refuses).
    _lose_the_index(feed)
    verb(feed, "halt", "--tag", "v0.1.0")
    records, seq = _index(feed)
    assert seq == published + 3 and records["v0.1.0"]["halted"] is True
    assert records["v0.2.0"]["withdrawn"] == {"reason": "bad"}

    # --new-feed contradicts a TUF repository that records an index of this key.
    _lose_the_index(feed)
    before = snapshot(feed.path)
    new = feed_verb(feed, "feed", "--new-feed", tuf_keys=BOTH)
    assert new.returncode == EXIT_USAGE, new.stdout + new.stderr
    [line] = new.stderr.strip().splitlines()
    assert f"signed its index at seq {seq}: it was published" in line
    assert snapshot(feed.path) == before


def test_a_tuf_repository_that_records_no_seq_gives_the_records_and_needs_the_seq(
    feed: TufFeed,
) -> None:
    """A repository from before the timestamp recorded the index's seq (here: a withdrawal
    signed in TUF directly): the records it has, the floor it has not. Refused in one line
    with nothing written, until --seq gives it."""
    k = feed.keys
    record = tuf_repo.lifecycle_of(feed.path, "v0.2.0") or {}
    withdrawn = {**record, "withdrawn": {"reason": "bad"}}
    tuf_repo.set_lifecycle(
        feed.path, "v0.2.0", withdrawn, k.signers(k.RELEASE), k.signers(k.ONLINE)
    )
    assert tuf_repo.signed_state(feed.path).index is None
    _lose_the_index(feed)
    before = snapshot(feed.path)
    for args in ((), ("--tuf-release-private-key", k.uri("release"))):
        done = feed_verb(feed, "feed", *args, tuf_keys=())
        assert done.returncode == 1, done.stdout + done.stderr
        [line] = done.stderr.strip().splitlines()
        assert "records no seq of key" in line and "would lose the sequence floor" in line
        assert snapshot(feed.path) == before

    out = verb(feed, "feed", "--seq", "40")
    records, seq = _index(feed)
    assert seq == 40 and records["v0.2.0"]["withdrawn"] == {"reason": "bad"}
    assert "from the TUF repository" in out
    assert tuf_repo.signed_state(feed.path).index == (feed.keypair.key_id, 40)


def test_a_tuf_repository_whose_signatures_fail_carries_nothing(feed: TufFeed) -> None:
    """Only signed state is carried: a release-workflow role edited by hand (a record nobody
    signed) is refused, not re-signed into the index."""
    verb(feed, "withdraw", "--tag", "v0.2.0", "--reason", "bad")
    _lose_the_index(feed)
    repo = tuf_repo.Repository(feed.path)
    current = repo.targets(tuf_repo.RELEASE_ROLE)
    path = repo.metadata / f"{current.signed.version}.{tuf_repo.RELEASE_ROLE}.json"
    path.write_bytes(path.read_bytes().replace(b'"reason": "bad"', b'"reason": "bah"'))
    before = snapshot(feed.path)
    done = feed_verb(feed, "feed", tuf_keys=BOTH)
    assert done.returncode == 1, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "its TUF repository cannot vouch for" in line and "release-workflow" in line
    assert snapshot(feed.path) == before
