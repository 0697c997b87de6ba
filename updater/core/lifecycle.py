"""Which release this machine is offered, from the signed lifecycle records (pure, no I/O).

Given every release a signed document lists with its lifecycle record
(:mod:`updater.formats.lifecycle`), this machine's rollout bucket and ring, the machine's
policy (a pin, a minimum release age), the installed version and the time, :func:`choose`
says which release is on offer, which newer ones are held back and until when, and how the
installed release stands (withdrawn, and where to move; below a ``minimum_version``). The
rules (docs/contracts.md, "Release lifecycle"):

* the bucket is a whole number below :data:`BUCKETS`, drawn once per machine; the ring moves
  it (:func:`place`): ``early`` into the first tenth of every rollout, ``late`` into the last
  tenth; a release with stages is offered once the current stage's percentage is above the
  machine's place, one with an interval once its group's turn came (Sparkle's seven groups);
* a critical release skips the stages and the cooldown, and so does a release whose
  ``minimum_version`` the installed one is below (it is required); neither skips a pin, a
  halt or a withdrawal;
* a halted release is offered to nobody (where it is installed it stays installed); a
  withdrawn one to nobody, and the machines on it are told to move (:func:`move_from`);
* a fresh install (nothing installed) takes the newest release that is neither halted nor
  withdrawn whatever the stage, as a person asking does;
* the policy's pin (``1.4``: stay on 1.4.x) and ``minimum_release_age`` (a cooldown from the
  signed ``released_at``; unknown age: never) bind everything but an administrator;
* an explicit ``--version X`` ignores the stages only (:func:`refusal_of_exact`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from packaging.version import InvalidVersion, Version

from updater.formats.lifecycle import INTERVAL_GROUPS, Lifecycle, Withdrawal, pin_parts
from updater.timestamps import rfc3339

BUCKETS = 10_000
RING_SHARE = 0.1  # the share of a rollout the early and the late ring are put in


class LifecyclePolicy(NamedTuple):
    """What the machine decides: a pin (``"1.4"``), a cooldown in seconds, a ring."""

    pin: str | None = None
    minimum_release_age: float | None = None
    ring: str = "default"


class Release(NamedTuple):
    tag: str
    version: Version
    lifecycle: Lifecycle


class Held(NamedTuple):
    """A release newer than what is offered, not offered yet (or ever)."""

    tag: str
    version: str
    why: str  # "rollout" | "halted" | "withdrawn" | "cooldown" | "pin"
    offered_at: int | None  # when it will be offered here; None: not while the record stands


class Choice(NamedTuple):
    offered: Release | None  # the newest release this machine may be offered (may be <= installed)
    held: tuple[Held, ...]  # newer than both the installed and the offered, held back
    withdrawn: Withdrawal | None  # the installed release is withdrawn
    minimum_version: str | None  # the installed release is below it...
    required_by: str | None  # ...which this release's record says
    critical: bool  # the offered release is critical (or required), so it skipped stages

    @property
    def next_change(self) -> int | None:
        """The first time a held-back release comes on offer (an answer is stale then)."""
        times = [h.offered_at for h in self.held if h.offered_at is not None]
        return min(times) if times else None


def place(bucket: int, ring: str = "default") -> float:
    """The machine's place in every rollout, in [0, 1): its bucket's share, moved by its ring."""
    share = bucket / BUCKETS
    if ring == "early":
        return share * RING_SHARE
    if ring == "late":
        return 1 - RING_SHARE + share * RING_SHARE
    return share


def reaches(record: Lifecycle, where: float) -> int | None:
    """When the rollout of ``record`` reaches the place ``where``: a Unix time (0: from the
    start, no stages), or None when it stops short of it (its last stage is below)."""
    if record.stages:
        for stage in record.stages:
            if where * 100 < stage.percent:
                return stage.start
        return None
    if record.interval is not None:
        group = min(math.floor(where * INTERVAL_GROUPS), INTERVAL_GROUPS - 1)
        return record.interval.start + group * record.interval.seconds
    return 0


def pinned(pin: str | None, version: Version) -> bool:
    """``version`` is inside the pin (``"1.4"``: 1.4.x; ``"1"``: 1.x; None: no pin)."""
    if pin is None:
        return True
    wanted = pin_parts(pin)
    return version.release[: len(wanted)] == wanted


def choose(
    releases: Sequence[Release],
    *,
    installed: Version | None,
    bucket: int,
    policy: LifecyclePolicy,
    now: float,
    include_pre: bool = False,
) -> Choice:
    """What this machine is offered (see the module). ``releases`` as the signed document
    lists them; of equal versions the first counts."""
    where = place(bucket, policy.ring)
    standing = _standing(releases, installed, policy)
    offered: Release | None = None
    held: list[Held] = []
    critical = False
    for release in _newest_first(releases, include_pre):
        record = release.lifecycle
        if installed is not None and release.version == installed and record.withdrawn is None:
            offered = release  # installed stays installed, halted or not
            break
        due, why = _due(release, installed, where, policy, standing)
        if due is not None and due <= now:
            offered = release
            critical = record.critical or release.tag == standing.required_by
            break
        if installed is None or release.version > installed:
            held.append(Held(release.tag, str(release.version), why, due))
    return Choice(
        offered=offered,
        held=tuple(held),
        withdrawn=standing.withdrawn,
        minimum_version=standing.minimum_version,
        required_by=standing.required_by,
        critical=critical,
    )


class _Standing(NamedTuple):
    withdrawn: Withdrawal | None
    minimum_version: str | None
    required_by: str | None


def _standing(
    releases: Sequence[Release], installed: Version | None, policy: LifecyclePolicy
) -> _Standing:
    if installed is None:
        return _Standing(None, None, None)
    mine = next((r for r in releases if r.version == installed), None)
    withdrawn = mine.lifecycle.withdrawn if mine is not None else None
    minimum: Version | None = None
    required_by: str | None = None
    for release in releases:
        record = release.lifecycle
        if record.minimum_version is None or not _installable(release, policy):
            continue
        floor = _version(record.minimum_version)
        if floor is not None and installed < floor and (minimum is None or floor > minimum):
            minimum, required_by = floor, release.tag
    if minimum is None or required_by is None:
        return _Standing(withdrawn, None, None)
    # The release that requires it must itself lift the install over the floor.
    required = next(r for r in releases if r.tag == required_by)
    if required.version < minimum:
        required_by = None
    return _Standing(withdrawn, str(minimum), required_by)


def _due(
    release: Release,
    installed: Version | None,
    where: float,
    policy: LifecyclePolicy,
    standing: _Standing,
) -> tuple[int | None, str]:
    """When ``release`` is offered here, and what holds it until then."""
    record = release.lifecycle
    if not pinned(policy.pin, release.version):
        return None, "pin"
    if record.withdrawn is not None:
        return None, "withdrawn"
    if record.halted:
        return None, "halted"
    urgent = record.critical or release.tag == standing.required_by
    if urgent:
        return 0, "rollout"
    due: int | None = 0 if installed is None else reaches(record, where)
    why = "rollout"
    if policy.minimum_release_age:
        if record.released_at is None:
            return None, "cooldown"
        aged = record.released_at + math.ceil(policy.minimum_release_age)
        if due is not None and aged > due:
            due, why = aged, "cooldown"
    return due, why


def _installable(release: Release, policy: LifecyclePolicy) -> bool:
    record = release.lifecycle
    return pinned(policy.pin, release.version) and not record.halted and record.withdrawn is None


def _newest_first(releases: Sequence[Release], include_pre: bool) -> list[Release]:
    seen: set[Version] = set()
    unique = []
    for release in releases:
        if release.version in seen or (release.version.is_prerelease and not include_pre):
            continue
        seen.add(release.version)
        unique.append(release)
    return sorted(unique, key=lambda r: r.version, reverse=True)


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


# -- moving off a withdrawn release ------------------------------------------------------------


class Move(NamedTuple):
    """Where ``mux update`` takes a machine whose release was withdrawn."""

    kind: str  # "replacement" | "update" | "kept" (offline, re-verified) | "older" (downloaded)
    version: str
    tag: str | None  # the release's tag (None for a kept version the index does not list)


def move_from(
    choice: Choice,
    releases: Sequence[Release],
    *,
    installed: Version,
    kept: Sequence[str],
    policy: LifecyclePolicy,
) -> Move | None:
    """The replacement when the withdrawal names one that may be installed; else the release
    on offer when it is newer; else the newest kept version that is not withdrawn (and inside
    the pin); else the newest listed older release that may be installed; else None."""
    withdrawal = choice.withdrawn
    if withdrawal is None:
        return None
    by_tag = {r.tag: r for r in reversed(releases)}
    replacement = by_tag.get(withdrawal.replacement or "")
    if replacement is not None and _installable(replacement, policy):
        return Move("replacement", str(replacement.version), replacement.tag)
    offered = choice.offered
    if offered is not None and offered.version > installed:
        return Move("update", str(offered.version), offered.tag)
    by_version = {r.version: r for r in reversed(releases)}
    keepers = []
    for text in kept:
        version = _version(text)
        if version is None or version == installed or not pinned(policy.pin, version):
            continue
        listed = by_version.get(version)
        if listed is not None and listed.lifecycle.withdrawn is not None:
            continue
        keepers.append((version, text, listed.tag if listed else None))
    if keepers:
        version, text, tag = max(keepers)
        return Move("kept", text, tag)
    older = [
        r
        for r in _newest_first(releases, include_pre=installed.is_prerelease)
        if r.version < installed and _installable(r, policy)
    ]
    if older:
        return Move("older", str(older[0].version), older[0].tag)
    return None


def refusal_of_exact(
    release: Release, policy: LifecyclePolicy, *, now: float, allow_withdrawn: bool
) -> tuple[str, str] | None:
    """Why ``--version X`` may not install ``release``: ``("policy", why)`` (the pin or the
    cooldown: exit 4), ``("withdrawn", why)`` (a withdrawn or halted release, unless
    ``--allow-withdrawn``), or None. The stages never hold an explicit request back."""
    record = release.lifecycle
    if not pinned(policy.pin, release.version):
        return "policy", f'pin = "{policy.pin}" keeps this machine on {policy.pin}.x'
    if policy.minimum_release_age and not record.critical:
        if record.released_at is None:
            return "policy", "minimum_release_age is set and the release's age is not signed"
        aged = record.released_at + math.ceil(policy.minimum_release_age)
        if aged > now:
            return "policy", f"minimum_release_age holds it until {rfc3339(aged)}"
    if allow_withdrawn:
        return None
    if record.withdrawn is not None:
        return "withdrawn", "withdrawn"
    if record.halted:
        return "withdrawn", "halted"
    return None
