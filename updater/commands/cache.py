"""The last check result, so a sidebar can ask every few minutes for free.

One contained piece of state with clear rules (after pip's ``self_outdated_check``):

* it lives in ``<user cache dir>/mux/check.json`` and is written atomically (temp + rename);
* an entry answers only the question it was made for (same source, channel, requested
  version and running mux); anything else is a miss;
* an entry answers only while it is younger than the caller's ``--max-age`` (and, for a feed,
  while the signed index it came from has not expired);
* only verified answers are cached (a feed's signed index, the release's signed metadata);
* a failed lookup is cached too, so an offline machine does not retry on every call;
* a corrupt or unreadable cache is a miss, never an error: so is anything but a regular file
  of this user's of at most 1 MiB (a FIFO, a device, a link to /dev/zero: read without
  blocking, judged before a byte is read, :func:`updater.files.read_small_file`).

Stdlib only: this is the fast path of ``mux update --check --max-age``.
"""

from __future__ import annotations

import json
import os
import time

from updater.config.dirs import user_cache_dir
from updater.files import (
    STATE_FILE_LIMIT,
    NotReadable,
    atomic_write,
    owned_by_this_user,
    read_small_file,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

# 2: answers carry the typed decision (updater.core.offer.ReleaseOffer); 3: only verified answers
# (signed index and release metadata), with the index's expiry
CACHE_SCHEMA = 3


def cache_dir() -> Path:
    """``<user cache dir>/mux``, platformdirs' answer (:mod:`updater.config.dirs`)."""
    # deferred: this module is on a fast path (docs/build.md)
    from pathlib import Path

    return Path(user_cache_dir())


def check_cache_path() -> Path:
    return cache_dir() / _CHECK_FILE


_CHECK_FILE = "check.json"


def load(
    key: dict[str, Any], max_age: float, *, now: float | None = None
) -> tuple[dict[str, Any], float] | None:
    """The cached answer for ``key`` and when it was made, if younger than ``max_age`` s."""

    try:
        # Plain os.path: a cache hit imports neither pathlib nor platformdirs.
        raw = read_small_file(
            os.path.join(user_cache_dir(), _CHECK_FILE),
            STATE_FILE_LIMIT,
            inspect=owned_by_this_user,
        )
        if raw is None:
            return None
        doc = json.loads(raw)
    except (NotReadable, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("schema") != CACHE_SCHEMA or doc.get("key") != key:
        return None
    checked_at = doc.get("checked_at")
    # A time a calendar holds: JSON as Python reads it takes NaN and Infinity (NaN fails
    # every comparison, so it fails this one), and an answer of no age is never fresh.
    if not isinstance(checked_at, (int, float)) or not 0 <= checked_at < 2**40:
        return None
    age = (time.time() if now is None else now) - checked_at
    if not 0 <= age <= max_age:
        return None
    answer = doc.get("answer")
    return (answer, float(checked_at)) if isinstance(answer, dict) else None


def store(key: dict[str, Any], answer: dict[str, Any], *, now: float | None = None) -> None:
    doc = {
        "schema": CACHE_SCHEMA,
        "key": key,
        "checked_at": time.time() if now is None else now,
        "answer": answer,
    }

    try:
        atomic_write(
            check_cache_path(), (json.dumps(doc, sort_keys=True) + "\n").encode(), private=True
        )
    except OSError:
        pass  # a read-only cache dir must not break the check itself
