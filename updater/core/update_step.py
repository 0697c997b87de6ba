"""What ``mux update`` does with the release on offer: one pure decision, no I/O, no clock.

:func:`plan_update` names every case of an update once its source has answered (a withdrawn
install and where it moves, a release the machine policy holds, up to date, a refused
downgrade, a release the user withheld, a protocol an automatic install may not take, a
release with no build for this machine, the dry run, the install) as one
:class:`UpdateStep`. :mod:`updater.commands.update` executes the step: it does the I/O this
module never does (the network, ``MUX_HOME``, the servers). The facts come in as plain
values (:class:`UpdateFacts`), so a table test calls it with no source and no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, NamedTuple

from updater.core.nextstep import for_install_only, mux_update
from updater.core.request import Decision, ReleaseRequest, signed_earlier
from updater.core.userstate import UserState, Withheld, withheld
from updater.errors import InstallError, MuxError, PolicyError, VerificationError, WithdrawnError
from updater.formats.lifecycle import shown
from updater.timestamps import utc_text

if TYPE_CHECKING:
    from updater.core.lifecycle import Move
    from updater.core.offer import HeldRelease, LifecycleView


class Automatic(NamedTuple):
    """An install a server's background check makes on its own (auto_install): it obeys the
    user's skips, holds and failed starts even for the exact release it names, and, with
    ``protocol_version``, installs only a release that speaks that protocol (the one every
    live server speaks, for ``auto_install = "compatible"``)."""

    protocol_version: int | None = None


class StepKind(StrEnum):
    REFUSE = "refuse"  # raise ``error``: nothing is installed
    MOVE_BACK = "move-back"  # off a withdrawn release, to the kept ``version`` (offline)
    WOULD_MOVE_BACK = "would-move-back"  # the dry run of MOVE_BACK
    MOVE_TO = "move-to"  # off a withdrawn release: update to exactly ``tag`` instead
    HELD = "held"  # the machine policy holds the release back: nothing to do, and why
    UP_TO_DATE = "up-to-date"
    WITHHELD = "withheld"  # the user skipped or held it, or it failed to start here
    DRY_RUN = "dry-run"  # what INSTALL would do, checked as far as it can be without the archive
    INSTALL = "install"


@dataclass(frozen=True)
class UpdateStep:
    """The one thing an update does next; ``notes`` say why (shown with the result)."""

    kind: StepKind
    notes: tuple[str, ...] = ()
    error: MuxError | None = None  # REFUSE
    version: str | None = None  # MOVE_BACK and WOULD_MOVE_BACK: the kept version
    tag: str | None = None  # MOVE_TO
    withheld: Withheld | None = None  # WITHHELD


@dataclass(frozen=True)
class UpdateFacts:
    """Everything :func:`plan_update` decides on, as plain values."""

    request: ReleaseRequest
    tag: str  # the tag on offer
    version: str  # its version
    protocol_version: int
    signed_at: int | None  # its signed time
    decision: Decision  # its decision against the installed version
    lifecycle: LifecycleView  # what the signed lifecycle made of the offer
    move: Move | None  # where a withdrawn install moves
    installed: str | None
    installed_signed_at: int | None
    target: str  # this machine's build target
    targets: tuple[str, ...]  # the builds the release has
    carried: tuple[str, ...] = ()  # the options the user's command needed (for the hints)
    automatic: Automatic | None = None
    dry_run: bool = False
    user_state: UserState | None = None  # read when :func:`consults_user_state` says so
    now: float = 0.0  # with ``user_state``: when a hold ends


def consults_user_state(facts: UpdateFacts) -> bool:
    """The user's skips, holds and failed starts decide this update (so the executor reads
    them): a newer release the request did not name, or any an automatic install takes."""
    return facts.decision is Decision.UPDATE and (
        facts.automatic is not None or not facts.request.exact
    )


def plan_update(facts: UpdateFacts) -> UpdateStep:
    """The step ``mux update`` takes for the release on offer (see :class:`StepKind`)."""
    notes: tuple[str, ...] = ()
    withdrawn = facts.lifecycle.withdrawn if not facts.request.exact else None
    if withdrawn is not None:
        step = _off_withdrawn(
            facts,
            f"mux {withdrawn.version} was withdrawn by its publisher: "
            f"{shown(withdrawn.reason, 300)}",
            withdrawn.version,
        )
        if step.kind is not StepKind.INSTALL:
            return step
        notes = step.notes
    held = _policy_hold(facts)
    if held is not None:
        return held
    step = _on_decision(facts)
    return (
        step
        if not notes
        else UpdateStep(
            step.kind, notes + step.notes, step.error, step.version, step.tag, step.withheld
        )
    )


def _off_withdrawn(facts: UpdateFacts, why: str, version: str) -> UpdateStep:
    """Where a withdrawn install goes; INSTALL (with a note) when the offer is that place."""
    move = facts.move
    if move is None:
        return _refuse(
            WithdrawnError(
                f"{why}; no release this machine may install replaces it",
                hint="to keep it on purpose: mux update --version "
                f"{version} --allow-withdrawn (or wait for a fixed release)",
            )
        )
    if move.kind == "kept":
        if facts.dry_run:
            note = f"{why}; would move back to the kept mux {move.version}"
            return UpdateStep(StepKind.WOULD_MOVE_BACK, (note,), version=move.version)
        note = f"{why}; moved back to the kept mux {move.version}"
        return UpdateStep(StepKind.MOVE_BACK, (note,), version=move.version)
    note = f"{why}; moving to mux {move.version} ({move.kind})"
    offered_is_the_move = facts.tag == move.tag and facts.decision.installs
    if move.kind in ("replacement", "older") and not offered_is_the_move:
        # Asked for by tag: the stages do not hold a move off a withdrawn release.
        return UpdateStep(StepKind.MOVE_TO, (note,), tag=move.tag)
    return UpdateStep(StepKind.INSTALL, (note,))


def _policy_hold(facts: UpdateFacts) -> UpdateStep | None:
    """The machine policy holds the offered release back (a release asked for by version is
    not held): a first install is refused, an installed mux stays as it is."""
    if facts.request.exact or not facts.lifecycle.holds(facts.tag):
        return None
    held: HeldRelease = next(h for h in facts.lifecycle.held if h.tag == facts.tag)
    why = f"{held.why}, until {held.offered_at})" if held.offered_at else f"{held.why})"
    if facts.installed is None:
        return _refuse(
            PolicyError(
                f"the machine policy holds mux {facts.version} back ({why}",
                hint="its administrator decides this for every mux on this machine",
            )
        )
    return UpdateStep(
        StepKind.HELD, (f"mux {facts.version} is held back by the machine policy ({why}",)
    )


def _on_decision(facts: UpdateFacts) -> UpdateStep:
    """Up to date, refused, withheld, or on to the install (or its dry run)."""
    if facts.decision is Decision.UP_TO_DATE:
        return UpdateStep(StepKind.UP_TO_DATE)
    if not facts.decision.installs:
        return _refuse(_refused_downgrade(facts))
    if consults_user_state(facts):
        assert facts.user_state is not None, "consults_user_state: the executor reads it"
        kept_back = withheld(facts.user_state, facts.version, facts.now)
        if kept_back is not None:
            return UpdateStep(StepKind.WITHHELD, withheld=kept_back)
    wanted = facts.automatic.protocol_version if facts.automatic is not None else None
    if wanted is not None and facts.protocol_version != wanted:
        return _refuse(
            InstallError(
                f"mux {facts.version} speaks protocol {facts.protocol_version}, not "
                f"{wanted} like every live server: not installed automatically"
            )
        )
    if facts.target not in facts.targets:
        return _refuse(
            InstallError(
                f"release {facts.tag} has no build for {facts.target}",
                hint="it has: " + (", ".join(facts.targets) or "no builds"),
            )
        )
    return UpdateStep(StepKind.DRY_RUN if facts.dry_run else StepKind.INSTALL)


def _refused_downgrade(facts: UpdateFacts) -> MuxError:
    """Why the offered release is not installed over the installed one without
    ``--allow-downgrade``."""
    version, installed = facts.version, facts.installed
    again = mux_update("--version", version, "--allow-downgrade", carried=facts.carried)
    how = f"to go back on purpose: {again}"
    back = mux_update("--rollback", carried=for_install_only(facts.carried))
    if signed_earlier(facts.installed_signed_at, facts.signed_at):
        assert facts.signed_at is not None and facts.installed_signed_at is not None
        return VerificationError(
            f"mux {version} was signed {utc_text(facts.signed_at)}, before the installed mux "
            f"{installed} ({utc_text(facts.installed_signed_at)}): installing it would be a "
            "downgrade (or an old release replayed)",
            hint=f"{how} ({back} returns to the previous version)",
        )
    return InstallError(
        f"{version} is older than the installed {installed}; not downgrading", hint=how
    )


def _refuse(error: MuxError) -> UpdateStep:
    return UpdateStep(StepKind.REFUSE, error=error)
