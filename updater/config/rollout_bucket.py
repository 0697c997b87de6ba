"""This machine's rollout bucket: a random number drawn once, kept in the user's state dir.

A staged release is offered to the machines whose bucket its current stage covers
(:mod:`updater.core.lifecycle`). The bucket is drawn here with :mod:`secrets` the first
time it is needed, written to ``<user state dir>/rollout-bucket`` (one decimal number below
:data:`~updater.core.lifecycle.BUCKETS`, and a newline), and never sent anywhere: no request
carries it, so no server learns which machines are early. The first writer wins (a hard
link of a finished temporary file, which fails when the name exists), so two processes
drawing at once agree on one bucket. A file that does not hold a bucket is drawn again
(deleting the file draws a new one, as Sparkle lets a user do).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from platformdirs import user_state_dir

from updater.files import NotReadable, read_small_file, write_temp_beside

STATE_NAME = "rollout-bucket"
BUCKETS = 10_000  # updater.core.lifecycle.BUCKETS (config sits below core)


def bucket_path(state_dir: Path | None = None) -> Path:
    if state_dir is None:
        state_dir = Path(user_state_dir("mux", appauthor=False))
    return state_dir / STATE_NAME


def parse(raw: bytes) -> int | None:
    text = raw.decode("ascii", "replace").strip()
    if not text.isdigit() or not text.isascii() or len(text) > 5:
        return None
    value = int(text)
    return value if value < BUCKETS else None


def machine_bucket(state_dir: Path | None = None) -> int | None:
    """The bucket (drawn and kept on first use); None when the state dir cannot hold one
    (then nothing staged is offered: the caller reports why)."""
    path = bucket_path(state_dir)
    for _ in range(3):
        try:
            raw = read_small_file(str(path), 64)
        except NotReadable:
            raw = b""
        if raw is not None:
            value = parse(raw)
            if value is not None:
                return value
            try:
                path.unlink()  # not a bucket: draw again
            except OSError:
                return None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = write_temp_beside(path, f"{secrets.randbelow(BUCKETS)}\n".encode())
        except OSError:
            return None
        try:
            os.link(temporary, path)  # fails when another process was first: read theirs
        except FileExistsError:
            pass
        except OSError:
            return None
        finally:
            temporary.unlink(missing_ok=True)
    return None
