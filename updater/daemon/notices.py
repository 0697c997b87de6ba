"""What a running server notices and tells its watchers: the link moving, and new releases.

Two sources feed one :class:`~updater.daemon.hub.WatchHub`: a :class:`~updater.daemon.linkwatch.LinkWatch`
on the mux link of the install the server belongs to (``update-installed``, and
``restart-needed`` when the installed build speaks another protocol), and the
:class:`~updater.daemon.background.BackgroundCheck` (``update-available``). The rules of which event
to send are :func:`updater.core.notices.link_notices` and :func:`updater.core.notices.offer_notice`
(the same idea, its pure rule); this module only keeps track of what was already said, so that
each event is sent once.

The user's state (:mod:`updater.core.userstate`) has its say: a release the user skipped or
held, or that failed to start here, is not announced (and an announcement in force is
withdrawn within a second of ``mux update --skip``: the state file is polled like the link);
and this server's stream (its surface) tells of one version at most once a day, whichever
process of it does (a server restarted on the same socket does not tell it again). When the
check says the release is to be installed on its own (``auto_install``), the server runs the
install child instead of announcing it; the link's move then tells every watcher. Under
``auto_install = "download"`` the release is announced and the same child stages it; a
staged copy is told as ``update-staged`` (once, to the watchers connected then).

Under ``CI`` (:attr:`~updater.config.settings.Settings.ci`) no check child runs at all (the
server's log says why, once): nothing runs in the background on a CI runner.

The machine policy may change while a server runs: it is read again before each background
check and before each new watcher is served (:meth:`ServerNotices.refresh_policy`; one
``lstat`` when there is no policy file). Under ``updates = "disabled"`` (or a policy that
cannot be trusted: it fails closed) no check child is started and ``update-available`` is
withdrawn; under ``"check-only"`` the event names no install command, as the check does.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from updater.commands.check import current_manager
from updater.commands.userstate import change_state, read_state, state_path
from updater.config import buildinfo
from updater.config.settings import Settings
from updater.core.autoinstall import REASON_CI, REASON_OFF, AutoInstall
from updater.core.notices import (
    EVENT_UPDATE_AVAILABLE,
    EVENT_UPDATE_RETRACTED,
    EVENT_UPDATE_STAGED,
    LIFECYCLE_EVENTS,
    LINK_EVENTS,
    InstalledBuild,
    lifecycle_notices,
    link_notices,
    offer_notice,
)
from updater.core.offer import ReleaseOffer
from updater.core.report import Manager
from updater.core.userstate import may_notify, with_notice, withheld
from updater.daemon.background import BackgroundCheck, FollowUp, check_interval
from updater.daemon.hub import WatchHub
from updater.daemon.linkwatch import LinkWatch
from updater.errors import MuxError
from updater.install.layout import Layout, installed_protocol, resolve_layout
from updater.protocol import WatchEvent

POLICY_DISABLES = "the machine policy disables updates"
NO_LONGER_OFFERED = "no longer offered to this machine"


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
        surface: str = "",
        reload: Callable[[], Settings] | None = None,
    ) -> None:
        self.hub = hub
        self.surface = f"watch:{surface}"  # whose notices the once-a-day rule counts
        self._state_file = state_path(settings)
        self.server_version = server_version
        self.server_protocol = server_protocol
        self.restart_command = restart_command
        self._settings = settings
        self._reload = reload  # the settings as they are now (the machine policy re-read)
        self._updates = settings.updates  # what the policy allowed when last read
        self._check_command = check_command
        self._log = log
        self._development = development
        self._lock = threading.Lock()
        self._announced_tag: str | None = None
        self._offer: ReleaseOffer | None = None
        self._automatic: AutoInstall | None = None  # what the last check said of installing
        self._said_why_not: str | None = None
        self._quiet_about: str | None = None  # the version the once-a-day rule holds back
        # The policy allowed updates again after disabling them: what it withdrew is said
        # again at the next check (restated, not a new notice for the once-a-day rule).
        self._restate = False
        self.layout: Layout | None = None  # found by start(), as is what follows
        self.installed: InstalledBuild | None = None
        self.manager: Manager | None = None
        self._link_watch: Any = None
        self._state_watch: Any = None
        self._check: Any = None

    def _manager(self, settings: Settings) -> Manager | None:
        """Who installs updates here (a packager's marker, the policy's check-only): what
        the update-available event names, as the check does."""

        try:
            return current_manager(settings, buildinfo.current())
        except MuxError as exc:  # an unreadable marker: the check says so; events name none
            self._log_noisy("marker", f"update notices name no packager: {exc.message}")
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

    def _retract_offer(self, reason: str) -> None:
        """``update-available`` no longer holds: later watchers do not get it, and the ones
        that were told of it are told so (``update-retracted``), once."""

        def retracted(said: WatchEvent) -> WatchEvent:
            data = {"version": said.data.get("version"), "tag": said.data.get("tag")}
            return WatchEvent(EVENT_UPDATE_RETRACTED, {**data, "reason": reason})

        self.hub.withdraw(EVENT_UPDATE_AVAILABLE, retracted)
        self._announced_tag = None

    # -- the machine policy --------------------------------------------------------------

    def refresh_policy(self) -> bool:
        """Read the machine policy again; withdraw or restate ``update-available`` when what
        it allows changed. True when background checks are allowed now."""
        if self._reload is None:
            return self._updates != "disabled"
        try:
            settings: Settings | None = self._reload()
            problem = None
        except MuxError as exc:  # a policy that cannot be trusted fails closed
            settings, problem = None, exc.message
        updates = settings.updates if settings is not None else "disabled"
        manager = self._manager(settings) if settings is not None else None
        with self._lock:
            changed = (updates, manager) != (self._updates, self.manager)
            if self._updates == "disabled" and updates != "disabled":
                self._restate = True
            self._updates, self.manager = updates, manager
            if settings is not None:
                self._settings = settings
            if not changed:
                return updates != "disabled"
            if problem is not None:
                self._log(f"the machine policy cannot be trusted now, so no updates: {problem}")
            else:
                self._log(f'the machine policy now sets updates = "{updates}"')
            offer = self._offer
            if updates == "disabled" or offer is None:
                self._retract_offer(POLICY_DISABLES)
            else:
                notice = offer_notice(
                    offer,
                    installed_version=self._baseline(),
                    manager=manager,
                    withheld=self._withheld(offer),
                )
                if notice is None:
                    self._retract_offer(NO_LONGER_OFFERED)
                elif self._announced_tag is not None:  # said before: say it as it is now
                    self._announced_tag = str(notice.data.get("tag"))
                    self.hub.replace(
                        [EVENT_UPDATE_AVAILABLE], [WatchEvent(notice.type, notice.data)]
                    )
        return updates != "disabled"

    def _check_allowed(self) -> bool:
        allowed = self.refresh_policy()
        if not allowed:
            self._log_noisy(
                "policy-skip",
                "background check skipped: the machine policy disables updates",
            )
        elif self._settings.ci:
            self._log_noisy("ci-skip", f"background check skipped: {REASON_CI}")
            return False
        return allowed

    def _log_noisy(self, kind: str, message: str) -> None:
        noisy = getattr(self._log, "noisy", None)
        if noisy is not None:
            noisy(kind, message)
        else:
            self._log(message)

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

    def install_command(self, automatic: AutoInstall) -> list[str]:
        return [
            *self._check_command(),
            *("server", "auto-install", "--version", str(automatic.version)),
            *("--protocol", str(automatic.protocol_version)),
        ]

    def _answered(self, answer: dict[str, Any]) -> FollowUp | None:
        if answer.get("ok") is not True:
            self._log(f"background check failed: {str(answer.get('error'))[:300]}")
            return None
        offer = ReleaseOffer.from_cache(answer.get("offer") or {})
        if offer is None:
            self._log("background check: the answer holds no release")
            return None
        checked_by = answer.get("checked_by") or {}
        self._log(
            f"background check{' (cached)' if answer.get('cached') else ''}: latest {offer.tag}, "
            f"by mux {checked_by.get('version')} at {checked_by.get('executable')}"
        )
        automatic = AutoInstall.from_json(answer.get("auto_install"))
        due = automatic is not None and automatic.install and automatic.version == offer.version
        # a release being staged is still announced: the user installs it (mux update)
        installing = due and automatic is not None and not automatic.stage_only
        with self._lock:
            self._offer = offer
            self._automatic = automatic
            if self._updates == "disabled":  # changed while the check ran
                self._retract_offer(POLICY_DISABLES)
                return None
            restate, self._restate = self._restate, False
            self._refresh_offer(installing=installing, restate=restate)
            self._publish_lifecycle_events(offer, self._baseline())
        if automatic is not None and due:
            self._said_why_not = None
            doing = "staging" if automatic.stage_only else "installing"
            self._log(f"{doing} mux {offer.version} on its own ({automatic.reason})")
            version = offer.version
            return FollowUp(
                self.install_command(automatic),
                lambda answer: self._install_answered(version, answer),
            )
        if automatic is not None and automatic.reason != REASON_OFF:
            doing = "staging" if automatic.stage_only else "installing"
            why_not = f"not {doing} mux {offer.version} on its own: {automatic.reason}"
            if why_not != self._said_why_not:  # said once, not at every check
                self._said_why_not = why_not
                self._log(why_not)
        return None

    def _install_answered(self, version: str, answer: dict[str, Any]) -> None:
        """The install child's answer; a release that was not installed is announced."""
        action = answer.get("action")
        if answer.get("ok") is True and action == "updated":
            self._log(f"installed mux {answer.get('to')} on its own (from {answer.get('from')})")
            return
        staged = answer.get("staged")
        if answer.get("ok") is True and action == "staged" and isinstance(staged, dict):
            self._log(f"staged mux {staged.get('version')} on its own: mux update applies it")
            data = {**staged, "install_command": "mux update"}
            self.hub.publish(WatchEvent(EVENT_UPDATE_STAGED, data), in_force=False)
            return
        why = answer.get("reason") or answer.get("error") or action
        self._log(f"automatic install of mux {version} not done: {str(why)[:300]}")
        with self._lock:
            self._refresh_offer()

    def _withheld(self, offer: ReleaseOffer) -> bool:
        """The user's state holds ``offer`` back (skipped, held, failed to start here)."""
        try:
            state = read_state(self._state_file)
        except MuxError as exc:
            self._log(f"update notices: {exc.message}")
            return False
        return withheld(state, offer.version, time.time()) is not None

    def _refresh_offer(
        self, *, installing: bool = False, announce: bool = True, restate: bool = False
    ) -> None:
        """Say (or withdraw) ``update-available`` for the last offer, as things stand now.
        ``installing``: an automatic install of it is about to run, so it is not announced;
        ``announce=False``: withdraw what no longer holds, announce nothing new (yet);
        ``restate``: say it even if this surface told of it today (the policy had withdrawn it)."""
        offer = self._offer
        if offer is None:
            return
        notice = offer_notice(
            offer,
            installed_version=self._baseline(),
            manager=self.manager,
            withheld=installing or self._withheld(offer),
        )
        if notice is None:
            self._retract_offer(NO_LONGER_OFFERED)
        elif (
            announce
            and notice.data.get("tag") != self._announced_tag
            and (restate or self._may_announce(offer.version))
        ):
            self._announced_tag = str(notice.data.get("tag"))
            self.hub.publish(WatchEvent(notice.type, notice.data))

    def _may_announce(self, version: str) -> bool:
        """At most one notice per version per surface per day (recorded in the user's state,
        so that a restarted server on the same socket counts what the last one said)."""
        now = time.time()
        try:
            if not may_notify(read_state(self._state_file), self.surface, version, now):
                if self._quiet_about != version:  # said once, not at every check
                    self._quiet_about = version
                    self._log(f"mux {version} was announced here within the last day: not again")
                return False
            change_state(self._state_file, lambda s: with_notice(s, self.surface, version, now))
        except MuxError as exc:
            self._log(f"update notices: {exc.message}")
        return True

    def _state_changed(self, _signature: object) -> None:
        """The user's state changed (a skip, a hold, their undoing): what it now withholds is
        withdrawn at once. What it no longer withholds is announced now, unless the next check
        may install it on its own (then that check decides, as it would have)."""
        with self._lock:
            automatic = self._automatic
            may_install = automatic is not None and automatic.reason != REASON_OFF
            self._refresh_offer(announce=not may_install)

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
        self._state_watch = LinkWatch(
            Path(self._state_file),
            self._state_changed,
            read=_file_signature,
            interval=settings.link_poll_interval,
        )
        self._state_watch.start()
        interval = check_interval(settings, self._log)
        if interval > 0:
            # Started even when the policy disables updates now: it may allow them later.
            self._check = BackgroundCheck(
                self.check_command,
                interval,
                self._answered,
                self._log,
                allowed=self._check_allowed,
            )
            self._check.start()
        if interval <= 0 or settings.updates == "disabled":
            why = "the machine policy disables updates" if interval > 0 else "interval 0"
            self._log(f"background update checks are off ({why})")

    def stop(self) -> None:
        for part in (self._check, self._link_watch, self._state_watch):
            if part is not None:
                part.stop()


def _file_signature(path: Path) -> tuple[int, int, int] | None:
    """What changes when a file is replaced or written (its inode, size and time)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)
