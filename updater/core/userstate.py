"""What the user told mux about updates, and what mux learnt on this machine (pure rules).

The state file (``<user state dir>/mux/update-state.json``, read and written by
:mod:`updater.commands.userstate`) keeps, for one user:

* ``skipped``: versions never to offer (``mux update --skip X``, until ``--unskip X``);
* ``hold_until``: no offers and no automatic installs before then (``mux update --hold 7d``,
  until ``--unhold``);
* ``failed_starts``: versions whose server did not come up on this machine
  (``mux server restart`` fell back): how often, when last, why, and whether the mux link
  went back because of it. Such a version is not offered again until a newer release, or
  until ``mux update --version X`` asks for it (which forgets the failures);
* ``failed_stagings``: versions whose background staging failed here (a layer refused it):
  not staged on its own again, so that no loop downloads a broken release again and again;
  a newer release is tried;
* ``notices``: when each surface (a server's watch stream) last told of each version, so
  that none tells of the same version more than once a day.

Every rule here is a pure function of that state, a version and the time: the check, ``mux
update``, a server's background check and its watch events all ask :func:`withheld` the
same question and get the same answer. Stdlib only, no ``typing``: the cached check reads it.
"""

from __future__ import annotations

from updater._records import NamedTuple
from updater.timestamps import rfc3339, utc_text

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

STATE_SCHEMA = 1
DAY = 86400.0
# After this many failed starts of the active version, the mux link goes back to the previous
# one (mux server restart says so, and the check shows it).
ROLLBACK_AFTER = 2
MAX_SKIPPED = 64
MAX_SURFACES = 64
MAX_REASON = 300
MAX_FAILED_STAGINGS = 16  # the most recent; an older failure is of a release long passed


class FailedStart(NamedTuple):
    """A version whose server did not come up on this machine."""

    version: str
    starts: int
    last_at: float
    reason: str
    rolled_back_to: str | None = None  # the version the mux link went back to, if it did

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "failed_starts": self.starts,
            "last_failed_at": rfc3339(self.last_at),
            "reason": self.reason,
            "rolled_back_to": self.rolled_back_to,
        }


class FailedStaging(NamedTuple):
    """A version whose background staging failed here: when, and why."""

    version: str
    at: float
    reason: str


class UserState(NamedTuple):
    skipped: tuple[str, ...] = ()
    hold_until: float | None = None
    failed: tuple[FailedStart, ...] = ()
    # surface -> version -> when that surface last told of that version
    notices: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()
    failed_stagings: tuple[FailedStaging, ...] = ()  # oldest first

    def failure(self, version: str) -> FailedStart | None:
        return next((f for f in self.failed if f.version == version), None)

    def held(self, now: float) -> bool:
        return self.hold_until is not None and now < self.hold_until

    @property
    def hold_until_text(self) -> str | None:
        """The hold's end, RFC 3339 (None: no hold on record)."""
        return rfc3339(self.hold_until) if self.hold_until is not None else None


class Withheld(NamedTuple):
    """Why a release that would be an update is not offered (nor installed automatically)."""

    version: str
    reason: str  # "skipped" | "failed" | "held"
    detail: str  # one sentence, for the check and mux update
    undo: str  # the command that offers it again
    until: float | None = None  # a hold's end

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "reason": self.reason,
            "detail": self.detail,
            "undo": self.undo,
            "until": rfc3339(self.until) if self.until is not None else None,
        }


def normal_version(text: str) -> str:
    """A version as the user may type it (``v1.2.0``) as releases spell it (``1.2.0``)."""
    return text.strip().removeprefix("v")


# -- the file's document ---------------------------------------------------------------------


def parse_state(doc: object) -> UserState | None:
    """The state in ``doc`` (the file's JSON); None when it is not a state document. Entries
    of the wrong kind inside a good document are dropped (the next write leaves them out)."""
    if not isinstance(doc, dict) or doc.get("schema") != STATE_SCHEMA:
        return None
    skipped = tuple(v for v in _list(doc.get("skipped")) if isinstance(v, str) and v)
    hold = doc.get("hold_until")
    failed = []
    for version, entry in _dict(doc.get("failed_starts")).items():
        if not isinstance(entry, dict):
            continue
        count, last_at = entry.get("count"), entry.get("last_at")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            continue
        if not isinstance(last_at, int | float) or not _is_number(last_at):
            continue
        reason, back = entry.get("reason"), entry.get("rolled_back_to")
        failed.append(
            FailedStart(
                version,
                count,
                float(last_at),
                reason[:MAX_REASON] if isinstance(reason, str) else "",
                back if isinstance(back, str) and back else None,
            )
        )
    notices = []
    for surface, said in _dict(doc.get("notices")).items():
        entries = tuple(
            sorted((v, float(t)) for v, t in _dict(said).items() if _is_number(t) and v)
        )
        if entries:
            notices.append((surface, entries))
    return UserState(
        skipped=skipped[:MAX_SKIPPED],
        hold_until=float(hold) if isinstance(hold, int | float) and _is_number(hold) else None,
        failed=tuple(sorted(failed)),
        notices=tuple(sorted(notices)),
        failed_stagings=_failed_stagings(doc.get("failed_stagings")),
    )


def _failed_stagings(value: object) -> tuple[FailedStaging, ...]:
    kept = []
    for version, entry in _dict(value).items():
        at = entry.get("at") if isinstance(entry, dict) else None
        if version and isinstance(at, int | float) and _is_number(at):
            reason = entry.get("reason")
            text = reason[:MAX_REASON] if isinstance(reason, str) else ""
            kept.append(FailedStaging(version, float(at), text))
    return tuple(sorted(kept, key=lambda f: f.at)[-MAX_FAILED_STAGINGS:])


def state_document(state: UserState) -> dict[str, Any]:
    return {
        "schema": STATE_SCHEMA,
        "skipped": list(state.skipped),
        "hold_until": state.hold_until,
        "failed_starts": {
            f.version: {
                "count": f.starts,
                "last_at": f.last_at,
                "reason": f.reason,
                "rolled_back_to": f.rolled_back_to,
            }
            for f in state.failed
        },
        "notices": {surface: dict(said) for surface, said in state.notices},
        "failed_stagings": {
            f.version: {"at": f.at, "reason": f.reason} for f in state.failed_stagings
        },
    }


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: object) -> dict[str, Any]:
    return {k: v for k, v in value.items() if isinstance(k, str)} if isinstance(value, dict) else {}


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


# -- skip and hold ---------------------------------------------------------------------------


def with_skip(state: UserState, version: str) -> UserState:
    version = normal_version(version)
    if version in state.skipped:
        return state
    return state._replace(skipped=(*state.skipped, version)[-MAX_SKIPPED:])


def without_skip(state: UserState, version: str) -> UserState:
    version = normal_version(version)
    return state._replace(skipped=tuple(v for v in state.skipped if v != version))


def with_hold(state: UserState, until: float) -> UserState:
    return state._replace(hold_until=until)


def without_hold(state: UserState) -> UserState:
    return state._replace(hold_until=None)


# -- failed starts ---------------------------------------------------------------------------


def with_failed_start(state: UserState, version: str, now: float, reason: str) -> UserState:
    """One more failed start of ``version`` (its count, the time, the reason)."""
    known = state.failure(version)
    entry = FailedStart(
        version,
        (known.starts if known else 0) + 1,
        now,
        reason[:MAX_REASON],
        known.rolled_back_to if known else None,
    )
    others = tuple(f for f in state.failed if f.version != version)
    return state._replace(failed=tuple(sorted((*others, entry))))


def with_rollback(state: UserState, version: str, to: str) -> UserState:
    """The mux link went back from ``version`` (which failed) to ``to``."""
    known = state.failure(version)
    if known is None:
        return state
    others = tuple(f for f in state.failed if f.version != version)
    return state._replace(failed=tuple(sorted((*others, known._replace(rolled_back_to=to)))))


def without_failure(state: UserState, version: str) -> UserState:
    """``version`` started (or was asked for again by name): its failures are forgotten."""
    return state._replace(failed=tuple(f for f in state.failed if f.version != version))


def rollback_due(state: UserState, version: str, *, active: str | None) -> bool:
    """After :data:`ROLLBACK_AFTER` failed starts of the active version, the link goes back."""
    known = state.failure(version)
    return (
        known is not None
        and known.starts >= ROLLBACK_AFTER
        and version == active
        and known.rolled_back_to is None
    )


# -- failed stagings ---------------------------------------------------------------------------


def with_failed_staging(state: UserState, version: str, now: float, reason: str) -> UserState:
    """The background staging of ``version`` failed at ``now`` (the most recent
    :data:`MAX_FAILED_STAGINGS` are kept)."""
    others = tuple(f for f in state.failed_stagings if f.version != version)
    entry = FailedStaging(version, now, reason[:MAX_REASON])
    return state._replace(failed_stagings=(*others, entry)[-MAX_FAILED_STAGINGS:])


def staging_failed(state: UserState, version: str) -> str | None:
    """Why ``version`` is not staged in the background again (one sentence); None when it
    may be. ``mux update`` and ``mux update --stage`` never ask: the user runs them."""
    failure = next((f for f in state.failed_stagings if f.version == version), None)
    if failure is None:
        return None
    why = f": {failure.reason}" if failure.reason else ""
    return (
        f"staging mux {version} failed here at {utc_text(int(failure.at))}{why}; it is not "
        "staged on its own again (a newer release is; mux update installs this one)"
    )


# -- what is offered -------------------------------------------------------------------------


def withheld(state: UserState, version: str, now: float) -> Withheld | None:
    """Why ``version``, which would be an update, is not offered now; None when it is.

    A skipped version, then a version that failed to start here, then a hold (any version).
    A request for exactly that version (``--version``) never asks: the user named it."""
    if version in state.skipped:
        return Withheld(
            version,
            "skipped",
            f"mux {version} is skipped (mux update --skip {version})",
            f"mux update --unskip {version}",
        )
    failure = state.failure(version)
    if failure is not None:
        times = "once" if failure.starts == 1 else f"{failure.starts} times"
        back = (
            f"; the mux link went back to {failure.rolled_back_to}"
            if failure.rolled_back_to
            else ""
        )
        why = f": {failure.reason}" if failure.reason else ""
        return Withheld(
            version,
            "failed",
            f"mux {version} failed to start a server on this machine {times} (last at "
            f"{utc_text(int(failure.last_at))}{why}){back}; it is not offered again until a "
            "newer release",
            f"mux update --version {version}",
        )
    if state.held(now):
        assert state.hold_until is not None
        return Withheld(
            version,
            "held",
            f"updates are held until {utc_text(int(state.hold_until))} (mux update --hold)",
            "mux update --unhold",
            until=state.hold_until,
        )
    return None


# -- notices ---------------------------------------------------------------------------------


def may_notify(state: UserState, surface: str, version: str, now: float) -> bool:
    """At most one notice per version per surface per day: has ``surface`` not told of
    ``version`` in the last day? (A clock that went back counts as a new day.)"""
    for name, said in state.notices:
        if name == surface:
            for told, at in said:
                if told == version:
                    return not (0 <= now - at < DAY)
    return True


def with_notice(state: UserState, surface: str, version: str, now: float) -> UserState:
    """``surface`` told of ``version`` at ``now``; entries older than a day are dropped, and
    the fewest surfaces kept are the most recent :data:`MAX_SURFACES`."""
    kept: dict[str, dict[str, float]] = {}
    for name, said in state.notices:
        fresh = {v: at for v, at in said if 0 <= now - at < DAY}
        if fresh:
            kept[name] = fresh
    kept.setdefault(surface, {})[version] = now
    newest = sorted(kept, key=lambda name: max(kept[name].values()), reverse=True)[:MAX_SURFACES]
    return state._replace(
        notices=tuple(sorted((name, tuple(sorted(kept[name].items()))) for name in newest))
    )


def state_of(doc: Mapping[str, Any] | None) -> UserState:
    """:func:`parse_state`, with an empty state for no document."""
    parsed = parse_state(doc) if doc is not None else None
    return parsed if parsed is not None else UserState()
