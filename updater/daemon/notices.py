"""What a running server notices and tells its watchers: the link moving, and new releases.

Two sources feed one :class:`~updater.daemon.hub.WatchHub`: a :class:`~updater.daemon.linkwatch.LinkWatch`
on the mux link of the install the server belongs to (``update-installed``, and
``restart-needed`` when the installed build speaks another protocol), and the
:class:`~updater.daemon.background.BackgroundCheck` (``update-available``). The rules of which event
to send are :func:`updater.core.plan.link_notices` and :func:`updater.core.plan.offer_notice`; this
module only keeps track of what was already said, so that each event is sent once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from updater.commands.check import current_manager
from updater.config import buildinfo
from updater.config.settings import Settings
from updater.core.notices import (
    EVENT_UPDATE_AVAILABLE,
    LIFECYCLE_EVENTS,
    LINK_EVENTS,
    InstalledBuild,
    lifecycle_notices,
    link_notices,
    offer_notice,
)
from updater.core.offer import ReleaseOffer
from updater.core.report import Manager
from updater.daemon.background import BackgroundCheck, check_interval
from updater.daemon.hub import WatchHub
from updater.daemon.linkwatch import LinkWatch
from updater.errors import MuxError
from updater.install.layout import Layout, installed_protocol, resolve_layout
from updater.protocol import WatchEvent


class ServerNotices:
    """The events one server sends; start with :meth:`start`, end with :meth:`stop`."""

    def __init__(
        self,
        hub: WatchHub,
        *,
        server_version: str,
        server_protocol: int,
        restart_command: str,
        settings: Settings,
        development: bool,
        check_command: Callable[[], Sequence[str]],
        log: Callable[[str], None],
    ) -> None:
        self.hub = hub
        self.server_version = server_version
        self.server_protocol = server_protocol
        self.restart_command = restart_command
        self._settings = settings
        self._check_command = check_command
        self._log = log
        self._development = development
        self._lock = threading.Lock()
        self._announced_tag: str | None = None
        self._offer: ReleaseOffer | None = None
        self.layout: Layout | None = None  # found by start(), as is what follows
        self.installed: InstalledBuild | None = None
        self.manager: Manager | None = None
        self._link_watch: Any = None
        self._check: Any = None

    def _manager(self, settings: Settings) -> Manager | None:
        """Who installs updates here (a packager's marker, the policy's check-only): what
        the update-available event names, as the check does."""

        try:
            return current_manager(settings, buildinfo.current())
        except MuxError as exc:  # an unreadable marker: the check says so; events name none
            self._log(f"update notices name no packager: {exc.message}")
            return None

    # -- the link ------------------------------------------------------------------------

    def _installed(self) -> InstalledBuild | None:
        if self.layout is None:
            return None
        version = self.layout.active_version()
        if version is None:
            return None
        return InstalledBuild(version, installed_protocol(self.layout, version))

    def _link_moved(self, _target: str | None) -> None:
        installed = self._installed()
        with self._lock:
            if installed is None or installed == self.installed:
                return
            self.installed = installed
            self._log(
                f"the mux link now points at {installed.version} "
                f"(protocol {installed.protocol_version})"
            )
            # The whole set of link events replaces the last one: a restart-needed of an
            # earlier move never outlives a move back to a compatible build. Back on the
            # server's own version, the news is sent but nothing stays in force.
            self._publish_link_events(installed, in_force=installed.version != self.server_version)
            # An announced release that is now installed is old news.
            offer = self._offer
            if offer is not None and not offer_notice(offer, installed_version=installed.version):
                self.hub.retract(EVENT_UPDATE_AVAILABLE)
                self._announced_tag = None
            if offer is not None:  # a withdrawn release moved off is no longer news
                self._publish_lifecycle_events(offer, installed.version)

    def _publish_link_events(self, installed: InstalledBuild, *, in_force: bool) -> None:
        notices = link_notices(
            server_version=self.server_version,
            server_protocol=self.server_protocol,
            installed=installed,
            restart_command=self.restart_command,
        )
        self.hub.replace(
            LINK_EVENTS,
            [WatchEvent(notice.type, notice.data) for notice in notices],
            in_force=in_force,
        )

    def _publish_lifecycle_events(self, offer: ReleaseOffer, installed_version: str) -> None:
        notices = lifecycle_notices(offer, installed_version=installed_version)
        events = [WatchEvent(notice.type, notice.data) for notice in notices]
        in_force = [e for e in self.hub.in_force() if e.type in LIFECYCLE_EVENTS]
        if in_force != events:  # said once, not at every check
            self.hub.replace(LIFECYCLE_EVENTS, events)

    # -- the background check ------------------------------------------------------------

    def _baseline(self) -> str:
        """What a release must be newer than to be news: the installed version."""
        return self.installed.version if self.installed else self.server_version

    def check_command(self) -> list[str]:
        with self._lock:
            baseline = self._baseline()
        interval = check_interval(self._settings)
        return [
            *self._check_command(),
            "server",
            "check-updates",
            "--current",
            baseline,
            "--max-age",
            f"{interval:g}",
        ]

    def _answered(self, answer: dict[str, Any]) -> None:
        if answer.get("ok") is not True:
            self._log(f"background check failed: {str(answer.get('error'))[:300]}")
            return
        offer = ReleaseOffer.from_cache(answer.get("offer") or {})
        if offer is None:
            self._log("background check: the answer holds no release")
            return
        checked_by = answer.get("checked_by") or {}
        self._log(
            f"background check{' (cached)' if answer.get('cached') else ''}: latest {offer.tag}, "
            f"by mux {checked_by.get('version')} at {checked_by.get('executable')}"
        )
        with self._lock:
            self._offer = offer
            notice = offer_notice(offer, installed_version=self._baseline(), manager=self.manager)
            if notice is None:
                self.hub.retract(EVENT_UPDATE_AVAILABLE)
                self._announced_tag = None
            elif notice.data.get("tag") != self._announced_tag:
                self._announced_tag = str(notice.data.get("tag"))
                self.hub.publish(WatchEvent(notice.type, notice.data))
            self._publish_lifecycle_events(offer, self._baseline())

    # -- life ----------------------------------------------------------------------------

    def start(self) -> None:
        """Find the install this server belongs to, watch its link, start the checks."""

        settings = self._settings
        self.manager = self._manager(settings)
        try:
            self.layout = resolve_layout(
                settings.home, settings.bin_dir, development=self._development
            )
        except Exception:  # a checkout or an unknown install: nothing to watch
            self.layout = None
        if self.layout is not None:
            self.installed = self._installed()
            if self.installed is not None and self.installed.version != self.server_version:
                # Started from another build than the link's: that is in force from the start.
                self._publish_link_events(self.installed, in_force=True)
            self._link_watch = LinkWatch(
                Path(self.layout.link), self._link_moved, interval=settings.link_poll_interval
            )
            self._link_watch.start()
        interval = check_interval(settings, self._log)
        if interval > 0 and settings.updates != "disabled":
            self._check = BackgroundCheck(self.check_command, interval, self._answered, self._log)
            self._check.start()
        else:
            why = "the machine policy disables updates" if interval > 0 else "interval 0"
            self._log(f"background update checks are off ({why})")

    def stop(self) -> None:
        for part in (self._check, self._link_watch):
            if part is not None:
                part.stop()
