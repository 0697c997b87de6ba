"""The signed lifecycle state applied to a request: which tag is on offer here, and the view
every surface reports (``--check``, ``mux update``, a server's background check and watch).

:func:`plan_lifecycle` reads the source's signed lifecycle (:meth:`ReleaseSource.lifecycle
<updater.sources.base.ReleaseSource.lifecycle>`: the verified TUF targets for a build that
trusts a TUF root, else a feed's verified index), this machine's rollout bucket
(:mod:`updater.config.rollout_bucket`) and the policy's pin, cooldown and ring, and asks
:func:`updater.core.lifecycle.choose`. A source without signed lifecycle data (GitHub, for a
build without a TUF root) gets a view that says so; its one release on offer is still held
to the pin and the cooldown by the signed manifest (:func:`hold_by_manifest`), never by
anything unsigned.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from updater.config.rollout_bucket import machine_bucket
from updater.config.settings import Settings
from updater.core import lifecycle
from updater.core.lifecycle import Choice, LifecyclePolicy, Move, Release
from updater.core.offer import HeldRelease, LifecycleView, WithdrawnInstall
from updater.core.request import ReleaseRequest
from updater.errors import MuxError, ParseError, PolicyError
from updater.formats import models
from updater.formats.lifecycle import Lifecycle, SignedLifecycle, parse_time, shown
from updater.sources.base import ReleaseSource
from updater.timestamps import rfc3339

EXACT_REFUSED_HINT = (
    "choose another version, or take this one on purpose: mux update --version {version} "
    "--allow-withdrawn"
)


class LifecyclePlan(NamedTuple):
    tag: str  # the tag on offer for this machine
    view: LifecycleView
    releases: tuple[Release, ...]  # every release the signed data lists (empty: none)
    choice: Choice | None  # None: the source has no signed lifecycle
    move: Move | None  # where mux update takes a machine on a withdrawn release
    policy: LifecyclePolicy


def lifecycle_policy(settings: Settings) -> LifecyclePolicy:
    return LifecyclePolicy(
        pin=settings.pin, minimum_release_age=settings.minimum_release_age, ring=settings.ring
    )


def plan_lifecycle(
    source: ReleaseSource,
    request: ReleaseRequest,
    settings: Settings,
    *,
    tag: str,
    installed: str | None,
    kept: Sequence[str],
    now: float,
) -> LifecyclePlan:
    """The tag on offer for ``request`` (``tag``: what the source resolved it to) under the
    signed lifecycle. Raises :class:`PolicyError` (exit 4) when an exact request is outside
    the pin or the cooldown, :class:`MuxError` when it names a withdrawn or halted release
    without ``--allow-withdrawn``, or when nothing at all is on offer here."""
    policy = lifecycle_policy(settings)
    bucket = machine_bucket(settings.state_dir)
    signed = source.lifecycle()
    base = LifecycleView(
        available=signed is not None,
        origin=signed.origin if signed is not None else source.lifecycle_unavailable,
        rollout_bucket=bucket,
        ring=policy.ring,
        pin=policy.pin,
        minimum_release_age=policy.minimum_release_age,
    )
    if signed is None:
        return LifecyclePlan(tag, base, (), None, None, policy)
    releases = _releases(signed)
    have = models.parse_version(installed) if installed is not None else None
    # No bucket (an unwritable state dir): the last place, so only a finished rollout counts.
    choice = lifecycle.choose(
        releases,
        installed=have,
        bucket=lifecycle.BUCKETS - 1 if bucket is None else bucket,
        policy=policy,
        now=now,
        include_pre=request.include_pre,
    )
    move = None
    if choice.withdrawn is not None and have is not None:
        move = lifecycle.move_from(choice, releases, installed=have, kept=kept, policy=policy)
    if request.exact:
        chosen = next((r for r in releases if r.tag == tag), None)
        if chosen is not None:
            _refuse_exact(chosen, policy, now=now, allow_withdrawn=request.allow_withdrawn)
    else:
        tag = _offered_tag(choice, releases, installed, source)
    offered = next((r for r in releases if r.tag == tag), None)
    record = offered.lifecycle if offered is not None else Lifecycle()
    view = base._replace(
        held=tuple(
            HeldRelease(
                h.tag, h.version, h.why, None if h.offered_at is None else rfc3339(h.offered_at)
            )
            for h in choice.held
            if h.tag != tag  # asked for by version: the stages do not hold it
        ),
        critical=choice.critical or record.critical,
        notes=record.notes,
        withdrawn=(
            WithdrawnInstall(
                version=str(installed),
                reason=choice.withdrawn.reason,
                replacement=choice.withdrawn.replacement,
                move_kind=move.kind if move else None,
                move_to=move.version if move else None,
            )
            if choice.withdrawn is not None
            else None
        ),
        minimum_version=choice.minimum_version,
        required_by=choice.required_by,
        next_change=choice.next_change,
    )
    return LifecyclePlan(tag, view, tuple(releases), choice, move, policy)


def offering_move(plan: LifecyclePlan) -> LifecyclePlan:
    """For the check: the release ``mux update`` will move a withdrawn install to, as the
    one on offer (its stage does not hold a move, so it is not listed as held back); the plan
    itself when there is no move to a listed release (none, or back to a kept version)."""
    move = plan.move
    if move is None or move.kind == "kept" or move.tag is None:
        return plan
    held = tuple(h for h in plan.view.held if h.tag != move.tag)
    return plan._replace(tag=move.tag, view=plan.view._replace(held=held))


def hold_by_manifest(
    plan: LifecyclePlan,
    request: ReleaseRequest,
    *,
    tag: str,
    version: str,
    released_at: str,
    now: float,
) -> LifecyclePlan:
    """A source without signed lifecycle data offers one release: hold it to the pin and
    the cooldown by its signed manifest (its version, its ``released_at``). Exact requests
    outside either are refused (exit 4)."""
    if plan.choice is not None:
        return plan
    policy = plan.policy
    stand_in = Release(
        tag, models.parse_version(version), Lifecycle(released_at=_time(released_at))
    )
    refusal = lifecycle.refusal_of_exact(stand_in, policy, now=now, allow_withdrawn=True)
    if refusal is None:
        return plan
    if request.exact:
        raise PolicyError(
            f"the machine policy keeps mux {version} off this machine: {refusal[1]}",
            hint="its administrator decides this for every mux on this machine",
        )
    why = "pin" if refusal[1].startswith("pin") else "cooldown"
    offered_at = None
    if why == "cooldown" and stand_in.lifecycle.released_at is not None:
        offered_at = rfc3339(stand_in.lifecycle.released_at + (policy.minimum_release_age or 0))
    held = HeldRelease(tag, version, why, offered_at)
    return plan._replace(view=plan.view._replace(held=(*plan.view.held, held)))


def _time(text: str) -> int | None:
    try:
        return parse_time(text, "released_at")
    except ParseError:
        return None  # an offset or a fraction: the age is unknown (the cooldown holds it)


def _releases(signed: SignedLifecycle) -> list[Release]:
    releases = []
    for tag, record in signed.listed:
        try:
            releases.append(Release(tag, models.parse_tag(tag), record))
        except ParseError:
            continue  # another tag family: not a mux release
    return releases


def _offered_tag(
    choice: Choice, releases: Sequence[Release], installed: str | None, source: ReleaseSource
) -> str:
    if choice.offered is not None:
        return choice.offered.tag
    mine = next(
        (r for r in releases if installed is not None and str(r.version) == installed), None
    )
    if mine is not None:
        return mine.tag  # nothing else here: the installed release is decided against itself
    held = ", ".join(
        f"{h.version} ({h.why}{', from ' + rfc3339(h.offered_at) if h.offered_at else ''})"
        for h in choice.held[:5]
    )
    raise MuxError(
        f"no release of {source.location} is offered to this machine yet"
        + (f" (held back: {held})" if held else ""),
        hint="mux update --version X installs a release whatever its rollout stage",
    )


def _refuse_exact(
    release: Release, policy: LifecyclePolicy, *, now: float, allow_withdrawn: bool
) -> None:
    refusal = lifecycle.refusal_of_exact(release, policy, now=now, allow_withdrawn=allow_withdrawn)
    if refusal is None:
        return
    kind, why = refusal
    if kind == "policy":
        raise PolicyError(
            f"the machine policy keeps mux {release.version} off this machine: {why}",
            hint="its administrator decides this for every mux on this machine",
        )
    record = release.lifecycle
    detail = (
        f": {shown(record.withdrawn.reason, 300)}"
        if record.withdrawn is not None
        else " (its rollout was stopped)"
    )
    raise MuxError(
        f"mux {release.version} was {why} by its publisher{detail}",
        hint=EXACT_REFUSED_HINT.format(version=release.version),
    )
