"""The highest feed-index ``seq`` this machine has seen, per signing key (one small state file).

A feed's ``releases.json.minisig`` carries a ``seq`` that grows with every signature. A reader
that remembers the highest one it verified for a key refuses a lower one: that is an older
index replayed (a rollback). The rules, shared with install.sh (docs/contracts.md, "Feed
sequence state"):

* the file is ``<user state dir>/feed-seq`` (platformdirs' ``user_state_dir("mux")``, which
  install.sh computes the same way), one line ``<KEYID> <seq>`` per key id, sorted;
* it is written atomically (a temporary file in the same folder, then a rename), and the writer
  reads it again just before the rename and keeps the maximum of each key, so two writers (a
  sidebar's check, ``mux update``, install.sh) never lower a counter;
* lines that do not parse are dropped on the next write; a missing file is an empty one;
* a seq longer than any signed number mux reads (:data:`MAX_DECIMAL_DIGITS` digits; an
  older install.sh recorded any length) counts as :data:`BEYOND_ANY_SEQ`, higher than every
  seq mux accepts: that key's lists are refused (fail closed), the other keys' are not;
* a new key id starts its own counter, so rotating the release key recovers from an index
  signed with a stolen key and a huge ``seq`` (a fast-forward).

Stdlib only, except platformdirs when no state dir is given.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Mapping
from pathlib import Path

from platformdirs import user_state_dir

from updater.errors import MuxError
from updater.files import write_temp_beside
from updater.formats.trusted_comments import MAX_DECIMAL_DIGITS

STATE_NAME = "feed-seq"
_LINE = re.compile(r"([0-9A-F]+) ([0-9]+)")
# Higher than any seq a trusted comment can carry (it has one digit more than the longest).
BEYOND_ANY_SEQ = 10**MAX_DECIMAL_DIGITS


def state_path(state_dir: Path | None = None) -> Path:
    """``<state_dir>/feed-seq``; the default state dir is the user's (platformdirs)."""
    if state_dir is None:
        state_dir = Path(user_state_dir("mux", appauthor=False))
    return state_dir / STATE_NAME


def parse(text: str) -> dict[str, int]:
    """``{key id: highest seq}`` from the file's text; lines that do not parse are skipped."""
    seen: dict[str, int] = {}
    for line in text.splitlines():
        match = _LINE.fullmatch(line)
        if match:
            digits = match[2].lstrip("0") or "0"
            key = match[1]
            seq = int(digits) if len(digits) <= MAX_DECIMAL_DIGITS else BEYOND_ANY_SEQ
            seen[key] = max(seq, seen.get(key, seq))
    return seen


def format_state(seen: Mapping[str, int]) -> bytes:
    return "".join(sorted(f"{key} {seq}\n" for key, seq in seen.items())).encode("ascii")


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("ascii", "replace")
    except FileNotFoundError:
        return ""
    except OSError as exc:
        # Fail closed: a counter that cannot be read cannot refuse a rollback.
        raise MuxError(
            f"cannot read {path}: {exc.strerror or exc}",
            hint="fix its permissions (it keeps the feed sequence numbers this machine saw)",
        ) from None


def read(path: Path) -> dict[str, int]:
    """What ``path`` records (empty when it does not exist). Raises :class:`MuxError` when it
    exists but cannot be read."""
    return parse(_read_text(path))


def _merged(*states: Mapping[str, int]) -> dict[str, int]:
    merged: dict[str, int] = {}
    for state in states:
        for key, seq in state.items():
            merged[key] = max(seq, merged.get(key, seq))
    return merged


def record(path: Path, key_id: str, seq: int) -> bool:
    """Raise ``key_id``'s counter in ``path`` to ``seq`` (never lower it); True when written.

    mux writers also hold ``flock`` on the state folder while they read, merge and rename, so
    two of them never interleave; install.sh's writer re-reads before its rename, which
    leaves only that last instant to chance. Raises :class:`OSError` when the file cannot be
    written (the caller warns: the answer it verified stands).
    """

    if parse(_read_text(path)).get(key_id, -1) >= seq:
        return False  # already recorded (the common case: read only)
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        first = _read_text(path)
        wanted = _merged(parse(first), {key_id: seq})
        temporary = write_temp_beside(path, format_state(wanted))
        try:
            again = _read_text(path)  # just before the rename: install.sh may have written
            if again != first:
                temporary.unlink(missing_ok=True)
                temporary = write_temp_beside(path, format_state(_merged(wanted, parse(again))))
            os.replace(temporary, path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
    finally:
        os.close(folder)  # (and with it the lock)
    return True
