"""Pure planning: what was asked for, what is on offer, and what to do about it (no I/O).

* :class:`ReleaseRequest` and its :meth:`~ReleaseRequest.decide`: "is this an update?", the
  one answer ``mux update --check``, ``mux update`` and ``mux-release repin`` all act on;
* :class:`ReleaseOffer` and :class:`CheckReport`: what the check found (and caches);
* :func:`server_verdicts`: which live servers need a restart, now or after the update;
* :func:`settle`, :func:`rollback_choice` and the other record rules: what ``install.json``
  becomes and which versions stay; :mod:`updater.install.transaction` applies them.

The cached check imports this module, so it stays cheap: ``models`` and ``packaging`` are
imported only where a tag is built or versions are compared, and its records are NamedTuples
(:mod:`updater._records`): no ``typing`` or ``dataclasses`` at run time (``dataclasses``
imports ``inspect``, and defining a frozen dataclass costs about a millisecond).
"""

from __future__ import annotations

from enum import StrEnum

from updater._records import NamedTuple
from updater.errors import EXIT_OK, EXIT_RESTART_NEEDED, EXIT_UPDATE_AVAILABLE, UsageError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence
    from typing import Any

    from packaging.version import Version

    from updater.config.buildinfo import BuildInfo
    from updater.servers.client import ServerReport


# -- what was asked for, and the decision ------------------------------------------------------


class Decision(StrEnum):
    """What a request makes of the release on offer, against the current version."""

    INSTALL = "install"  # nothing is installed yet
    UPDATE = "update"  # the offered release is newer
    UP_TO_DATE = "up-to-date"  # it is the current version
    DOWNGRADE = "downgrade"  # it is older, and the request allows going back
    DOWNGRADE_REFUSED = "downgrade-refused"  # older, asked for by version, not allowed
    NEWER_INSTALLED = "newer-installed"  # older: the current one is ahead of the newest offered
    # A higher version, but signed before the current one: an old release replayed, or a
    # backport; only `--version X --allow-downgrade` installs it.
    SIGNED_EARLIER = "signed-earlier"

    @property
    def installs(self) -> bool:
        """``mux update`` installs the offered release."""
        return self in (Decision.INSTALL, Decision.UPDATE, Decision.DOWNGRADE)

    @property
    def offers_release(self) -> bool:
        """``mux update --check`` reports a release to install (exit 10)."""
        return self.installs or self is Decision.DOWNGRADE_REFUSED


class ReleaseRequest(NamedTuple):
    """The newest release (stable, or including pre-releases), or exactly one release.

    An exact request names its tag; mux's own tags are ``v`` + the version as the release
    was built (``--version 1.2.3-rc1`` asks for ``v1.2.3-rc1``, as install.sh does).
    ``allow_downgrade`` lets an older release through; ``mux update`` sets it only together
    with ``--version`` (:meth:`from_flags`), ``mux-release repin`` with either.
    """

    exact_tag: str | None = None
    include_pre: bool = False
    allow_downgrade: bool = False

    @classmethod
    def latest(cls, *, include_pre: bool = False, allow_downgrade: bool = False) -> ReleaseRequest:
        return cls(include_pre=include_pre, allow_downgrade=allow_downgrade)

    @classmethod
    def exactly(cls, version: str, *, allow_downgrade: bool = False) -> ReleaseRequest:
        """mux's release ``v<version>``; a leading ``v`` is accepted. Raises UsageError."""
        from updater.core import models

        tag = models.tag_for(version.strip().removeprefix("v"))
        if not models.TAG_RE.fullmatch(tag):
            raise UsageError(
                f"--version {version[:60]!r} is not a release version",
                hint="give one like 1.2.3 or 1.2.3-rc1",
            )
        return cls(exact_tag=tag, allow_downgrade=allow_downgrade)

    @classmethod
    def tagged(cls, tag: str, *, allow_downgrade: bool = False) -> ReleaseRequest:
        """Exactly the release tagged ``tag``, in any tag family (``libfoo-v1.2.3``)."""
        return cls(exact_tag=tag, allow_downgrade=allow_downgrade)

    @classmethod
    def from_flags(cls, *, version: str | None, pre: bool, allow_downgrade: bool) -> ReleaseRequest:
        """``mux update [--pre] [--version X [--allow-downgrade]]``."""
        if version is None:
            return cls.latest(include_pre=pre)
        return cls.exactly(version, allow_downgrade=allow_downgrade)

    @property
    def exact(self) -> bool:
        return self.exact_tag is not None

    def tag(self) -> str | None:
        """The tag to ask the source for; None: the source's newest (see ``include_pre``)."""
        return self.exact_tag

    def cache_key(self) -> dict[str, Any]:
        """What makes two requests the same question (the check cache's key)."""
        return {"tag": self.exact_tag, "pre": self.include_pre}

    def decide(
        self,
        current: str | Version | None,
        offered: str | Version,
        *,
        current_signed_at: int | None = None,
        offered_signed_at: int | None = None,
    ) -> Decision:
        """The one answer to "is ``offered`` an update from ``current``?" (None: not installed).

        Older means older by version, or signed before the current release (the signed
        timestamps of their ``SHA256SUMS.minisig``, when both are known): either is a
        downgrade, installed only when the request allows it.
        """
        if current is None:
            return Decision.INSTALL
        have, get = _version(current), _version(offered)
        if get == have:
            return Decision.UP_TO_DATE
        if get > have and not signed_earlier(current_signed_at, offered_signed_at):
            return Decision.UPDATE
        if self.allow_downgrade:
            return Decision.DOWNGRADE
        if self.exact:
            return Decision.DOWNGRADE_REFUSED
        return Decision.NEWER_INSTALLED if get < have else Decision.SIGNED_EARLIER


def signed_earlier(current_signed_at: int | None, offered_signed_at: int | None) -> bool:
    """The offered release was signed before the current one (False when either is unknown)."""
    if current_signed_at is None or offered_signed_at is None:
        return False
    return offered_signed_at < current_signed_at


def _version(value: str | Version) -> Version:
    from updater.core.models import parse_version

    return parse_version(value) if isinstance(value, str) else value


# -- what the check found ----------------------------------------------------------------------


class OfferedAsset(NamedTuple):
    name: str
    size: int
    sha256: str


class ReleaseOffer(NamedTuple):
    """The release a source offers for a request, decided against the running mux.

    This is what the check caches: everything here comes from the source, so a cached
    answer needs no network; the live servers are asked afresh each time.
    """

    source_kind: str
    source_location: str
    tag: str
    version: str
    protocol_version: int
    released_at: str
    release_url: str
    asset: OfferedAsset | None  # the build for this mux's target, if the release has one
    requested: bool  # asked for with --version
    decision: Decision
    # Until when the answer may be reused: the feed index's signed expiry (None: no bound
    # beyond the caller's --max-age).
    fresh_until: int | None = None
    warnings: tuple[str, ...] = ()  # said with every answer, cached or not (an expired feed)
    signed_at: int | None = None  # the release's signed time (None: no signature checked)

    @property
    def update_available(self) -> bool:
        return self.decision.offers_release

    @property
    def install_command(self) -> str:
        """The ``mux update`` that installs this release."""
        command = "mux update" + (f" --version {self.version}" if self.requested else "")
        if self.decision in (Decision.DOWNGRADE, Decision.DOWNGRADE_REFUSED):
            command += " --allow-downgrade"  # it is older than this mux
        return command

    def to_cache(self) -> dict[str, Any]:
        return {
            "ok": True,
            "source": {"kind": self.source_kind, "location": self.source_location},
            "latest": {
                "tag": self.tag,
                "version": self.version,
                "protocol_version": self.protocol_version,
                "released_at": self.released_at,
                "release_url": self.release_url,
                "asset": (
                    {"name": self.asset.name, "size": self.asset.size, "sha256": self.asset.sha256}
                    if self.asset
                    else None
                ),
                "requested": self.requested,
            },
            "decision": self.decision.value,
            "fresh_until": self.fresh_until,
            "warnings": list(self.warnings),
            "signed_at": self.signed_at,
        }

    @classmethod
    def from_cache(cls, doc: Mapping[str, Any]) -> ReleaseOffer | None:
        """The offer :meth:`to_cache` wrote; None when ``doc`` is anything else."""
        try:
            source, latest, asset = doc["source"], doc["latest"], doc["latest"]["asset"]
            offer = cls(
                source_kind=str(source["kind"]),
                source_location=str(source["location"]),
                tag=str(latest["tag"]),
                version=str(latest["version"]),
                protocol_version=int(latest["protocol_version"]),
                released_at=str(latest["released_at"]),
                release_url=str(latest["release_url"]),
                asset=(
                    OfferedAsset(str(asset["name"]), int(asset["size"]), str(asset["sha256"]))
                    if asset is not None
                    else None
                ),
                requested=bool(latest["requested"]),
                decision=Decision(doc["decision"]),
                fresh_until=_int_or_none(doc.get("fresh_until")),
                warnings=tuple(str(w) for w in doc.get("warnings") or ()),
                signed_at=_int_or_none(doc.get("signed_at")),
            )
        except (KeyError, TypeError, ValueError):
            return None
        return offer if doc.get("ok") is True else None

    def is_fresh(self, now: float) -> bool:
        """Still within what signed it allows (a feed index expires)."""
        return self.fresh_until is None or now < self.fresh_until


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class ServerVerdict(NamedTuple):
    """One server's answer, and what it needs.

    ``restart_needed``: it speaks another protocol than the running (or installed) mux, or
    the build it runs from was deleted under it (it may fail at its next code path).
    ``compatible``: it runs another version that speaks the same protocol; it keeps working
    and may be restarted when convenient (not a pending restart).
    """

    report: ServerReport
    restart_needed: bool
    restart_needed_after_update: bool  # speaks another protocol than the release on offer
    restart_command: str | None
    compatible: bool = False
    build_deleted: bool = False

    @property
    def live(self) -> bool:
        return self.report.status is not None


def needs_restart(server_protocol: int, mux_protocol: int | None) -> bool:
    """The one restart rule: a server must be restarted to work with a mux that speaks
    another protocol than it does (None: that mux's protocol is not known, so nothing to say).
    A server of another version at the same protocol keeps working (compatible)."""
    return mux_protocol is not None and server_protocol != mux_protocol


def server_verdicts(
    reports: Sequence[ServerReport],
    *,
    running_protocol: int,
    offered_protocol: int | None = None,
    current_version: str | None = None,
) -> tuple[ServerVerdict, ...]:
    """Which live servers speak another protocol than ``running_protocol`` (restart now) or
    than ``offered_protocol`` (restart after the update), which run a build that is gone,
    and which run another version than ``current_version`` at the same protocol
    (compatible). Servers that did not answer with a status line need nothing: there is
    nothing to compare."""
    from updater.servers.client import restart_command

    verdicts = []
    for report in reports:
        status = report.status
        if report.state != "live" or status is None:
            verdicts.append(ServerVerdict(report, False, False, None))
            continue
        other_protocol = needs_restart(status.protocol_version, running_protocol)
        deleted = report.build_installed is False
        after = needs_restart(status.protocol_version, offered_protocol)
        compatible = (
            not other_protocol
            and not deleted
            and current_version is not None
            and status.version != current_version
        )
        needs_command = other_protocol or deleted or after or compatible
        verdicts.append(
            ServerVerdict(
                report,
                restart_needed=other_protocol or deleted,
                restart_needed_after_update=after,
                restart_command=restart_command(report) if needs_command else None,
                compatible=compatible,
                build_deleted=deleted,
            )
        )
    return tuple(verdicts)


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
    from updater.timestamps import rfc3339

    return rfc3339(due)


# -- install.json: what it becomes, and which versions stay ------------------------------------
#
# The bin-dir link is the truth of which version is active; install.json follows it. Kept: the
# active version, the previous one (for --rollback), the one the running mux was started
# from, and every version a live server runs from (however many updates ago that was); any
# other version is removed. A record written by install.sh or an older mux may miss fields
# or hold garbage: the rules below read it defensively and keep unknown fields.

RECORD_SCHEMA = 1


class KeptVersion(NamedTuple):
    """A version that settling keeps, and why (the first reason that applies)."""

    version: str
    kind: str  # "active" | "previous" | "running" | "server" | "in-use"
    reason: str
    size_bytes: int | None = None  # filled in by whoever looks at the disk


class ServerHold(NamedTuple):
    """A server that runs from an installed version folder, so that version must stay."""

    version: str
    address: str
    pid: int | None
    answering: bool  # False: it did not answer (hung, garbage); the OS told which build it is

    def describe(self) -> str:
        pid = f"pid {self.pid}" if self.pid is not None else "pid unknown"
        silent = ", not answering" if not self.answering else ""
        return f"server {self.address} ({pid}{silent}) runs from it"


class InUseHold(NamedTuple):
    """A version that running mux processes use: they hold its lock (updater.install.inuse), or the
    OS says their program lies in it. ``pids`` are the processes the OS names (may be none)."""

    version: str
    pids: tuple[int, ...] = ()

    def describe(self) -> str:
        if not self.pids:
            return "in use by a running mux"
        return f"in use by a running mux (pid {', '.join(str(pid) for pid in self.pids)})"


def _hold_reason(version: str, holds: Sequence[ServerHold | InUseHold]) -> KeptVersion:
    """Why a held version stays: each server that runs from it (by its socket), then the
    processes that use it and are not one of those servers."""
    servers = [h for h in holds if isinstance(h, ServerHold) and h.version == version]
    users = [h for h in holds if isinstance(h, InUseHold) and h.version == version]
    reasons = [h.describe() for h in servers]
    named = {h.pid for h in servers}
    others = tuple(sorted({pid for h in users for pid in h.pids} - named))
    if others or (users and not servers):
        reasons.append(InUseHold(version, others).describe())
    return KeptVersion(version, "server" if servers else "in-use", "; ".join(reasons))


class Settlement(NamedTuple):
    """What settling an install does: the versions to remove, the record to write, and
    every version that stays with its reason."""

    remove: tuple[str, ...]
    record: dict[str, Any] | None  # None: the record already agrees
    kept: tuple[KeptVersion, ...] = ()


def settle(
    record: Mapping[str, Any],
    *,
    active: str | None,
    installed: Collection[str],
    running: str | None = None,
    holds: Sequence[ServerHold | InUseHold] = (),
    prune: bool = True,
) -> Settlement:
    """Make the record agree with the link, and keep only what is needed.

    ``active`` is the version the link points at, ``installed`` the version folders there
    are, ``running`` the one this process runs from, ``holds`` the versions running mux
    processes use (their lock, a server's status line, what the OS says): none of these is
    ever removed. After a switch, or after one that a kill cut short between moving the link
    and recording it, the recorded "active" that the link no longer names is the previous
    version. ``prune=False`` only settles the record: nothing is removed, and the entries of
    every installed version stay.
    """
    if active is None:
        return Settlement((), None)
    recorded, previous = record.get("active"), record.get("previous")
    if isinstance(recorded, str) and recorded != active:
        previous = recorded
    if not (isinstance(previous, str) and previous != active and previous in installed):
        previous = None
    reasons: dict[str, KeptVersion] = {}

    def keep(version: str | None, kind: str, reason: str) -> None:
        if (
            version is not None
            and version not in reasons
            and (version in installed or kind == "active")
        ):
            reasons[version] = KeptVersion(version, kind, reason)

    keep(active, "active", "active (the mux link points at it)")
    keep(previous, "previous", "previous version (for mux update --rollback)")
    keep(running, "running", "the running mux runs from it")
    for version in sorted({hold.version for hold in holds}):
        held = _hold_reason(version, holds)
        keep(version, held.kind, held.reason)
    remove = tuple(v for v in installed if v not in reasons) if prune else ()
    entries = set(reasons) if prune else {*reasons, *installed}
    versions = record.get("versions")
    settled = {
        **record,
        "active": active,
        "previous": previous,
        "versions": {
            v: entry
            for v, entry in (versions if isinstance(versions, dict) else {}).items()
            if v in entries
        },
    }
    return Settlement(
        remove,
        None if settled == dict(record) else settled,
        tuple(reasons.values()),
    )


def record_install(
    record: Mapping[str, Any],
    version: str,
    *,
    archive_sha256: str,
    files_sha256: str,
    target: str,
    source: str,
    bin_dir: str,
    signed_at: int | None = None,
) -> dict[str, Any]:
    """The record with ``version`` added; "active" still names the version it replaces.

    ``signed_at`` is the signed timestamp of the release's verified ``SHA256SUMS.minisig``
    (kept out when no signature was checked), what a later downgrade is judged by.

    It is written before the link moves: a kill after the switch still finds the new
    version's file list on record, and :func:`settle` turns the old "active" into "previous".
    """
    import copy  # (not at the top: only an install records one)

    updated = copy.deepcopy(dict(record))
    versions = updated.get("versions")
    if not isinstance(versions, dict):
        versions = updated["versions"] = {}
    versions[version] = {
        "archive_sha256": archive_sha256,
        "files_sha256": files_sha256,
        "target": target,
        "source": source,
        "installed_by": "mux update",
        **({"signed_at": signed_at} if signed_at is not None else {}),
    }
    updated.update(
        {"schema": RECORD_SCHEMA, "bin_dir": bin_dir, "target": target, "source": source}
    )
    return updated


def recorded_signed_at(record: Mapping[str, Any], version: str | None) -> int | None:
    """The ``signed_at`` the record keeps for ``version`` (None: not recorded, or garbage)."""
    versions = record.get("versions")
    entry = versions.get(version) if isinstance(versions, dict) and version else None
    signed = entry.get("signed_at") if isinstance(entry, dict) else None
    return signed if isinstance(signed, int) and not isinstance(signed, bool) else None


def rollback_choice(
    record: Mapping[str, Any], *, active: str | None, installed: Collection[str]
) -> str | None:
    """The version ``--rollback`` goes back to: the recorded previous one, else the only
    other installed one; None when there is none (or it is gone)."""
    previous = record.get("previous")
    if not isinstance(previous, str) or previous == active:
        others = [v for v in installed if v != active]
        previous = others[-1] if len(others) == 1 else None
    return previous if previous in installed else None


def record_rollback(record: Mapping[str, Any], *, to: str, from_: str | None) -> dict[str, Any]:
    return {**record, "active": to, "previous": from_}


# -- what a server tells its watchers (mux server watch) ---------------------------------------
#
# A server knows the build it runs, the build the mux link points at (it watches the link),
# and the newest release (its background check). Each change becomes an event; a watcher that
# connects later gets the events still in force. Events are plain (type, data) pairs:
# updater.servers.protocol frames them, updater.servers.watch delivers them.

EVENT_UPDATE_AVAILABLE = "update-available"
EVENT_UPDATE_INSTALLED = "update-installed"
EVENT_RESTART_NEEDED = "restart-needed"
# What the link moving says: a move replaces all of these at once (link_notices).
LINK_EVENTS = (EVENT_UPDATE_INSTALLED, EVENT_RESTART_NEEDED)


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
) -> ServerNotice | None:
    """``update-available`` when ``offer`` is newer than the installed version, else None.

    Its data is the check's ``latest`` object (``mux update --check --json``) with what
    installs it, as the check says: ``install_command`` and ``managed_by`` (a packager's
    command, or none under the policy's ``check-only``). A packager's announce delay holds
    it back as it holds back the check's (the next background check announces it)."""
    if ReleaseRequest.latest().decide(installed_version, offer.version) is not Decision.UPDATE:
        return None
    delay = manager.announce_delay if manager is not None else 0.0
    if delay > 0 and hold_until(offer.released_at, delay, now) is not None:
        return None
    data = {
        **offer.to_cache()["latest"],
        "install_command": manager.command if manager is not None else offer.install_command,
        "managed_by": manager.to_json() if manager is not None else None,
    }
    return ServerNotice(EVENT_UPDATE_AVAILABLE, data)
