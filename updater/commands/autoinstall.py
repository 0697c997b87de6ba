"""Background staging and automatic installs (``auto_install``): whether a server's
background check stages or installs the release it found, and the work itself.

:func:`eligibility` runs in the check child (``<server's build> server check-updates``): the
rule is :func:`updater.core.autoinstall.decide_auto_install`, fed with the settings (the
user's config.toml under the machine policy, read afresh at every check), the user's state
(skips, holds, failed starts), who manages the install (a packager), every live server's
protocol, whether ``CI`` is set, and last, only when everything else says yes, whether the
system reports the connection as metered (:mod:`updater.net.metered`).

:func:`run_auto_install` is the install child (``<server's build> server auto-install``): it
asks the same questions again (minutes may have passed) and then runs ``mux update``'s own
:func:`~updater.commands.update.run_update` for exactly that release, as an
:class:`~updater.commands.update.Automatic` install: every verification layer, the install
lock, retention, kill -9 safety; for ``"compatible"`` only a release of the protocol every
live server speaks. It stages the release first (``mux update --stage``'s step: every
layer, the copy beside the active version) and, unless ``auto_install = "download"``, then
applies the staged copy (the normal update, which finds it). A staging that a verification
layer refuses is cleaned away by the install's transaction and remembered for that version in the user's
state (:func:`updater.core.userstate.with_failed_staging`): no background work tries it
again, a newer release is tried. It never stops, signals or restarts a server; the servers'
link watches tell their watchers (``update-installed``, and ``restart-needed`` for each
server of another protocol under ``"all"``); the server tells of a staged copy
(``update-staged``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from updater.commands.check import current_manager
from updater.commands.userstate import change_state, read_state, state_path
from updater.config.buildinfo import BuildInfo
from updater.config.settings import Settings
from updater.core.autoinstall import (
    BACKGROUND_MODES,
    COMPATIBLE,
    DOWNLOAD,
    AutoInstall,
    LiveServer,
    allowed_on,
    decide_auto_install,
)
from updater.core.offer import ReleaseOffer
from updater.core.request import Decision, ReleaseRequest
from updater.core.retention import staged_version
from updater.core.userstate import staging_failed, with_failed_staging, withheld
from updater.errors import MuxError, VerificationError
from updater.install.layout import read_record, resolve_layout
from updater.net.metered import is_metered
from updater.net.progress import NoProgress, Progress
from updater.servers.addresses import every_server_address
from updater.servers.status import query_all

Metered = Callable[[], bool | None]
APPLY = "mux update applies it"


def _staged_here(settings: Settings, build: BuildInfo) -> str | None:
    """The version staged in the install ``settings`` point at, if any (None where there is
    no install: a development checkout; the install child then says why it stages nothing)."""
    try:
        layout = resolve_layout(settings.home, settings.bin_dir, development=build.development)
    except MuxError:
        return None
    return staged_version(read_record(layout))


def live_servers(settings: Settings) -> list[LiveServer]:
    """Every server of this user's that answers with a status line, and the protocol it
    speaks: each socket in the runtime dir and the one ``MUX_SERVER_URL`` names (which picks
    the server other commands talk to, and must not hide one whose protocol matters). A
    listener that is not this user's server is not live (:mod:`updater.servers.owner`)."""
    return [
        LiveServer(report.address, report.status.protocol_version)
        for report in query_all(every_server_address(settings.server_url))
        if report.state == "live" and report.status is not None
    ]


def eligibility(
    settings: Settings,
    build: BuildInfo,
    offer: ReleaseOffer,
    *,
    installed: str,
    now: float | None = None,
    metered: Metered = is_metered,
) -> AutoInstall:
    """Whether ``offer`` (decided against the ``installed`` version) is to be installed on
    its own, by the server running ``build``; asks the servers and the network only when
    everything cheaper says yes."""
    return _decide(
        settings,
        build,
        offer.version,
        offer.protocol_version,
        is_update=offer.decision is Decision.UPDATE and offer.asset is not None,
        now=now,
        metered=metered,
    )


def _decide(
    settings: Settings,
    build: BuildInfo,
    version: str,
    protocol: int,
    *,
    is_update: bool,
    now: float | None,
    metered: Metered,
) -> AutoInstall:
    def decide(**facts: Any) -> AutoInstall:
        base: dict[str, Any] = {
            "mode": settings.auto_install,
            "updates": settings.updates,
            "managed_by": None,
            "version": version,
            "protocol_version": protocol,
            "is_update": is_update,
            "withheld": None,
            "servers": (),
            "ci": settings.ci,
        }
        return decide_auto_install(**{**base, **facts})

    if settings.auto_install not in BACKGROUND_MODES or settings.ci or not is_update:
        return decide()  # (says why, without asking anything more)
    try:
        manager = current_manager(settings, build)
        state = read_state(state_path(settings))
    except MuxError as exc:
        return AutoInstall(False, exc.message, version, protocol)
    kept_back = withheld(state, version, time.time() if now is None else now)
    managed_by = manager.name if manager is not None and manager.kind == "packager" else None
    held = kept_back.detail if kept_back is not None else staging_failed(state, version)
    decided = decide(managed_by=managed_by, withheld=held, servers=live_servers(settings))
    if not decided.install:
        return decided
    if decided.stage_only and _staged_here(settings, build) == version:
        return decided._replace(install=False, reason=f"mux {version} is staged: {APPLY}")
    costly = allowed_on(metered(), download_on_metered=settings.download_on_metered)
    if costly is not None:
        return decided._replace(install=False, reason=costly)
    return decided


class _Collected:
    """:class:`~updater.commands.update.UpdateEvents` for a child nobody watches: warnings are
    kept for its answer, progress is not shown."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, message: str) -> None:
        self.warnings.append(message)

    def progress(self, label: str) -> Progress:
        return NoProgress()


def run_auto_install(
    version: str,
    protocol: int,
    settings: Settings,
    build: BuildInfo,
    *,
    metered: Metered = is_metered,
) -> dict[str, Any]:
    """``mux server auto-install``: stage ``version`` (of ``protocol``) if that is still due,
    then (unless ``auto_install = "download"``) install it; one JSON-ready answer
    (``action``: ``staged``, ``updated``, ``up-to-date``, ``withheld``, ``skipped`` with its
    ``reason``; or ``ok: false`` with the ``error``)."""
    # deferred (+541 ms, 354 modules): the update machinery and the HTTP stack, for the
    # install child only; the check child and the server import this module without them
    from updater.commands.update import Automatic, UpdateAction, run_update

    try:
        due = _decide(settings, build, version, protocol, is_update=True, now=None, metered=metered)
        if not due.install:
            return {"ok": True, "action": "skipped", "reason": due.reason, "version": version}
        request = ReleaseRequest.exactly(version)
        only = Automatic(protocol_version=protocol if settings.auto_install == COMPATIBLE else None)
        events = _Collected()
        try:
            result = run_update(
                request, settings, build=build, events=events, automatic=only, stage=True
            )
        except VerificationError as exc:  # (a network failure or a busy lock is tried again)
            _remember_failed_staging(settings, version, exc.message, events)
            raise
        if settings.auto_install != DOWNLOAD and result.action is UpdateAction.STAGED:
            result = run_update(request, settings, build=build, events=events, automatic=only)
    except MuxError as exc:
        return {"ok": False, "error": exc.message, "version": version}
    return {
        "ok": True,
        "action": result.action.value,
        "from": result.from_version,
        "to": result.to_version,
        "protocol_version": result.protocol_version,
        "restart_needed": [v.report.address for v in result.servers if v.restart_needed],
        "removed_versions": list(result.removed_versions),
        "withheld": result.withheld.to_json() if result.withheld else None,
        "staged": result.staged.to_json() if result.staged else None,
        "warnings": events.warnings,
    }


def _remember_failed_staging(
    settings: Settings, version: str, reason: str, events: _Collected
) -> None:
    """A layer refused ``version``: no background work stages it again."""
    try:
        change_state(
            state_path(settings),
            lambda state: with_failed_staging(state, version, time.time(), reason),
        )
    except MuxError as exc:
        events.warning(f"{exc.message} (the failed staging of {version} is not on record)")
