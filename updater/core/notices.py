"""What a server tells its watchers (``mux server watch``), decided without I/O.

A server knows the build it runs, the build the mux link points at (it watches the link),
and the newest release (its background check). Each change becomes an event; a watcher that
connects later gets the events still in force. Events are plain (type, data) pairs:
:mod:`updater.protocol` frames them, :mod:`updater.daemon.hub` delivers them.

One idea at two layers: this module is the rule, :mod:`updater.daemon.notices` the running
server acting on it (what was already said, the link and the check feeding it). The licence
notices a release ships are another idea, :mod:`release.bill.third_party_notices`.
"""

from __future__ import annotations

from updater._records import NamedTuple
from updater.core.offer import ReleaseOffer
from updater.core.report import Manager, hold_until
from updater.core.request import Decision, ReleaseRequest
from updater.core.verdicts import needs_restart
from updater.formats.lifecycle import shown

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from typing import Any

EVENT_UPDATE_AVAILABLE = "update-available"
EVENT_UPDATE_INSTALLED = "update-installed"
EVENT_RESTART_NEEDED = "restart-needed"
EVENT_RELEASE_WITHDRAWN = "release-withdrawn"
EVENT_UPDATE_REQUIRED = "update-required"
# The background check staged a release (auto_install = "download"): mux update applies it.
EVENT_UPDATE_STAGED = "update-staged"
# update-available no longer holds (the policy disabled updates, or it is no longer offered here):
# watchers that were told of it are told this once; later watchers get neither.
EVENT_UPDATE_RETRACTED = "update-retracted"
# What the link moving says: a move replaces all of these at once (link_notices).
LINK_EVENTS = (EVENT_UPDATE_INSTALLED, EVENT_RESTART_NEEDED)
# What the signed lifecycle state says of the installed release: each answer of the
# background check (and each move of the link) replaces these at once (lifecycle_notices).
LIFECYCLE_EVENTS = (EVENT_RELEASE_WITHDRAWN, EVENT_UPDATE_REQUIRED)
REASON_SHOWN = 300  # characters of a withdrawal's reason in an event (escaped)
NOTES_SHOWN = 1000  # characters of release notes in an event (escaped)


class InstalledBuild(NamedTuple):
    """What the mux link points at: its version, and its protocol when its build info says."""

    version: str
    protocol_version: int | None


class ServerNotice(NamedTuple):
    type: str
    data: dict[str, Any]


def link_notices(
    *,
    server_version: str,
    server_protocol: int,
    installed: InstalledBuild,
    restart_command: str,
) -> tuple[ServerNotice, ...]:
    """Every event of :data:`LINK_EVENTS` that holds once the link points at ``installed``,
    for a server of ``server_version``: the whole set, which replaces what an earlier move
    said (a type missing here is no longer in force).

    Always ``update-installed``; then ``restart-needed`` when the installed build speaks
    another protocol than the server (:func:`needs_restart`). A server of another version at
    the same protocol keeps working: ``update-installed`` carries the command to restart it
    when convenient.
    """
    moved_away = installed.version != server_version
    other_protocol = installed.protocol_version is not None and needs_restart(
        server_protocol, installed.protocol_version
    )
    installed_data: dict[str, Any] = {
        "version": installed.version,
        "protocol_version": installed.protocol_version,
        "server_version": server_version,
        "compatible": None if installed.protocol_version is None else not other_protocol,
        "restart_command": restart_command if moved_away else None,
    }
    notices = [ServerNotice(EVENT_UPDATE_INSTALLED, installed_data)]
    if other_protocol:
        notices.append(
            ServerNotice(
                EVENT_RESTART_NEEDED,
                {
                    "version": installed.version,
                    "protocol_version": installed.protocol_version,
                    "server_version": server_version,
                    "server_protocol_version": server_protocol,
                    "restart_command": restart_command,
                },
            )
        )
    return tuple(notices)


def offer_notice(
    offer: ReleaseOffer,
    *,
    installed_version: str,
    manager: Manager | None = None,
    now: float | None = None,
    withheld: bool = False,
) -> ServerNotice | None:
    """``update-available`` when ``offer`` is newer than the installed version, else None.

    None too when the user's state ``withheld`` it (skipped, held, failed to start here:
    :func:`updater.core.userstate.withheld`, which the check asks the same way).

    Its data is the check's ``latest`` object (``mux update --check --json``) with what
    installs it, as the check says: ``install_command`` and ``managed_by`` (a packager's
    command, or none under the policy's ``check-only``). A packager's announce delay holds
    it back as it holds back the check's (the next background check announces it)."""
    if ReleaseRequest.latest().decide(installed_version, offer.version) is not Decision.UPDATE:
        return None
    if withheld:
        return None
    delay = manager.announce_delay if manager is not None else 0.0
    lifecycle = offer.lifecycle
    if lifecycle is not None and lifecycle.holds(offer.tag):
        return None  # the machine policy holds it back (the check says so too)
    critical = lifecycle is not None and lifecycle.critical
    if delay > 0 and not critical and hold_until(offer.released_at, delay, now) is not None:
        return None
    data = {
        **offer.to_cache()["latest"],
        "install_command": manager.command if manager is not None else offer.install_command,
        "managed_by": manager.to_json() if manager is not None else None,
        "critical": critical,
        "notes": shown(lifecycle.notes, NOTES_SHOWN) if lifecycle is not None else "",
    }
    return ServerNotice(EVENT_UPDATE_AVAILABLE, data)


def lifecycle_notices(offer: ReleaseOffer, *, installed_version: str) -> tuple[ServerNotice, ...]:
    """Every event of :data:`LIFECYCLE_EVENTS` in force for ``installed_version`` by the
    signed lifecycle state the offer carries: ``release-withdrawn`` (its reason escaped and
    capped, and where ``mux update`` moves it) and ``update-required`` (below a
    ``minimum_version``). An answer made for another installed version says nothing."""
    lifecycle = offer.lifecycle
    if lifecycle is None:
        return ()
    notices = []
    withdrawn = lifecycle.withdrawn
    if withdrawn is not None and withdrawn.version == installed_version:
        notices.append(
            ServerNotice(
                EVENT_RELEASE_WITHDRAWN,
                {
                    "version": withdrawn.version,
                    "reason": shown(withdrawn.reason, REASON_SHOWN),
                    "replacement": withdrawn.replacement,
                    "move": withdrawn.move_kind,
                    "move_to": withdrawn.move_to,
                    "command": "mux update" if withdrawn.move_to is not None else None,
                },
            )
        )
    elif (
        lifecycle.minimum_version is not None
        and lifecycle.required_by is not None
        and ReleaseRequest.latest().decide(installed_version, offer.version).installs
    ):
        notices.append(
            ServerNotice(
                EVENT_UPDATE_REQUIRED,
                {
                    "version": installed_version,
                    "minimum_version": lifecycle.minimum_version,
                    "required_by": lifecycle.required_by,
                    "offered": offer.version,
                    "command": "mux update",
                },
            )
        )
    return tuple(notices)
