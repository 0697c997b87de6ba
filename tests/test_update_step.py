"""updater.core.update_step: every case of an update, as a row (pure: no source, no clock)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from updater.core.lifecycle import Move
from updater.core.offer import HeldRelease, LifecycleView, WithdrawnInstall
from updater.core.request import Decision, ReleaseRequest
from updater.core.retention import StagedCopy, settle, staged_matches, staged_version
from updater.core.update_step import (
    Automatic,
    StepKind,
    UpdateFacts,
    consults_user_state,
    plan_update,
)
from updater.core.userstate import FailedStart, UserState
from updater.errors import InstallError, PolicyError, VerificationError, WithdrawnError

NOW = 1_800_000_000.0
LATEST = ReleaseRequest.latest()
EXACT = ReleaseRequest.exactly("1.2.0")
NO_LIFECYCLE = LifecycleView(available=False, origin="none", rollout_bucket=None, ring="stable")
WITHDRAWN = NO_LIFECYCLE._replace(
    withdrawn=WithdrawnInstall("1.1.0", "a bad bug", "v1.2.0", "replacement", "1.2.0")
)
HELD = NO_LIFECYCLE._replace(
    held=(HeldRelease("v1.2.0", "1.2.0", "rollout", "2027-01-01T00:00:00Z"),)
)


def facts(**changes: Any) -> UpdateFacts:
    base = UpdateFacts(
        request=LATEST,
        tag="v1.2.0",
        version="1.2.0",
        protocol_version=3,
        signed_at=2_000,
        decision=Decision.UPDATE,
        lifecycle=NO_LIFECYCLE,
        move=None,
        installed="1.1.0",
        installed_signed_at=1_000,
        target="linux-x86_64",
        targets=("linux-x86_64", "macos-arm64"),
        carried=("--source", "/srv/feed"),
        user_state=UserState(),
        now=NOW,
    )
    return replace(base, **changes)


# (case, facts, expected kind, expected error type or None, a word the step must carry)
CASES = [
    ("a newer release installs", facts(), StepKind.INSTALL, None, None),
    (
        "a first install installs",
        facts(installed=None, decision=Decision.INSTALL),
        StepKind.INSTALL,
        None,
        None,
    ),
    ("the dry run of an install", facts(dry_run=True), StepKind.DRY_RUN, None, None),
    ("up to date", facts(decision=Decision.UP_TO_DATE), StepKind.UP_TO_DATE, None, None),
    (
        "a newer installed one is not downgraded",
        facts(decision=Decision.NEWER_INSTALLED),
        StepKind.REFUSE,
        InstallError,
        "--allow-downgrade",
    ),
    (
        "a refused downgrade's hint carries the options",
        facts(request=EXACT, decision=Decision.DOWNGRADE_REFUSED),
        StepKind.REFUSE,
        InstallError,
        "/srv/feed",
    ),
    (
        "signed before the installed one: a replay",
        facts(decision=Decision.SIGNED_EARLIER, signed_at=500),
        StepKind.REFUSE,
        VerificationError,
        "replayed",
    ),
    (
        "an allowed downgrade installs",
        facts(request=EXACT, decision=Decision.DOWNGRADE),
        StepKind.INSTALL,
        None,
        None,
    ),
    (
        "skipped by the user",
        facts(user_state=UserState(skipped=("1.2.0",))),
        StepKind.WITHHELD,
        None,
        "skipped",
    ),
    (
        "held by the user",
        facts(user_state=UserState(hold_until=NOW + 60)),
        StepKind.WITHHELD,
        None,
        "held",
    ),
    (
        "a hold that ended",
        facts(user_state=UserState(hold_until=NOW - 60)),
        StepKind.INSTALL,
        None,
        None,
    ),
    (
        "failed to start here",
        facts(user_state=UserState(failed=(FailedStart("1.2.0", 2, NOW - 5, "exited 1"),))),
        StepKind.WITHHELD,
        None,
        "failed",
    ),
    (
        "asked for by version: the skip does not apply",
        facts(request=EXACT, user_state=UserState(skipped=("1.2.0",))),
        StepKind.INSTALL,
        None,
        None,
    ),
    (
        "an automatic install obeys the skip even by version",
        facts(request=EXACT, automatic=Automatic(), user_state=UserState(skipped=("1.2.0",))),
        StepKind.WITHHELD,
        None,
        "skipped",
    ),
    (
        "an automatic install of another protocol",
        facts(automatic=Automatic(2)),
        StepKind.REFUSE,
        InstallError,
        "protocol 3",
    ),
    (
        "an automatic install of the same protocol",
        facts(automatic=Automatic(3)),
        StepKind.INSTALL,
        None,
        None,
    ),
    (
        "no build for this machine",
        facts(targets=("macos-arm64",)),
        StepKind.REFUSE,
        InstallError,
        "macos-arm64",
    ),
    ("held by the machine policy", facts(lifecycle=HELD), StepKind.HELD, None, "rollout"),
    (
        "held by the machine policy, nothing installed",
        facts(lifecycle=HELD, installed=None, decision=Decision.INSTALL),
        StepKind.REFUSE,
        PolicyError,
        "administrator",
    ),
    (
        "asked for by version: the policy hold does not apply",
        facts(lifecycle=HELD, request=EXACT),
        StepKind.INSTALL,
        None,
        None,
    ),
    (
        "withdrawn, nowhere to go",
        facts(lifecycle=WITHDRAWN),
        StepKind.REFUSE,
        WithdrawnError,
        "--allow-withdrawn",
    ),
    (
        "withdrawn, back to a kept version",
        facts(lifecycle=WITHDRAWN, move=Move("kept", "1.0.0", None)),
        StepKind.MOVE_BACK,
        None,
        "1.0.0",
    ),
    (
        "withdrawn, the dry run of going back",
        facts(lifecycle=WITHDRAWN, dry_run=True, move=Move("kept", "1.0.0", None)),
        StepKind.WOULD_MOVE_BACK,
        None,
        "1.0.0",
    ),
    (
        "withdrawn, its replacement is on offer",
        facts(lifecycle=WITHDRAWN, move=Move("replacement", "1.2.0", "v1.2.0")),
        StepKind.INSTALL,
        None,
        "replacement",
    ),
    (
        "withdrawn, its replacement is another tag",
        facts(lifecycle=WITHDRAWN, move=Move("replacement", "1.3.0", "v1.3.0")),
        StepKind.MOVE_TO,
        None,
        "v1.3.0",
    ),
    (
        "withdrawn, an older release to go to",
        facts(
            lifecycle=WITHDRAWN,
            decision=Decision.NEWER_INSTALLED,
            move=Move("older", "1.0.1", "v1.0.1"),
        ),
        StepKind.MOVE_TO,
        None,
        "v1.0.1",
    ),
    (
        "withdrawn, but asked for by version",
        facts(lifecycle=WITHDRAWN, request=EXACT),
        StepKind.INSTALL,
        None,
        None,
    ),
]


@pytest.mark.parametrize(
    ("case", "given", "kind", "error", "word"), CASES, ids=[c[0] for c in CASES]
)
def test_plan_update(
    case: str, given: UpdateFacts, kind: StepKind, error: type | None, word: str | None
) -> None:
    step = plan_update(given)
    assert step.kind is kind, case
    if error is None:
        assert step.error is None
    else:
        assert type(step.error) is error
    if word is not None:
        said = " ".join(
            [
                *step.notes,
                str(step.error or ""),
                getattr(step.error, "hint", "") or "",
                step.version or "",
                step.tag or "",
                step.withheld.reason if step.withheld else "",
            ]
        )
        assert word in said, said


def test_a_withdrawn_install_that_moves_on_keeps_its_note_through_the_decision() -> None:
    given = facts(lifecycle=WITHDRAWN, move=Move("update", "1.2.0", "v1.2.0"))
    step = plan_update(given)
    assert step.kind is StepKind.INSTALL
    assert step.notes == (
        "mux 1.1.0 was withdrawn by its publisher: a bad bug; moving to mux 1.2.0 (update)",
    )


def test_the_user_state_is_read_only_when_it_decides() -> None:
    assert consults_user_state(facts())
    assert not consults_user_state(facts(request=EXACT))
    assert consults_user_state(facts(request=EXACT, automatic=Automatic()))
    assert not consults_user_state(facts(decision=Decision.UP_TO_DATE))
    # The executor passes no state when it is not consulted; the plan does not need it then.
    assert plan_update(facts(request=EXACT, user_state=None)).kind is StepKind.INSTALL


@pytest.mark.parametrize(
    "entry",
    [
        {"version": "1.3.0"},
        {"version": "1.3.0", "staged_at": float("nan"), "took": 1.0, "bytes": 10},
        {"version": "1.3.0", "staged_at": 1.0, "took": 1.0, "bytes": float("inf")},
        {"version": "1.3.0", "staged_at": 1e400, "took": 1.0, "bytes": 10},
        {"version": "1.3.0", "staged_at": -1.0, "took": 1.0, "bytes": 10},
        {"version": 13, "staged_at": 1.0, "took": 1.0, "bytes": 10},
    ],
)
def test_a_staged_entry_that_is_not_whole_is_neither_kept_nor_applied(entry: dict) -> None:
    record = {"active": "1.2.0", "versions": {"1.2.0": {}, "1.3.0": {}}, "staged": entry}
    assert StagedCopy.of(record) is None and staged_version(record) is None
    settled = settle(record, active="1.2.0", installed=["1.2.0", "1.3.0"])
    assert settled.remove == ("1.3.0",)  # nothing keeps it
    assert settled.record is not None and "staged" not in settled.record


def test_a_whole_staged_entry_is_kept_and_matched_to_the_offer() -> None:
    entry = {"version": "1.3.0", "staged_at": 1.0, "took": 2.0, "bytes": 10}
    versions = {"1.3.0": {"archive_sha256": "ab", "target": "t", "source": "s"}}
    record = {"active": "1.2.0", "versions": {"1.2.0": {}, **versions}, "staged": entry}
    assert StagedCopy.of(record) == StagedCopy("1.3.0", 1.0, 2.0, 10)
    kept = settle(record, active="1.2.0", installed=["1.2.0", "1.3.0"]).kept
    assert [(k.version, k.kind) for k in kept] == [("1.2.0", "active"), ("1.3.0", "staged")]
    same = {"archive_sha256": "ab", "target": "t", "source": "s"}
    assert staged_matches(record, "1.3.0", **same)
    for field, other in [("archive_sha256", "cd"), ("target", "u"), ("source", "elsewhere")]:
        assert not staged_matches(record, "1.3.0", **{**same, field: other})
