"""The user's update state file: read it, change it, and the commands that change it.

``<user state dir>/mux/update-state.json`` (``~/.local/state/mux/``; docs/contracts.md, "User
update state"): what ``mux update --skip/--hold`` and their undoing recorded, the versions
that failed to start a server here, and when each surface last told of each version. Its
rules are :mod:`updater.core.userstate`; this module only reads and writes it:

* read with :func:`updater.files.read_small_file` (a regular file, at most
  :data:`MAX_STATE_BYTES`, never blocking on a FIFO); a missing file is an empty state; a
  file that is there but is not a state document is an error naming it (a skip the user made
  is never silently dropped);
* changed under an ``flock`` on its folder (read, change, write), written atomically with
  mode 0600 in a 0700 folder, so that two writers (a restart, a server's notice, the CLI)
  never lose each other's change.

Stdlib only: the cached check reads it (without ``pathlib``: plain ``os.path``).
"""

from __future__ import annotations

import json
import os
import time

from updater._records import NamedTuple
from updater.config.dirs import user_state_dir
from updater.core.request import release_version
from updater.core.userstate import (
    UserState,
    parse_state,
    state_document,
    with_hold,
    with_skip,
    without_hold,
    without_skip,
)
from updater.errors import MuxError, UsageError
from updater.files import NotReadable, atomic_write, read_small_file
from updater.timestamps import parse_duration, utc_text

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from updater.config.settings import Settings

STATE_NAME = "update-state.json"
MAX_STATE_BYTES = 256 * 1024
MAX_HOLD = 366 * 86400.0  # a hold longer than a year is a typo, not a plan


def state_path(settings: Settings | None = None) -> str:
    """``<state dir>/update-state.json``: the settings' state dir, else the user's."""
    folder = settings.state_dir if settings is not None else None
    return os.path.join(os.fspath(folder) if folder is not None else user_state_dir(), STATE_NAME)


def _unreadable(path: str, reason: str) -> MuxError:
    return MuxError(
        f"cannot read {path}: {reason}",
        hint="remove it to start afresh (it keeps your mux update --skip/--hold choices)",
    )


def read_state(path: str) -> UserState:
    """The state at ``path`` (empty when there is none); :class:`MuxError` when a file is there
    that mux cannot take for one."""
    try:
        raw = read_small_file(path, MAX_STATE_BYTES)
    except NotReadable as exc:
        raise _unreadable(path, str(exc)) from None
    if raw is None:
        return UserState()
    try:
        state = parse_state(json.loads(raw))
    except (ValueError, RecursionError):
        state = None
    if state is None:
        raise _unreadable(path, "it is not a mux state document")
    return state


def change_state(path: str, change: Callable[[UserState], UserState]) -> UserState:
    """Apply ``change`` to the state at ``path`` under its folder's lock; returns the new state.
    Raises :class:`MuxError` when the file cannot be read or written."""
    import fcntl  # (not at the top: the cached check only reads)

    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise MuxError(f"cannot write {folder}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        before = read_state(path)
        after = change(before)
        if after != before or not os.path.exists(path):
            data = (json.dumps(state_document(after), indent=1, sort_keys=True) + "\n").encode()
            try:
                atomic_write(path, data, mode=0o600)
            except OSError as exc:
                raise MuxError(f"cannot write {path}: {exc.strerror or exc}") from None
        return after
    finally:
        os.close(fd)  # (and with it the lock)


# -- mux update --skip / --unskip / --hold / --unhold ----------------------------------------


class StateChange(NamedTuple):
    """What one of those flags did, for the CLI to render."""

    action: str  # "skip" | "unskip" | "hold" | "unhold"
    message: str
    state: UserState
    path: str

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "message": self.message,
            "state_file": self.path,
            "skipped": list(self.state.skipped),
            "hold_until": self.state.hold_until_text,
        }


def skip(settings: Settings, version: str) -> StateChange:
    version = release_version(version, "--skip")
    path = state_path(settings)
    state = change_state(path, lambda s: with_skip(s, version))
    return StateChange(
        "skip",
        f"mux {version} will not be offered or installed automatically "
        f"(mux update --unskip {version} undoes it)",
        state,
        path,
    )


def unskip(settings: Settings, version: str) -> StateChange:
    version = release_version(version, "--unskip")
    path = state_path(settings)
    was = read_state(path)
    state = change_state(path, lambda s: without_skip(s, version))
    said = "is offered again" if version in was.skipped else "was not skipped"
    return StateChange("unskip", f"mux {version} {said}", state, path)


def hold(settings: Settings, duration: str, *, now: float | None = None) -> StateChange:
    try:
        seconds = parse_duration(duration, unit_required=True)
    except ValueError as exc:
        raise UsageError(f"--hold: {exc}") from None
    if not 0 < seconds <= MAX_HOLD:
        raise UsageError(f"--hold {duration!r}: give a duration from 1s to 366d (e.g. 7d)")
    until = (time.time() if now is None else now) + seconds
    path = state_path(settings)
    state = change_state(path, lambda s: with_hold(s, until))
    return StateChange(
        "hold",
        f"no update offers and no automatic installs until {utc_text(int(until))} "
        "(mux update --unhold ends it)",
        state,
        path,
    )


def unhold(settings: Settings) -> StateChange:
    path = state_path(settings)
    state = change_state(path, without_hold)
    return StateChange("unhold", "updates are offered again", state, path)
