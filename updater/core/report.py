"""The answer of ``mux update --check``: the offer, the servers' verdicts, who installs it.

:func:`plan_check` turns what the check found (a :class:`~updater.core.offer.ReleaseOffer`,
the live servers, the versions the install keeps, the :class:`Manager` when a packager or the
machine policy installs updates) into the :class:`CheckReport` every surface renders.
A packager's announce delay holds a newer release back (:func:`hold_until`).
"""

from __future__ import annotations

from updater._records import NamedTuple
from updater.core.offer import ReleaseOffer
from updater.core.request import Decision
from updater.core.verdicts import ServerVerdict, server_verdicts
from updater.errors import EXIT_OK, EXIT_RESTART_NEEDED, EXIT_UPDATE_AVAILABLE
from updater.timestamps import rfc3339

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from updater.config.buildinfo import BuildInfo
    from updater.core.retention import KeptVersion
    from updater.servers.client import ServerReport


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

    @property
    def update_available(self) -> bool:
        return self.offer.update_available and self.held_until is None

    @property
    def install_command(self) -> str | None:
        """What installs the release on offer; None when none is or only an administrator can."""
        if not self.update_available:
            return None
        if self.manager is not None:
            return self.manager.command
        return self.offer.install_command

    @property
    def restart_needed(self) -> bool:
        return any(v.restart_needed for v in self.servers)

    @property
    def status(self) -> str:
        if self.update_available:
            return "update-available"
        if self.restart_needed:
            return "restart-needed"
        return "up-to-date"

    @property
    def exit_code(self) -> int:
        return {
            "update-available": EXIT_UPDATE_AVAILABLE,
            "restart-needed": EXIT_RESTART_NEEDED,
            "up-to-date": EXIT_OK,
        }[self.status]


def plan_check(
    build: BuildInfo,
    offer: ReleaseOffer,
    servers: Sequence[ServerReport],
    *,
    target: str,
    cached: bool,
    checked_at: str,
    kept_versions: Sequence[KeptVersion] = (),
    manager: Manager | None = None,
    now: float | None = None,
) -> CheckReport:
    """The check's answer; a ``manager`` with an announce delay holds a newer release back
    until that long after its release time (``now``: the current Unix time)."""
    notes = list(offer.warnings)
    held_until = None
    if offer.update_available and manager is not None and manager.announce_delay > 0:
        held_until = hold_until(offer.released_at, manager.announce_delay, now)
        if held_until is not None:
            notes.append(
                f"mux {offer.version} (released {offer.released_at}) is announced from "
                f"{held_until}: {manager.name} needs time to package it"
            )
    announced = offer.update_available and held_until is None
    offered_protocol = offer.protocol_version if announced else None
    if offer.asset is None and announced:
        notes.append(f"release {offer.tag} has no build for {target or 'this platform'}")
    if offer.decision is Decision.SIGNED_EARLIER:
        notes.append(
            f"mux {offer.version} was signed before this mux: mux update refuses it as a "
            f"downgrade (or an old release replayed); to take it on purpose: mux update "
            f"--version {offer.version} --allow-downgrade"
        )
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
        kept_versions=tuple(kept_versions),
        manager=manager,
        held_until=held_until,
    )


def hold_until(released_at: str, delay: float, now: float | None) -> str | None:
    """When a release made at ``released_at`` (RFC 3339) is announced after ``delay`` seconds,
    if that is still ahead of ``now``; None when it is due, or its time cannot be read (a
    courtesy to packagers must never hide a release for good)."""
    # deferred: this module is on a fast path (docs/build.md)
    import time
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
