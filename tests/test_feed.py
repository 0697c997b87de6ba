"""``release.publish.feed`` and ``mux-release feed``: the signed feed index, cross-checked with
the real ``minisign`` both ways (what we sign verifies with minisign; what minisign signs by hand with
the same trusted comment reads the same)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from release.publish.feed import (
    DEFAULT_EXPIRES_IN,
    FeedError,
    parse_duration,
    read_index_signature,
    sign_feed_index,
)
from release.publish.lifecycle import change_lifecycle, withdraw
from tests.support.installs import snapshot
from tests.support.installsh import require_tool
from tests.support.releases import (
    TEST_PASSWORD,
    KeyPair,
    make_feed,
    make_keypair,
    make_release,
    sign_index,
)
from updater.errors import ParseError, UsageError, VerificationError
from updater.formats.minisign import PublicKey
from updater.formats.trusted_comments import (
    FEED_SIGNATURE_NAME,
    IndexComment,
    parse_trusted_comment,
)

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def keypair(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    # Unencrypted, so that the real minisign signs with it without asking for a password.
    return make_keypair(tmp_path_factory.mktemp("keys"), password=None)


@pytest.fixture
def feed_dir(tmp_path: Path, keypair: KeyPair) -> Path:
    feed = tmp_path / "feed"
    make_release(feed, "0.1.0", protocol_version=1, keypair=keypair, sign=False)
    return feed


def public(keypair: KeyPair) -> list[PublicKey]:
    return [PublicKey.parse(keypair.public_key)]


def minisign_comment(feed: Path, keypair: KeyPair) -> str:
    """What the real minisign prints after verifying the index (-Q: the trusted comment)."""
    minisign = require_tool("minisign")
    shown = subprocess.run(
        [minisign, "-V", "-H", "-Q", "-p", str(keypair.public_key_path), "-m", "releases.json"],
        cwd=feed,
        capture_output=True,
        text=True,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    return shown.stdout.rstrip("\n")


def test_signing_counts_up_and_the_real_minisign_agrees(feed_dir: Path, keypair: KeyPair) -> None:
    first = sign_feed_index(feed_dir, keypair.secret_key(), now=1_700_000_000, new_feed=True)
    assert first.comment == IndexComment(
        timestamp=1_700_000_000, seq=1, expires=1_700_000_000 + DEFAULT_EXPIRES_IN
    )
    assert first.previous_seq is None
    assert minisign_comment(feed_dir, keypair) == (
        f"timestamp:1700000000\tfile:releases.json\thashed\tseq:1\texpires:{1_700_000_000 + 14 * 86400}"
    )
    make_release(feed_dir, "0.2.0", protocol_version=1, keypair=keypair, sign=False)
    second = sign_feed_index(feed_dir, keypair.secret_key(), expires_in=3600)
    assert (second.previous_seq, second.comment.seq) == (1, 2)
    assert second.comment.expires - second.comment.timestamp == 3600
    assert b"v0.2.0" in (feed_dir / "releases.json").read_bytes()
    assert read_index_signature(feed_dir, public(keypair)) == second.comment
    assert minisign_comment(feed_dir, keypair) == second.comment.format()


def test_refresh_re_signs_the_same_index_with_the_next_seq(
    feed_dir: Path, keypair: KeyPair
) -> None:
    sign_feed_index(feed_dir, keypair.secret_key(), now=1_700_000_000, new_feed=True)
    index = (feed_dir / "releases.json").read_bytes()
    # A release folder added since is not listed by a refresh: it re-signs, nothing more.
    make_release(feed_dir / "elsewhere", "0.9.0", protocol_version=1, keypair=keypair, sign=False)
    (feed_dir / "elsewhere" / "v0.9.0").rename(feed_dir / "v0.9.0")
    refreshed = sign_feed_index(
        feed_dir, keypair.secret_key(), refresh=True, expires_in=7 * 86400, now=1_700_100_000
    )
    assert (feed_dir / "releases.json").read_bytes() == index
    assert refreshed.comment == IndexComment(1_700_100_000, 2, 1_700_100_000 + 7 * 86400)
    assert minisign_comment(feed_dir, keypair) == refreshed.comment.format()


def test_a_signature_made_by_hand_with_minisign_reads_the_same(
    feed_dir: Path, keypair: KeyPair
) -> None:
    minisign = require_tool("minisign")
    comment = "timestamp:1700000000\tfile:releases.json\thashed\tseq:41\texpires:1800000000"
    signed = subprocess.run(
        [minisign, "-S", "-s", str(keypair.secret_key_path), "-t", comment, "-m", "releases.json"],
        cwd=feed_dir,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert signed.returncode == 0, signed.stderr
    assert read_index_signature(feed_dir, public(keypair)) == IndexComment(
        1_700_000_000, 41, 1_800_000_000
    )
    # And the next signature continues its count.
    after = sign_feed_index(feed_dir, keypair.secret_key(), refresh=True)
    assert (after.previous_seq, after.comment.seq) == (41, 42)


def test_the_previous_seq_is_read_only_from_a_signature_that_verifies(
    feed_dir: Path, keypair: KeyPair, tmp_path: Path
) -> None:
    other = make_keypair(tmp_path / "other", password=None)
    sign_feed_index(feed_dir, other.secret_key(), seq=10**6, new_feed=True)
    signature = (feed_dir / FEED_SIGNATURE_NAME).read_bytes()
    with pytest.raises(FeedError, match=r"does not verify with key") as caught:
        sign_feed_index(feed_dir, keypair.secret_key())
    assert caught.value.hint is not None and "--seq" in caught.value.hint
    assert (feed_dir / FEED_SIGNATURE_NAME).read_bytes() == signature  # nothing written
    # A rotated key starts its own count, chosen explicitly.
    assert sign_feed_index(feed_dir, keypair.secret_key(), seq=1).comment.seq == 1

    # An index edited after it was signed is not re-signed by a refresh.
    index = feed_dir / "releases.json"
    index.write_bytes(index.read_bytes().replace(b"0.1.0", b"0.1.9"))
    with pytest.raises(FeedError, match="does not verify"):
        sign_feed_index(feed_dir, keypair.secret_key(), refresh=True)


def test_refresh_needs_an_index(tmp_path: Path, keypair: KeyPair) -> None:
    with pytest.raises(UsageError, match="nothing to refresh"):
        sign_feed_index(tmp_path, keypair.secret_key(), refresh=True)
    assert list(tmp_path.iterdir()) == []


def test_make_feed_signs_the_index_after_every_release(tmp_path: Path) -> None:
    feed = make_feed(tmp_path, versions=["0.1.0", "0.2.0", "0.3.0"])
    comment = read_index_signature(feed.path, public(feed.keypair))
    assert comment.seq == 3
    assert abs(comment.expires - time.time() - DEFAULT_EXPIRES_IN) < 120
    expired = sign_index(feed.path, feed.keypair, expires=1_000_000)
    assert expired.comment == IndexComment(1_000_000 - 3600, 4, 1_000_000)


# -- the trusted comment -------------------------------------------------------------------


def test_trusted_comment_tokens() -> None:
    assert parse_trusted_comment("timestamp:1\tfile:releases.json\thashed\tseq:2\tx:y:z") == {
        "timestamp": "1",
        "file": "releases.json",
        "hashed": "",
        "seq": "2",
        "x": "y:z",
    }
    for bad in ("seq:1\tseq:2", "seq:1\t\tfile:x", ":1"):
        with pytest.raises(ParseError):
            parse_trusted_comment(bad)


@pytest.mark.parametrize(
    "text",
    [
        "timestamp:1\tfile:SHA256SUMS\thashed\tseq:2\texpires:3",  # another file's signature
        "timestamp:1\tfile:releases.json\thashed\texpires:3",  # no seq
        "timestamp:1\tfile:releases.json\thashed\tseq:-2\texpires:3",
        "timestamp:1\tfile:releases.json\thashed\tseq:2\texpires:0x10",
        "timestamp:1\tfile:releases.json\thashed\tseq: 2\texpires:3",
        "timestamp:1\tfile:releases.json\thashed\tseq:٢\texpires:3",  # a non-ASCII digit
        "timestamp:1 file:releases.json hashed seq:2 expires:3",  # spaces, not tabs
    ],
)
def test_index_comments_that_are_refused(text: str) -> None:
    with pytest.raises(ParseError):
        IndexComment.parse(text)


@given(
    st.integers(min_value=0, max_value=10**30),
    st.integers(min_value=0, max_value=10**30),
    st.integers(min_value=0, max_value=10**12),
    st.dictionaries(
        st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8).filter(
            lambda k: k not in ("timestamp", "file", "hashed", "seq", "expires")
        ),
        st.text(st.characters(blacklist_characters="\t\n\r"), max_size=20),
        max_size=3,
    ),
)
def test_index_comment_round_trip_ignores_unknown_keys(
    seq: int, expires: int, timestamp: int, extra: dict[str, str]
) -> None:
    comment = IndexComment(timestamp=timestamp, seq=seq, expires=expires)
    text = comment.format() + "".join(f"\t{k}:{v}" for k, v in extra.items())
    assert IndexComment.parse(text) == comment


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("14d", 14 * 86400), ("12h", 43200), ("90m", 5400), ("3600s", 3600), ("600", 600)],
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["0d", "-1d", "1y", "d", "", "2000d"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(UsageError):
        parse_duration(text)


# -- the command ---------------------------------------------------------------------------


def run_release(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from release.cli import main; main()", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )


def test_the_command_signs_refreshes_and_fails_in_one_line(tmp_path: Path) -> None:
    keypair = make_keypair(tmp_path / "keys")  # password-protected, as in a release
    feed = tmp_path / "feed"
    make_release(feed, "0.1.0", protocol_version=1, keypair=keypair, sign=False)
    password = {"MINISIGN_PASSWORD": TEST_PASSWORD}
    key = str(keypair.secret_key_path)

    first = run_release("feed", str(feed), "--private-key-file", key, "--new-feed", env=password)
    assert first.returncode == 0, first.stderr
    assert "seq 1 (a new feed), expires" in first.stdout and keypair.key_id in first.stdout
    again = run_release(
        "feed",
        str(feed),
        "--private-key-file",
        key,
        "--refresh",
        "--expires-in",
        "1h",
        env=password,
    )
    assert again.returncode == 0, again.stderr
    comment = read_index_signature(feed, public(keypair))
    assert comment.seq == 2 and comment.expires - comment.timestamp == 3600
    assert "re-signed" in again.stdout

    before = (feed / FEED_SIGNATURE_NAME).read_bytes()
    for args, env, code, text in (
        (["--expires-in", "soon"], password, 2, "not a duration"),
        ([], {"MINISIGN_PASSWORD": "wrong"}, 1, "wrong password"),
        (["--seq", "-1"], password, 2, "--seq"),
    ):
        failed = run_release("feed", str(feed), "--private-key-file", key, *args, env=env)
        assert failed.returncode == code, failed.stderr
        [line] = failed.stderr.strip().splitlines()
        assert line.startswith("mux-release: error:") and text in line, line
    assert (feed / FEED_SIGNATURE_NAME).read_bytes() == before


def test_a_tampered_index_is_not_read_as_signed(feed_dir: Path, keypair: KeyPair) -> None:
    sign_feed_index(feed_dir, keypair.secret_key(), new_feed=True)
    index = feed_dir / "releases.json"
    index.write_bytes(index.read_bytes() + b" ")
    with pytest.raises(VerificationError):
        read_index_signature(feed_dir, public(keypair))


# -- a feed that lost its signed index (issue 35, finding 4) ---------------------------------


def test_a_published_feed_without_its_signed_index_is_refused_not_forgotten(
    tmp_path: Path,
) -> None:
    """A fresh checkout of the Pages branch or a partial sync lost ``releases.json`` and its
    signature. A new index at seq 1 with no records (what ``mux-release feed`` wrote, silently)
    forgot the withdrawal, so install.sh on a fresh machine installed the withdrawn release,
    and the sequence floor. It is refused in one line, exit 1, with nothing written."""
    feed = make_feed(tmp_path / "f", versions=["0.1.0", "0.2.0"])
    change_lifecycle(feed.path, feed.keypair.secret_key(), "v0.2.0", withdraw("bad", None))
    index, signature = feed.path / "releases.json", feed.path / FEED_SIGNATURE_NAME
    saved = {path: path.read_bytes() for path in (index, signature)}
    key = ("--private-key-file", str(feed.keypair.secret_key_path))
    password = {"MINISIGN_PASSWORD": TEST_PASSWORD}

    def refused(*args: str, words: str) -> None:
        before = snapshot(feed.path)
        done = run_release(*args, env=password)
        assert done.returncode == 1, done.stdout + done.stderr
        [line] = done.stderr.strip().splitlines()
        assert line.startswith("mux-release: error:") and words in line, line
        assert snapshot(feed.path) == before  # nothing written, no temp file left
        assert done.stdout == ""

    for lost, words in (
        ((index, signature), "would lose the sequence floor and every lifecycle record"),
        (
            (index,),
            "without its releases.json, and no TUF repository: a new index would lose "
            "every lifecycle record",
        ),
        ((signature,), "lifecycle state (rollouts, halts, withdrawals) that no signature"),
    ):
        for path, data in saved.items():
            path.write_bytes(data)
        for path in lost:
            path.unlink()
        refused("feed", str(feed.path), *key, words=words)
        # A lifecycle verb writes a first index as well: refused the same way.
        refused("halt", str(feed.path), *key, "--tag", "v0.1.0", words=words)
    # --seq gives the floor, not the records.
    index.unlink()
    refused("feed", str(feed.path), *key, "--seq", "9", words="--seq gives only the floor")

    # Told that it is a new feed: seq 1, no records.
    new = run_release("feed", str(feed.path), *key, "--new-feed", env=password)
    assert new.returncode == 0, new.stderr
    assert "seq 1 (a new feed)" in new.stdout
    assert b"withdrawn" not in index.read_bytes()
    # ... which a feed with a signed index is not (exit 2, nothing written).
    before = snapshot(feed.path)
    again = run_release("feed", str(feed.path), *key, "--new-feed", env=password)
    assert again.returncode == 2 and "it was published" in again.stderr, again.stderr
    assert len(again.stderr.strip().splitlines()) == 1 and snapshot(feed.path) == before


def test_a_folder_without_releases_is_a_new_feed(tmp_path: Path, keypair: KeyPair) -> None:
    signed = sign_feed_index(tmp_path, keypair.secret_key())
    assert (signed.comment.seq, signed.origin) == (1, "a new feed")
    assert json.loads((tmp_path / "releases.json").read_bytes()) == {"releases": []}
    # Its first release continues that index.
    make_release(tmp_path, "0.1.0", protocol_version=1, keypair=keypair, sign=False)
    assert sign_feed_index(tmp_path, keypair.secret_key()).comment.seq == 2
