"""The answer of ``mux update --check``: the offer, the servers' verdicts, who installs it.

:func:`plan_check` turns what the check found (a :class:`~updater.core.offer.ReleaseOffer`,
the live servers, the versions the install keeps, the :class:`Manager` when a packager or the
machine policy installs updates) into the :class:`CheckReport` every surface renders.
A packager's announce delay holds a newer release back (:func:`hold_until`).
"""

from __future__ import annotations

import time

from updater._records import NamedTuple
from updater.core.nextstep import mux_update
from updater.core.offer import ReleaseOffer
from updater.core.request import Decision
from updater.core.userstate import ROLLBACK_AFTER, UserState, Withheld, withheld
from updater.core.verdicts import ServerReport, ServerVerdict, server_verdicts
from updater.errors import EXIT_OK, EXIT_RESTART_NEEDED, EXIT_UPDATE_AVAILABLE, EXIT_WITHDRAWN
from updater.timestamps import rfc3339

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from updater.config.buildinfo import BuildInfo
    from updater.core.retention import KeptVersion, StagedCopy


class Manager(NamedTuple):
    """Who installs this mux's updates instead of ``mux update``: its packager (the marker
    next to the executable, :mod:`updater.config.marker`) or the machine policy (``updates =
    "check-only"``, :mod:`updater.config.policy`)."""

    kind: str  # "packager" | "policy"
    name: str  # "Homebrew"; "the machine policy"
    command: str | None  # what installs an update ("brew upgrade mux"); None: an administrator
    origin: str  # the marker or the policy file
    announce_delay: float = 0.0  # seconds after a release before it is announced

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "command": self.command,
            "origin": self.origin,
            "announce_delay_seconds": self.announce_delay,
        }


class Preferences(NamedTuple):
    """What the user's config.toml (or the machine policy in its place) says of updates that
    look after themselves; ``*_set_by`` names the file that set each (None: the default)."""

    auto_install: str = "off"
    auto_install_set_by: str | None = None
    download_on_metered: bool = False
    download_on_metered_set_by: str | None = None
    config_file: str | None = None
    ci_set_by: str | None = None  # "CI" when that variable is set: no background work

    @property
    def refused(self) -> str | None:
        """Why a server's background work does not run here although the user asked for it
        (``CI``); None when it runs, or when none was asked for."""
        if self.ci_set_by is not None and self.auto_install != "off":
            return f"{self.ci_set_by} is set: nothing runs in the background"
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.auto_install,
            "set_by": self.auto_install_set_by,
            "download_on_metered": self.download_on_metered,
            "download_on_metered_set_by": self.download_on_metered_set_by,
            "config_file": self.config_file,
            "ci_set_by": self.ci_set_by,
            "refused": self.refused,
        }


class CheckReport(NamedTuple):
    """The answer of ``mux update --check``."""

    build: BuildInfo
    offer: ReleaseOffer
    servers: tuple[ServerVerdict, ...]
    cached: bool
    checked_at: str
    notes: tuple[str, ...] = ()
    kept_versions: tuple[KeptVersion, ...] = ()  # what the install keeps, and why
    manager: Manager | None = None
    held_until: str | None = None  # a newer release is announced only from then (the delay)
    withheld: Withheld | None = None  # the user's skip, hold, or a failed start here
    state: UserState = UserState()
    preferences: Preferences = Preferences()
    # Where the source came from (Settings.source_set_by): a flag, a variable, the install
    # record, the machine policy; None: the default.
    source_set_by: str | None = None
    # The user's options every printed `mux update` repeats (updater.core.nextstep).
    carried: tuple[str, ...] = ()
    # Why no `mux update` installs anything here (a development checkout without an
    # install): then install_command is None, and a note says this.
    not_installable: str | None = None
    # The staged copy of the release on offer (verified, placed, not active): mux update
    # applies it without a download. None when nothing, or another version, is staged.
    staged: StagedCopy | None = None

    @property
    def update_available(self) -> bool:
        return self.offer.update_available and self.held_until is None and self.withheld is None

    @property
    def install_command(self) -> str | None:
        """What installs the release on offer (or moves off a withdrawn one); None when none
        is or only an administrator can. It carries the options the user's command needed."""
        if self.not_installable is not None and self.manager is None:
            return None
        if self.withdrawn:
            lifecycle = self.offer.lifecycle
            assert lifecycle is not None and lifecycle.withdrawn is not None
            if lifecycle.withdrawn.move_to is None:
                return None
            return self.manager.command if self.manager is not None else self.update_command()
        if not self.update_available:
            return None
        if self.manager is not None:
            return self.manager.command
        return self.update_command(*self.offer.install_args())

    def update_command(self, *args: str) -> str:
        """``mux update ARGS`` with the options the user's command needed."""
        return mux_update(*args, carried=self.carried)

    @property
    def restart_needed(self) -> bool:
        return any(v.restart_needed for v in self.servers)

    @property
    def withdrawn(self) -> bool:
        """The installed release was withdrawn (signed lifecycle state): mux update moves it."""
        lifecycle = self.offer.lifecycle
        return lifecycle is not None and lifecycle.withdrawn is not None

    @property
    def update_required(self) -> bool:
        """The installed release is below a signed ``minimum_version``, and a release that
        lifts it is on offer."""
        lifecycle = self.offer.lifecycle
        return (
            self.update_available
            and lifecycle is not None
            and lifecycle.minimum_version is not None
        )

    @property
    def status(self) -> str:
        if self.withdrawn:
            return "withdrawn"
        if self.update_required:
            return "update-required"
        if self.update_available:
            return "update-available"
        if self.restart_needed:
            return "restart-needed"
        return "up-to-date"

    @property
    def exit_code(self) -> int:
        return {
            "withdrawn": EXIT_WITHDRAWN,
            "update-required": EXIT_UPDATE_AVAILABLE,
            "update-available": EXIT_UPDATE_AVAILABLE,
            "restart-needed": EXIT_RESTART_NEEDED,
            "up-to-date": EXIT_OK,
        }[self.status]


class CheckedInstall(NamedTuple):
    """What the check knows of this install besides the offer and the servers."""

    target: str
    kept_versions: Sequence[KeptVersion] = ()
    manager: Manager | None = None  # the packager that installed this mux, if one did
    state: UserState | None = None  # the user's skips, holds and failed starts
    preferences: Preferences | None = None
    notes: Sequence[str] = ()  # said first (the settings')
    source_set_by: str | None = None
    carried: Sequence[str] = ()  # the options the next steps need (updater.core.nextstep)
    not_installable: str | None = None  # why no mux update installs here
    staged: StagedCopy | None = None  # the install's staged copy, of whatever version


def plan_check(
    build: BuildInfo,
    offer: ReleaseOffer,
    servers: Sequence[ServerReport],
    install: CheckedInstall,
    *,
    cached: bool,
    checked_at: str,
    now: float | None = None,
) -> CheckReport:
    """The check's answer; a packager (``install.manager``) with an announce delay holds a
    newer release back until that long after its release time (``now``: the current Unix
    time). The user's ``install.state`` withholds a release that would be an update
    (skipped, held, or failed to start here), unless it was asked for by version."""
    target, manager, carried = install.target, install.manager, install.carried
    not_installable = install.not_installable
    now = time.time() if now is None else now
    state = install.state or UserState()
    preferences = install.preferences or Preferences()
    notes = [*install.notes, *offer.warnings]
    if preferences.refused is not None:
        notes.append(
            f'auto_install = "{preferences.auto_install}" waits: {preferences.refused} '
            "(no server checks, stages or installs on its own)"
        )
    held_until = None
    critical = offer.lifecycle is not None and offer.lifecycle.critical
    if (
        offer.update_available
        and manager is not None
        and manager.announce_delay > 0
        and not critical
    ):
        held_until = hold_until(offer.released_at, manager.announce_delay, now)
        if held_until is not None:
            notes.append(
                f"mux {offer.version} (released {offer.released_at}) is announced from "
                f"{held_until}: {manager.name} needs time to package it"
            )
    kept_back = None
    if offer.update_available and not offer.requested and held_until is None:
        kept_back = withheld(state, offer.version, now)
        if kept_back is not None:
            notes.append(f"{kept_back.detail}; to have it offered: {kept_back.undo}")
    notes += _failure_notes(state, build.version)
    notes += lifecycle_notes(offer, build.version)
    announced = offer.update_available and held_until is None and kept_back is None
    offered_protocol = offer.protocol_version if announced else None
    if offer.asset is None and announced:
        notes.append(f"release {offer.tag} has no build for {target or 'this platform'}")
    if offer.decision is Decision.SIGNED_EARLIER:
        again = mux_update("--version", offer.version, "--allow-downgrade", carried=carried)
        notes.append(
            f"mux {offer.version} was signed before this mux: mux update refuses it as a "
            f"downgrade (or an old release replayed); to take it on purpose: {again}"
        )
    if not_installable is not None and offer.update_available:
        notes.append(not_installable)
    return CheckReport(
        build=build,
        offer=offer,
        servers=server_verdicts(
            servers,
            running_protocol=build.protocol_version,
            offered_protocol=offered_protocol,
            current_version=build.version,
        ),
        cached=cached,
        checked_at=checked_at,
        notes=tuple(notes),
        kept_versions=tuple(install.kept_versions),
        manager=manager,
        held_until=held_until,
        withheld=kept_back,
        state=state,
        preferences=preferences,
        source_set_by=install.source_set_by,
        carried=tuple(carried),
        not_installable=not_installable,
        staged=install.staged
        if install.staged is not None and announced and install.staged.version == offer.version
        else None,
    )


def _failure_notes(state: UserState, version: str) -> list[str]:
    """What a failed start of this mux's own version means for the next restart."""
    failure = state.failure(version)
    if failure is None or failure.rolled_back_to is not None:
        return []
    left = ROLLBACK_AFTER - failure.starts
    then = (
        f"{left} more failed start(s) of it move the mux link back to the previous version"
        if left > 0
        else "the mux link was not moved back (only the active version's is)"
    )
    return [
        f"mux {version} failed to start a server here {failure.starts} time(s) "
        f"({failure.reason or 'no reason given'}); mux server status shows what runs there "
        f"now; {then}"
    ]


_WHY = {
    "rollout": "its staged rollout has not reached this machine",
    "halted": "its rollout was halted",
    "withdrawn": "it was withdrawn",
    "cooldown": "the machine policy's minimum_release_age",
    "pin": "the machine policy's pin",
}


def lifecycle_notes(offer: ReleaseOffer, current: str) -> list[str]:
    """What the signed lifecycle state says with the answer (raw text: rendered escaped)."""
    lifecycle = offer.lifecycle
    if lifecycle is None:
        return []
    notes = []
    withdrawn = lifecycle.withdrawn
    if withdrawn is not None:
        where = {
            "replacement": f"to its replacement, mux {withdrawn.move_to}",
            "update": f"to mux {withdrawn.move_to}",
            "kept": f"back to mux {withdrawn.move_to}, kept on this machine (no download)",
            "older": f"back to mux {withdrawn.move_to} (downloaded and verified)",
        }.get(withdrawn.move_kind or "", "")
        notes.append(
            f"mux {withdrawn.version} was WITHDRAWN by its publisher: {withdrawn.reason[:300]}; "
            + (f"mux update moves this machine {where}" if where else "no release to move to")
        )
    if lifecycle.minimum_version is not None and lifecycle.required_by is not None:
        notes.append(
            f"mux {current} is below the minimum version {lifecycle.minimum_version} that "
            f"{lifecycle.required_by} sets: this update is required"
        )
    if lifecycle.critical and offer.update_available:
        notes.append(f"mux {offer.version} is a critical update")
    for held in lifecycle.held[:3]:
        when = f" (offered here from {held.offered_at})" if held.offered_at else ""
        notes.append(f"mux {held.version} is held back: {_WHY.get(held.why, held.why)}{when}")
    if lifecycle.notes and offer.update_available:
        notes.append(f"release notes of {offer.version}: {lifecycle.notes[:1000]}")
    return notes


def hold_until(released_at: str, delay: float, now: float | None) -> str | None:
    """When a release made at ``released_at`` (RFC 3339) is announced after ``delay`` seconds,
    if that is still ahead of ``now``; None when it is due, or its time cannot be read (a
    courtesy to packagers must never hide a release for good)."""
    # deferred: this module is on a fast path (docs/build.md)
    from datetime import datetime

    try:
        released = datetime.fromisoformat(released_at.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None
    if released.tzinfo is None:
        return None
    due = released.timestamp() + delay
    if due <= (time.time() if now is None else now):
        return None

    return rfc3339(due)
