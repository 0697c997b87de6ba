"""Where the TUF client keeps the metadata it trusts, and how it reads and writes it.

One folder per repository below the user's state dir, ``<state dir>/tuf/<name>-<hash>/``
(the name is the metadata URL made file-safe, the hash tells two URLs apart), created private
(0700). python-tuf keeps there what the specification says a client keeps: every root it
followed (``root_history/<N>.root.json``, and ``root.json`` pointing at the newest) and the
newest timestamp, snapshot, targets and delegated targets it verified (``<role>.json``).

Its storage rules are mux's (:class:`StoredUpdater`):

* each file is written atomically and durably (:func:`updater.files.atomic_write`: a
  temporary file beside it, fsynced, renamed; mode 0600);
* each file is read bounded and only if it is a regular file
  (:func:`updater.files.read_small_file`), never past the cap python-tuf puts on the role;
* one process at a time refreshes a folder (an ``flock`` on it, within ``wait`` seconds), so
  that a server's background check and a sidebar's check never interleave their writes.

What python-tuf persists on a failure (checked by tests/test_tuf_client.py): nothing of the
role that failed. A root that verified is kept even when a later step fails (the next root
must chain from it), and a timestamp (or snapshot) that verified is kept when the next role
fails, as the specification requires: the newer versions are then the floor for rollback
checks. An expired, rolled-back, under-signed or mismatched document is never written.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from urllib import parse

from tuf.ngclient import Updater

from updater.errors import MuxError
from updater.files import NotReadable, atomic_write, read_small_file
from updater.locks import flock_within

TUF_DIR = "tuf"
# The most a trusted metadata file may hold on disk (python-tuf's own cap for targets).
LOCAL_LIMIT = 5_000_000


def metadata_folder(state_dir: str, metadata_url: str) -> str:
    """``<state_dir>/tuf/<name>-<hash>``: the trusted metadata of the repository at
    ``metadata_url`` (not created)."""
    text = metadata_url.rstrip("/")
    readable = re.sub(r"[^A-Za-z0-9.-]+", "_", text.split("://", 1)[-1]).strip("_")[-60:]
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return os.path.join(state_dir, TUF_DIR, f"{readable or 'repository'}-{digest}")


def make_private_folder(path: str) -> None:
    """``path`` and the folders above it that are missing, each created 0700."""
    parent = os.path.dirname(path)
    if parent and not os.path.isdir(parent):
        make_private_folder(parent)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if not os.path.isdir(path):
            raise


@contextmanager
def refreshing(folder: str, *, wait: float) -> Iterator[None]:
    """Hold the folder's lock while its metadata is refreshed (created if missing)."""
    make_private_folder(os.path.join(folder, "root_history"))
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if not flock_within(fd, fcntl.LOCK_EX, wait=wait, interval=0.05):
            raise MuxError(
                f"another mux is refreshing the trusted TUF metadata in {folder}",
                hint="retry in a moment",
            )
        yield
    finally:
        os.close(fd)  # (and with it the lock)


class StoredUpdater(Updater):
    """python-tuf's client workflow with mux's storage rules (the module docstring)."""

    def _load_local_metadata(self, rolename: str) -> bytes:
        path = os.path.join(self._dir, f"{parse.quote(rolename, '')}.json")
        try:
            data = read_small_file(path, LOCAL_LIMIT)
        except NotReadable as exc:
            raise OSError(f"{path}: {exc}") from None
        if data is None:
            raise FileNotFoundError(path)
        return data

    def _persist_file(self, filename: str, data: bytes) -> None:
        atomic_write(filename, data, mode=0o600)
