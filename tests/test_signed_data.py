"""The pure rules behind issue 13, one table each: the signed comments, the feed index rules,
the feed-seq state, the signed-time downgrade, RFC 3339 times, the escaping of what mux shows,
the settings that bound HTTP, and the signer URI. The end-to-end proofs (real servers, real
processes) are tests/test_mux_attacks.py; these pin down each rule's edges.
"""

from __future__ import annotations

import base64
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.releases import KeyPair, make_keypair
from updater.config import settings
from updater.core.request import Decision, ReleaseRequest
from updater.core.retention import record_install, recorded_signed_at
from updater.errors import MuxError, ParseError, VerificationError
from updater.formats.models import parse_rfc3339
from updater.formats.trusted_comments import IndexComment, ReleaseComment, parse_trusted_comment
from updater.sources import feed_seq
from updater.sources.feed_index import IndexPolicy, verify_feed_index
from updater.text import safe_text

NOW = 1_800_000_000


@pytest.fixture(scope="module")
def keypair(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_keypair(tmp_path_factory.mktemp("keys"))


# -- the signed comments -------------------------------------------------------------------


def test_a_release_comment_names_its_version_and_time() -> None:
    comment = ReleaseComment.parse("timestamp:1700000000\tfile:SHA256SUMS\thashed\tversion:0.3.0")
    assert comment == ReleaseComment(version="0.3.0", timestamp=1_700_000_000)
    assert ReleaseComment.parse("mux release (signed by hand)") == ReleaseComment(None, None)
    assert ReleaseComment.parse("timestamp:soon\tversion:") == ReleaseComment(None, None)
    huge = ReleaseComment.parse(f"timestamp:{10**30}\tversion:1.0.0")
    assert huge.timestamp == 10**30  # any machine size: compared as a number
    longest = "9" * 1000
    assert ReleaseComment.parse(f"timestamp:{longest}").timestamp == int(longest)
    # More digits than mux reads is no number (Python's int() refuses 4301 and more).
    assert ReleaseComment.parse(f"timestamp:{longest}9").timestamp is None
    assert ReleaseComment.parse(f"timestamp:{'9' * 5000}").timestamp is None


@pytest.mark.parametrize(
    "text",
    ["version:0.3.0\tversion:0.2.0", "timestamp:1\ttimestamp:2", "version:0.3.0\t", "\thashed"],
)
def test_a_comment_two_readers_could_read_differently_is_refused(text: str) -> None:
    with pytest.raises(ParseError):
        ReleaseComment.parse(text)
    with pytest.raises(ParseError):
        parse_trusted_comment(text)


# -- the feed index rules ------------------------------------------------------------------


def _index(keypair: KeyPair, *, seq: int = 5, expires: int = NOW + 3600, tags=("v0.1.0",)):
    import json

    body = json.dumps({"releases": [{"tag": t, "prerelease": False} for t in tags]}).encode()
    comment = IndexComment(timestamp=NOW - 60, seq=seq, expires=expires).format()
    return body, keypair.secret_key().sign(body, comment)


def _policy(keypair: KeyPair, tmp_path: Path, *, allow_expired: bool = False) -> IndexPolicy:
    return IndexPolicy((keypair.public_key,), allow_expired, tmp_path / "feed-seq")


def test_a_verified_index_decides_by_version_never_by_flag_or_order(
    keypair: KeyPair, tmp_path: Path
) -> None:
    body, signature = _index(keypair, tags=("v0.1.0", "v0.4.0rc1", "v0.3.0", "v0.2.0"))
    index = verify_feed_index("F", body, signature, _policy(keypair, tmp_path), now=NOW)
    assert index.newest(include_pre=False) == "v0.3.0"
    assert index.newest(include_pre=True) == "v0.4.0rc1"
    assert index.lists("v0.2.0") and not index.lists("v9.9.9")
    assert (index.comment.seq, index.key_id, index.expired) == (5, keypair.key_id, False)


def test_the_index_rules_in_install_sh_order(keypair: KeyPair, tmp_path: Path) -> None:
    policy = _policy(keypair, tmp_path)
    body, signature = _index(keypair)
    with pytest.raises(VerificationError, match="no trusted minisign key"):
        verify_feed_index("F", body, signature, IndexPolicy((), False, policy.state_file))
    with pytest.raises(VerificationError, match=r"could not download the signature .*: gone"):
        verify_feed_index("F", body, None, policy, missing_signature="gone")
    with pytest.raises(VerificationError, match="is not signed by a key this mux trusts"):
        verify_feed_index("F", body + b" ", signature, policy, now=NOW)
    wrong = keypair.secret_key().sign(body, f"timestamp:{NOW}\tfile:SHA256SUMS\tseq:1\texpires:9")
    with pytest.raises(VerificationError, match=r"does not say file:releases\.json"):
        verify_feed_index("F", body, wrong, policy, now=NOW)
    expired_body, expired = _index(keypair, expires=NOW)  # expiring now is expired
    with pytest.raises(VerificationError, match="the feed F expired at 2027-01-15 08:00:00 UTC"):
        verify_feed_index("F", expired_body, expired, policy, now=NOW)
    allowed = verify_feed_index(
        "F", expired_body, expired, _policy(keypair, tmp_path, allow_expired=True), now=NOW
    )
    assert allowed.expired and "THE FEED F EXPIRED" in str(allowed.expiry_warning())
    policy.state_file.write_text(f"{keypair.key_id} 6\n")
    with pytest.raises(VerificationError, match="sequence number 5, lower than 6"):
        verify_feed_index("F", body, signature, policy, now=NOW)
    policy.state_file.write_text(f"{keypair.key_id} 5\n")  # the same seq is no rollback
    assert verify_feed_index("F", body, signature, policy, now=NOW).comment.seq == 5


# -- the feed-seq state --------------------------------------------------------------------


def test_the_state_keeps_the_maximum_per_key_sorted_and_drops_garbage(tmp_path: Path) -> None:
    path = tmp_path / "state" / "feed-seq"
    assert feed_seq.read(path) == {}
    assert feed_seq.record(path, "B0", 3)
    path.write_text(path.read_text() + "not a line\nA1 7\nA1 2\nb0 99\n")
    assert feed_seq.record(path, "B0", 2) is False  # never lowered: nothing to write
    assert feed_seq.record(path, "C2", 1) is True  # rewritten: garbage dropped, sorted
    assert path.read_text() == "A1 7\nB0 3\nC2 1\n"
    assert feed_seq.record(path, "B0", 10**30)
    assert feed_seq.read(path) == {"A1": 7, "B0": 10**30, "C2": 1}
    assert [p.name for p in path.parent.iterdir()] == ["feed-seq"]  # no temporary file left


def test_concurrent_writers_never_lower_a_counter(tmp_path: Path) -> None:
    path = tmp_path / "feed-seq"
    errors: list[BaseException] = []

    def write(key: str) -> None:
        try:
            for seq in range(1, 41):
                feed_seq.record(path, key, seq)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(key,)) for key in ("A", "B", "C")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert feed_seq.read(path) == {"A": 40, "B": 40, "C": 40}


def test_an_unreadable_state_fails_closed(tmp_path: Path) -> None:
    path = tmp_path / "feed-seq"
    path.mkdir()  # reading it fails with an error that is not "missing"
    with pytest.raises(MuxError, match="cannot read"):
        feed_seq.read(path)


def test_the_state_dir_is_platformdirs_user_state_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", "/somewhere/state")
    assert feed_seq.state_path() == Path("/somewhere/state/mux/feed-seq")
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")  # not absolute: ignored
    assert feed_seq.state_path() == Path.home() / ".local" / "state" / "mux" / "feed-seq"


# -- the signed-time downgrade -------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "current", "offered", "signed", "decision"),
    [
        (ReleaseRequest.latest(), "0.2.1", "0.3.0", (200, 100), Decision.SIGNED_EARLIER),
        (ReleaseRequest.latest(), "0.2.1", "0.3.0", (100, 200), Decision.UPDATE),
        (ReleaseRequest.latest(), "0.2.1", "0.3.0", (None, 100), Decision.UPDATE),
        (ReleaseRequest.latest(), "0.3.0", "0.2.0", (200, 100), Decision.NEWER_INSTALLED),
        (ReleaseRequest.latest(), "0.3.0", "0.3.0", (200, 100), Decision.UP_TO_DATE),
        (ReleaseRequest.exactly("0.3.0"), "0.2.1", "0.3.0", (200, 100), Decision.DOWNGRADE_REFUSED),
        (
            ReleaseRequest.exactly("0.3.0", allow_downgrade=True),
            "0.2.1",
            "0.3.0",
            (200, 100),
            Decision.DOWNGRADE,
        ),
    ],
)
def test_a_release_signed_before_the_installed_one_is_a_downgrade(
    request_: ReleaseRequest,
    current: str,
    offered: str,
    signed: tuple[int | None, int | None],
    decision: Decision,
) -> None:
    got = request_.decide(
        current, offered, current_signed_at=signed[0], offered_signed_at=signed[1]
    )
    assert got is decision
    assert not (got is Decision.SIGNED_EARLIER and (got.installs or got.offers_release))


def test_the_signed_time_is_recorded_and_read_back() -> None:
    record = record_install(
        {},
        "0.3.0",
        archive_sha256="a",
        files_sha256="b",
        target="t",
        source="s",
        bin_dir="/b",
        signed_at=1_700_000_000,
    )
    assert record["versions"]["0.3.0"]["signed_at"] == 1_700_000_000
    assert recorded_signed_at(record, "0.3.0") == 1_700_000_000
    unsigned = record_install(
        {}, "0.3.0", archive_sha256="a", files_sha256="b", target="t", source="s", bin_dir="/b"
    )
    assert "signed_at" not in unsigned["versions"]["0.3.0"]
    for garbage in ("1700000000", True, 1.5, None):
        assert recorded_signed_at({"versions": {"0.3.0": {"signed_at": garbage}}}, "0.3.0") is None


# -- RFC 3339, escaping, settings ----------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["2026-11-20T12:00:00Z", "2026-11-20t12:00:00.123+05:30", "2016-12-31T23:59:60Z"]
)
def test_rfc3339_times_are_accepted(value: str) -> None:
    assert parse_rfc3339(value, "released_at") == value


@pytest.mark.parametrize(
    "value",
    ["2026-02-30T00:00:00Z", "2026-11-20 12:00:00Z", "2026-11-20T12:00:00", "\x1b[2K", "", 7],
)
def test_anything_else_is_not_an_rfc3339_time(value: object) -> None:
    with pytest.raises(ParseError, match="is not an RFC 3339 time") as caught:
        parse_rfc3339(value, "released_at")
    assert "\x1b" not in caught.value.message


@given(st.text())
def test_safe_text_leaves_nothing_that_does_not_print(text: str) -> None:
    shown = safe_text(text)
    assert shown.isprintable()
    if text.isprintable():
        assert shown == text


def test_safe_text_writes_controls_as_install_sh_does() -> None:
    assert (
        safe_text("a\x1b[2K\x07\x7f\u009b\u202e\n\té") == "a\\x1b[2K\\x07\\x7f\\x9b\\u202e\\n\\té"
    )


def test_the_http_bounds_come_from_the_environment() -> None:
    loaded = settings.load(
        {
            "MUX_HTTP_DEADLINE": "3",
            "MUX_HTTP_MIN_SPEED": "0",
            "MUX_HTTP_SPEED_WINDOW": "5",
            "MUX_ALLOW_EXPIRED_FEED": "1",
        }
    )
    assert (loaded.http.deadline, loaded.http.min_speed, loaded.http.speed_window) == (3, 0, 5)
    assert loaded.allow_expired_feed
    defaults = settings.load(
        {"MUX_HTTP_DEADLINE": "-1", "MUX_HTTP_SPEED_WINDOW": "0", "MUX_HTTP_TIMEOUT": "nan"}
    )
    assert (defaults.http.deadline, defaults.http.speed_window, defaults.http.timeout) == (
        30,
        30,
        10,
    )
    assert not settings.load({"MUX_ALLOW_EXPIRED_FEED": "yes"}).allow_expired_feed
    assert settings.load({}, flags=settings.Requested(allow_expired_feed=True)).allow_expired_feed


def test_trusted_keys_are_the_builds_then_the_settings_each_once() -> None:
    # --trust-key takes minisign key lines ("Ed", a key id, a key: 42 bytes in base64)
    a, b, c = (base64.b64encode(b"Ed" + bytes([n]) * 40).decode() for n in (1, 2, 3))
    loaded = settings.load({}, flags=settings.Requested(trust_keys=[b, a]))
    assert loaded.trusted_keys([a, c]) == (a, c, b)


# -- the signer URI ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "uri",
    [
        "https://github.com/acme/mux/.github/workflows/release.yml?x.yml",
        "https://github.com/acme/mux/.github/workflows/release.yml?",
        "https://github.com/acme/mux/.github/workflows/release.yml#x",
        "https://user@github.com/acme/mux/.github/workflows/release.yml",
        "https://github.com:443/acme/mux/.github/workflows/release.yml",
        "https://github.com:/acme/mux/.github/workflows/release.yml",
        "https:///acme/mux/.github/workflows/release.yml",
    ],
)
def test_a_signer_uri_with_more_than_a_path_is_refused(uri: str) -> None:
    from updater.trust.attestation_identity import canonical_uri

    with pytest.raises(VerificationError, match="query, a fragment, user info or a port"):
        canonical_uri(uri)


def test_only_owner_repository_and_host_ignore_case() -> None:
    from updater.trust.attestation_identity import canonical_uri

    same = canonical_uri("https://GitHub.com/Acme/MUX/.github/workflows/release.yml")
    assert same == canonical_uri("https://github.com/acme/mux/.github/workflows/release.yml")
    assert canonical_uri("https://github.com/acme/mux/.github/workflows/Release.yml") != same


def test_expiry_words_and_utc_time() -> None:
    from updater.timestamps import utc_text

    assert utc_text(0) == "1970-01-01 00:00:00 UTC"
    assert utc_text(10**30) == f"{10**30} (Unix time)"
    assert time.gmtime(NOW).tm_year == 2027


def test_a_cached_answer_is_keyed_by_every_key_the_answering_build_trusted() -> None:
    """A server's older build shares the check cache (its background check): after a key
    rotation its answers, verified with other keys, answer nothing for this build."""
    from updater.commands.check import cache_key
    from updater.config.buildinfo import BuildInfo, TrustSettings

    def key_for(*keys: str, extra: tuple[str, ...] = ()) -> dict[str, object]:
        build = BuildInfo("1.0.0", 1, "t", "acme/mux", False, TrustSettings(minisign_keys=keys))
        chosen = settings.Settings(trust_keys=extra)
        return cache_key(ReleaseRequest(), chosen, build, "t")

    assert key_for("A") == key_for("A")
    assert key_for("A") != key_for("B")
    assert key_for("A", "B") != key_for("B")
    assert key_for("A", extra=("C",)) != key_for("A")
