"""The lifecycle record's parser (strict, capped) and the pure decision over it (properties)."""

from __future__ import annotations

import json
import secrets

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.version import Version

from release.publish.formats import format_releases_json
from updater.core import lifecycle
from updater.core.lifecycle import LifecyclePolicy, Release, choose, move_from, refusal_of_exact
from updater.errors import ParseError
from updater.formats.lifecycle import (
    NOTES_LIMIT,
    REASON_LIMIT,
    Interval,
    Lifecycle,
    Stage,
    Withdrawal,
    format_time,
    parse_record,
    parse_time,
    pin_parts,
    shown,
)
from updater.formats.models import FeedRelease, parse_releases_json

T0 = parse_time("2026-12-01T12:00:00Z", "t")
DAY = 86400


# -- the parser ------------------------------------------------------------------------------


def test_a_full_record_round_trips() -> None:
    record = Lifecycle(
        released_at=T0,
        stages=(Stage(T0, 5.0), Stage(T0 + DAY, 25.0), Stage(T0 + 3 * DAY, 100.0)),
        halted=True,
        withdrawn=Withdrawal("it eats files", "v1.4.3"),
        critical=True,
        minimum_version="1.3.0",
        notes="Fixes a crash.\nAnd another.",
    )
    assert parse_record(json.loads(json.dumps(record.to_json()))) == record
    interval = Lifecycle(interval=Interval(T0, DAY))
    assert parse_record(interval.to_json()) == interval
    assert parse_record({}) == Lifecycle() and not Lifecycle().staged


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ([], "must be an object"),
        ({"released_at": "2026-12-01T12:00:00+00:00"}, "UTC time"),
        ({"released_at": "2026-02-30T12:00:00Z"}, "not a valid time"),
        ({"released_at": 1764590400}, "UTC time"),
        ({"stages": []}, "1 to 16"),
        ({"stages": [{"start": "2026-12-01T12:00:00Z", "percent": 0}]}, "above 0"),
        ({"stages": [{"start": "2026-12-01T12:00:00Z", "percent": 101}]}, "at most 100"),
        ({"stages": [{"start": "2026-12-01T12:00:00Z", "percent": True}]}, "percent"),
        ({"stages": [{"start": "2026-12-01T12:00:00Z", "percent": float("nan")}]}, "percent"),
        (
            {
                "stages": [
                    {"start": "2026-12-02T12:00:00Z", "percent": 5},
                    {"start": "2026-12-01T12:00:00Z", "percent": 50},
                ]
            },
            "start later",
        ),
        (
            {
                "stages": [
                    {"start": "2026-12-01T12:00:00Z", "percent": 50},
                    {"start": "2026-12-02T12:00:00Z", "percent": 5},
                ]
            },
            "reach more",
        ),
        ({"stages": [{"start": "2026-12-01T12:00:00Z", "percent": 5}] * 17}, "1 to 16"),
        (
            {
                "stages": [{"start": "2026-12-01T12:00:00Z", "percent": 5}],
                "interval": {"start": "2026-12-01T12:00:00Z", "seconds": 60},
            },
            "exclude",
        ),
        ({"interval": {"start": "2026-12-01T12:00:00Z", "seconds": 0}}, "seconds"),
        ({"halted": "yes"}, "true or false"),
        ({"critical": 1}, "true or false"),
        ({"withdrawn": {"reason": ""}}, "give its reason"),
        ({"withdrawn": {"reason": "x" * (REASON_LIMIT + 1)}}, "longer than 300"),
        ({"withdrawn": {"reason": "bad", "replacement": "1.4.3"}}, "not a tag"),
        ({"withdrawn": "bad"}, "must be an object"),
        ({"minimum_version": "latest"}, "not a version"),
        ({"notes": "n" * (NOTES_LIMIT + 1)}, "longer than 1000"),
        ({"notes": 5}, "must be a string"),
    ],
)
def test_every_malformed_field_is_refused(doc: object, words: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_record(doc, "the lifecycle of v1.0.0")
    assert words in caught.value.message


def test_unknown_fields_are_ignored_so_a_later_publisher_can_add_one() -> None:
    assert parse_record({"halted": True, "canary_hosts": ["a"]}) == Lifecycle(halted=True)


def test_a_malformed_record_refuses_the_whole_index() -> None:
    doc = {"releases": [{"tag": "v1.0.0", "lifecycle": {"halted": "no"}}]}
    with pytest.raises(ParseError):
        parse_releases_json(json.dumps(doc).encode())


def test_the_index_writer_and_reader_agree() -> None:
    releases = [
        FeedRelease("v1.0.0", False, Lifecycle(released_at=T0, notes="é \x1b[2J")),
        FeedRelease("v0.9.0", False, None),
    ]
    raw = format_releases_json(releases)
    assert raw.isascii()  # install.sh reads it with LC_ALL=C awk
    assert parse_releases_json(raw) == releases


@given(st.text(max_size=NOTES_LIMIT))
def test_shown_text_is_one_escaped_line_within_its_cap(text: str) -> None:
    line = shown(text, 200)
    assert len(line) <= 200 and line.isprintable()
    assert "\x1b" not in line and "\n" not in line


@given(st.integers(min_value=0, max_value=4_000_000_000))
def test_times_round_trip(epoch: int) -> None:
    assert parse_time(format_time(epoch), "t") == epoch


@pytest.mark.parametrize("pin", ["", "1.", "v1", "1.4.x", "1.2.3.4", "\u0661"])
def test_a_pin_is_one_to_three_numbers(pin: str) -> None:
    with pytest.raises(ParseError):
        pin_parts(pin)


# -- the decision ----------------------------------------------------------------------------


def rel(version: str, **fields: object) -> Release:
    return Release(f"v{version}", Version(version), Lifecycle(**fields))  # type: ignore[arg-type]


STAGED = rel(
    "1.1.0",
    released_at=T0,
    stages=(
        Stage(T0, 5.0),
        Stage(T0 + DAY, 15.0),
        Stage(T0 + 2 * DAY, 50.0),
        Stage(T0 + 3 * DAY, 100.0),
    ),
)
OLD = rel("1.0.0", released_at=T0 - 30 * DAY)


def offered(bucket: int, now: float, releases=(STAGED, OLD), **kw: object) -> str | None:
    policy = kw.pop("policy", LifecyclePolicy())
    installed = kw.pop("installed", Version("1.0.0"))
    choice = choose(
        list(releases), installed=installed, bucket=bucket, policy=policy, now=now, **kw
    )  # type: ignore[arg-type]
    return choice.offered.tag if choice.offered else None


def test_over_a_hundred_thousand_machines_each_stage_reaches_its_share() -> None:
    machines = [secrets.randbelow(lifecycle.BUCKETS) for _ in range(100_000)]
    for stage in STAGED.lifecycle.stages:
        now = stage.start + 60
        share = sum(offered(b, now) == "v1.1.0" for b in machines) / len(machines) * 100
        assert abs(share - stage.percent) <= 1, (stage, share)


@settings(max_examples=20)
@given(st.integers(0, lifecycle.BUCKETS - 1), st.integers(T0 - DAY, T0 + 5 * DAY))
def test_one_machine_gives_the_same_answer_every_time(bucket: int, now: int) -> None:
    answers = {offered(bucket, now) for _ in range(1000)}
    assert len(answers) == 1


@given(
    st.integers(0, lifecycle.BUCKETS - 1),
    st.integers(T0, T0 + 5 * DAY),
    st.integers(0, 5 * DAY),
)
def test_once_offered_a_release_stays_offered_as_time_goes_on(
    bucket: int, now: int, later: int
) -> None:
    if offered(bucket, now) == "v1.1.0":
        assert offered(bucket, now + later) == "v1.1.0"


@given(st.integers(0, lifecycle.BUCKETS - 1), st.integers(T0, T0 + 5 * DAY))
def test_the_held_back_release_is_offered_exactly_when_it_says(bucket: int, now: int) -> None:
    choice = choose(
        [STAGED, OLD], installed=Version("1.0.0"), bucket=bucket, policy=LifecyclePolicy(), now=now
    )
    if choice.offered is not None and choice.offered.tag == "v1.1.0":
        assert choice.held == ()
        return
    (held,) = choice.held
    assert held.offered_at is not None and held.offered_at > now
    assert offered(bucket, held.offered_at) == "v1.1.0"
    assert offered(bucket, held.offered_at - 1) != "v1.1.0"


@given(st.integers(0, lifecycle.BUCKETS - 1))
def test_rings_move_a_machine_early_or_late(bucket: int) -> None:
    early = lifecycle.place(bucket, "early")
    default = lifecycle.place(bucket, "default")
    late = lifecycle.place(bucket, "late")
    assert 0 <= early <= default <= late < 1
    assert early < 0.1 and late >= 0.9
    # early: offered from the 15 % stage at the latest; late: only at 100 %
    assert offered(bucket, T0 + DAY + 1, policy=LifecyclePolicy(ring="early")) == "v1.1.0"
    assert offered(bucket, T0 + 2 * DAY + 1, policy=LifecyclePolicy(ring="late")) != "v1.1.0"


def test_an_interval_releases_one_of_seven_groups_at_a_time() -> None:
    release = rel("1.1.0", released_at=T0, interval=Interval(T0, DAY))
    for group in range(7):
        bucket = int((group + 0.5) / 7 * lifecycle.BUCKETS)
        assert offered(bucket, T0 + group * DAY - 1, releases=[release, OLD]) == "v1.0.0"
        assert offered(bucket, T0 + group * DAY, releases=[release, OLD]) == "v1.1.0"


@given(st.integers(0, lifecycle.BUCKETS - 1), st.integers(T0, T0 + 5 * DAY), st.booleans())
def test_halted_and_withdrawn_are_offered_to_nobody_whatever_else(
    bucket: int, now: int, critical: bool
) -> None:
    for change in ({"halted": True}, {"withdrawn": Withdrawal("bad", None)}):
        release = STAGED._replace(lifecycle=STAGED.lifecycle._replace(critical=critical, **change))
        assert offered(bucket, now, releases=[release, OLD]) == "v1.0.0"
        assert offered(bucket, now, releases=[release, OLD], installed=None) == "v1.0.0"


def test_a_halted_release_stays_where_it_is_installed() -> None:
    halted = STAGED._replace(lifecycle=STAGED.lifecycle._replace(halted=True))
    assert offered(9999, T0, releases=[halted, OLD], installed=Version("1.1.0")) == "v1.1.0"


@given(st.integers(0, lifecycle.BUCKETS - 1), st.integers(T0, T0 + 5 * DAY))
def test_a_fresh_install_takes_the_newest_whatever_the_stage(bucket: int, now: int) -> None:
    assert offered(bucket, now, installed=None) == "v1.1.0"


@given(st.integers(0, lifecycle.BUCKETS - 1), st.integers(T0, T0 + 5 * DAY))
def test_critical_and_required_releases_skip_the_stages_not_the_pin(bucket: int, now: int) -> None:
    critical = STAGED._replace(lifecycle=STAGED.lifecycle._replace(critical=True))
    assert offered(bucket, now, releases=[critical, OLD]) == "v1.1.0"
    required = STAGED._replace(lifecycle=STAGED.lifecycle._replace(minimum_version="1.1.0"))
    choice = choose(
        [required, OLD],
        installed=Version("1.0.0"),
        bucket=bucket,
        policy=LifecyclePolicy(),
        now=now,
    )
    assert choice.offered == required and choice.minimum_version == "1.1.0" and choice.critical
    pinned = LifecyclePolicy(pin="1.0")
    assert offered(bucket, now, releases=[critical, OLD], policy=pinned) == "v1.0.0"


def test_the_cooldown_holds_young_releases_and_unknown_ages_for_good() -> None:
    policy = LifecyclePolicy(minimum_release_age=72 * 3600)
    full = rel("1.1.0", released_at=T0)
    assert offered(0, T0 + 71 * 3600, releases=[full, OLD], policy=policy) == "v1.0.0"
    assert offered(0, T0 + 72 * 3600, releases=[full, OLD], policy=policy) == "v1.1.0"
    unknown = rel("1.1.0")
    choice = choose(
        [unknown, OLD], installed=Version("1.0.0"), bucket=0, policy=policy, now=T0 + 99 * DAY
    )
    assert (
        choice.offered == OLD
        and choice.held[0].why == "cooldown"
        and choice.held[0].offered_at is None
    )
    critical = rel("1.1.0", released_at=T0, critical=True)
    assert offered(0, T0, releases=[critical, OLD], policy=policy) == "v1.1.0"
    # a fresh install honours it too
    assert offered(0, T0, releases=[full, OLD], policy=policy, installed=None) == "v1.0.0"


def test_a_pin_keeps_a_machine_on_its_line() -> None:
    policy = LifecyclePolicy(pin="1.0")
    fix = rel("1.0.5", released_at=T0)
    assert offered(0, T0 + 9 * DAY, releases=[STAGED, fix, OLD], policy=policy) == "v1.0.5"


def test_moving_off_a_withdrawn_release() -> None:
    bad = rel("1.1.0", released_at=T0, withdrawn=Withdrawal("bad", "v1.1.1"))
    fix = rel("1.1.1", released_at=T0, stages=(Stage(T0, 1.0),))
    policy = LifecyclePolicy()
    installed = Version("1.1.0")

    def move(releases, kept=("1.0.0", "1.1.0")):
        choice = choose(releases, installed=installed, bucket=9999, policy=policy, now=T0 + DAY)
        assert choice.withdrawn is not None
        return move_from(choice, releases, installed=installed, kept=kept, policy=policy)

    assert move([fix, bad, OLD]) == lifecycle.Move("replacement", "1.1.1", "v1.1.1")
    no_replacement = bad._replace(
        lifecycle=bad.lifecycle._replace(withdrawn=Withdrawal("bad", None))
    )
    assert move([no_replacement, OLD]) == lifecycle.Move("kept", "1.0.0", "v1.0.0")
    assert move([no_replacement, OLD], kept=("1.1.0",)) == lifecycle.Move(
        "older", "1.0.0", "v1.0.0"
    )
    gone = OLD._replace(lifecycle=OLD.lifecycle._replace(withdrawn=Withdrawal("also", None)))
    assert move([no_replacement, gone]) is None


def test_an_exact_request_ignores_stages_but_not_a_withdrawal_or_the_policy() -> None:
    policy = LifecyclePolicy()
    assert refusal_of_exact(STAGED, policy, now=T0, allow_withdrawn=False) is None
    bad = STAGED._replace(lifecycle=STAGED.lifecycle._replace(withdrawn=Withdrawal("bad", None)))
    assert refusal_of_exact(bad, policy, now=T0, allow_withdrawn=False) == (
        "withdrawn",
        "withdrawn",
    )
    assert refusal_of_exact(bad, policy, now=T0, allow_withdrawn=True) is None
    pinned = LifecyclePolicy(pin="1.0")
    assert refusal_of_exact(bad, pinned, now=T0, allow_withdrawn=True)[0] == "policy"  # type: ignore[index]
    cooling = LifecyclePolicy(minimum_release_age=DAY)
    assert refusal_of_exact(STAGED, cooling, now=T0, allow_withdrawn=False)[0] == "policy"  # type: ignore[index]
