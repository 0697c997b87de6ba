"""The install record's rules: what ``install.json`` becomes and which versions stay (pure).

The bin-dir link is the truth of which version is active; ``install.json`` follows it. Kept:
the active version, the previous one (for ``--rollback``), the one the running mux was started
from, and every version a live server or a running mux uses (however many updates ago that
was); any other version is removed. A record written by install.sh or an older mux may miss
fields or hold garbage: the rules below read it defensively and keep unknown fields.
:mod:`updater.install.transaction` applies them.
"""

from __future__ import annotations

from updater._records import NamedTuple
from updater.timestamps import rfc3339, utc_text

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence
    from typing import Any

# The schema of install.json, the one definition: the layout reads records by it and
# install.sh's published copy is written with it (release/publish/install_script.py).
RECORD_SCHEMA = 1


class KeptVersion(NamedTuple):
    """A version that settling keeps, and why (the first reason that applies)."""

    version: str
    kind: str  # "active" | "previous" | "running" | "server" | "in-use" | "staged"
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
    staged = staged_version(record)
    if staged is not None and staged != active and staged in installed:
        keep(staged, "staged", "staged: verified and ready (mux update applies it)")
    else:
        staged = None  # applied, or gone: the record forgets it
    remove = tuple(v for v in installed if v not in reasons) if prune else ()
    entries = set(reasons) if prune else {*reasons, *installed}
    versions = record.get("versions")
    settled = {
        **{k: v for k, v in record.items() if k != STAGED or staged is not None},
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


# install.json's key for the one staged version: {"version", "staged_at", "bytes", "took"}.
STAGED = "staged"


def staged_version(record: Mapping[str, Any]) -> str | None:
    """The version the record says is staged (verified, placed, not active), if its entry is
    whole (:meth:`StagedCopy.of`): one predicate for keeping, applying and dropping it."""
    copy = StagedCopy.of(record)
    return copy.version if copy is not None else None


def staged_matches(
    record: Mapping[str, Any], version: str, *, archive_sha256: str, target: str, source: str
) -> bool:
    """The staged ``version`` is the release on offer: the signed digest it was verified
    against, the target and the source are the ones in hand (a copy staged from another
    source, for another target or under keys no longer trusted is not applied)."""
    versions = record.get("versions")
    entry = versions.get(version) if isinstance(versions, dict) else None
    if not isinstance(entry, dict):
        return False
    return (entry.get("archive_sha256"), entry.get("target"), entry.get("source")) == (
        archive_sha256,
        target,
        source,
    )


def record_staged(
    record: Mapping[str, Any], version: str, *, staged_at: float, took: float, size: int
) -> dict[str, Any]:
    """The record with ``version`` as the one staged version (its entry is recorded by
    :func:`record_install`); a version staged before it is no longer kept."""
    return {
        **record,
        STAGED: {"version": version, "staged_at": staged_at, "took": took, "bytes": size},
    }


def without_staged(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record with no staged version (``--unstage``, a prune, a refused apply)."""
    return {k: v for k, v in record.items() if k != STAGED}


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
        # A staged version is ahead of the active one, never what a rollback goes back to.
        others = [v for v in installed if v not in (active, staged_version(record))]
        previous = others[-1] if len(others) == 1 else None
    return previous if previous in installed else None


def movable_versions(record: Mapping[str, Any], installed: Collection[str]) -> list[str]:
    """The installed versions a switch can go back to: those with a file list on record
    (what ``--rollback`` re-verifies before it switches)."""
    versions = record.get("versions")
    if not isinstance(versions, dict):
        return []
    return [
        v
        for v in installed
        if isinstance(versions.get(v), dict) and isinstance(versions[v].get("files_sha256"), str)
    ]


def record_rollback(record: Mapping[str, Any], *, to: str, from_: str | None) -> dict[str, Any]:
    """The record after the link moved to the kept version ``to`` (a rollback, a withdrawn
    release moving back, or the staged version applied: it is staged no more)."""
    kept = without_staged(record) if staged_version(record) == to else record
    return {**kept, "active": to, "previous": from_}


class StagedCopy(NamedTuple):
    """The staged version as the record keeps it: when it was staged, how long that took
    (seconds), and its size on disk (bytes)."""

    version: str
    staged_at: float
    took: float
    size_bytes: int

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> StagedCopy | None:
        """The record's staged entry; None when there is none or it is not whole (numbers
        that are not finite or not in range: JSON as Python reads it takes NaN and Infinity)."""
        entry = record.get(STAGED)
        if not isinstance(entry, dict) or not isinstance(entry.get("version"), str):
            return None
        limits = {"staged_at": 2.0**33, "took": 2.0**33, "bytes": 2.0**63}
        if not all(_number(entry.get(key), limit) for key, limit in limits.items()):
            return None
        staged_at, took, size = (entry[key] for key in limits)
        return cls(str(entry["version"]), float(staged_at), float(took), int(size))

    @property
    def staged_at_text(self) -> str:
        return utc_text(int(self.staged_at))

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "staged_at": rfc3339(self.staged_at),
            "took_seconds": round(self.took, 3),
            "size_bytes": self.size_bytes,
        }


def _number(value: object, limit: float) -> bool:
    """A number in ``[0, limit)`` (NaN fails every comparison, so it fails this one)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    return 0 <= value < limit
