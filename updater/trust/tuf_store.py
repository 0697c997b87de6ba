"""Where the TUF client keeps the metadata it trusts, and how it reads and writes it.

One folder per repository below the user's state dir, ``<state dir>/tuf/root-<id>/``
(:func:`repository_folder`), the id being the sha256 of the root the client is bootstrapped
from (the canonical JSON of its signed part): the root baked into the build, or the one the
machine policy names, never a root followed since. So every URL of one repository (a second
mirror, ``localhost`` for ``127.0.0.1``, a changed ``--source``) shares one rollback floor, a
root rotated since bootstrap keeps its folder, and repositories with different roots share
nothing. (Two "repositories" made from one root are one to TUF: the same keys sign both.)
The folder is created private (0700) and used only when it is this user's. python-tuf keeps
there what the specification says a client keeps: every root it followed
(``root_history/<N>.root.json``, and ``root.json`` pointing at the newest) and the newest
timestamp, snapshot, targets and delegated targets it verified (``<role>.json``).

Its storage rules are mux's (:class:`StoredUpdater`):

* each file is written atomically and durably (:func:`updater.files.atomic_write`: a
  temporary file beside it, fsynced, renamed; mode 0600);
* each file is read bounded, only if it is a regular file and this user's
  (:func:`updater.files.read_small_file`), never past the cap python-tuf puts on the role
  (python-tuf reads ``root_history`` itself: nobody else can write into this user's 0700
  folder, and each root there must still chain from the bootstrap root);
* one process at a time refreshes a folder (an ``flock`` on it, within ``wait`` seconds), so
  that a server's background check and a sidebar's check never interleave their writes.

State is never lost to a change of layout (:func:`carry_over`): earlier mux kept one folder
per metadata URL (``<URL made file-safe>-<sha256 of the URL, 12 hex>``). While a
repository's folder holds no trusted timestamp, the folder beside it that holds the same root
in its ``root_history`` (bootstrapped from it, or having followed it) and the highest floor
(root version, then timestamp, then snapshot) is copied in, under both folders' locks. So the
first run of this layout keeps the highest floor any URL of the repository reached, and so
does a client bootstrapped from a later root of a repository it already follows (a policy's
root replaced by a newer one). What is copied is verified again when python-tuf loads it, as
any trusted file is. (The reverse, a client bootstrapped from an earlier root than any folder
holds, starts alone: nothing on disk ties that root to theirs until it has followed them.
Builds all bake the repository's root v1.)

What python-tuf persists on a failure (checked by tests/test_tuf_client.py): nothing of the
role that failed. A root that verified is kept even when a later step fails (the next root
must chain from it), and a timestamp (or snapshot) that verified is kept when the next role
fails, as the specification requires: the newer versions are then the floor for rollback
checks. An expired, rolled-back, under-signed or mismatched document is never written.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from urllib import parse

from tuf.api.metadata import Metadata, Root, Snapshot, Timestamp
from tuf.ngclient import Updater

from updater.errors import MuxError
from updater.files import NotReadable, atomic_write, owned_by_this_user, read_small_file
from updater.locks import flock_within
from updater.trust.tuf_targets import ROOT_LIMIT

TUF_DIR = "tuf"
ROOT_HISTORY = "root_history"
# The most a trusted metadata file may hold on disk (python-tuf's own cap for targets).
LOCAL_LIMIT = 5_000_000
# What a trusted role's file is named (``release-workflow.json``; python-tuf quotes the rest).
_ROLE_FILE = re.compile(r"[A-Za-z0-9._%-]{1,200}\.json")
_ROOT_FILE = re.compile(r"([1-9][0-9]{0,9})\.root\.json")


def root_identity(data: bytes) -> tuple[int, str] | None:
    """A root's version and the sha256 of its signed part (canonical JSON, so neither its
    layout nor its signatures matter); None when ``data`` is no root metadata."""
    try:
        md = Metadata.from_bytes(data)
    except Exception:  # python-tuf refuses it, with its own message, when it bootstraps
        return None
    if not isinstance(md.signed, Root):
        return None
    return md.signed.version, hashlib.sha256(md.signed_bytes).hexdigest()


def repository_folder(state_dir: str, root: bytes) -> str:
    """``<state_dir>/tuf/root-<id>``: the trusted metadata of the repository a client
    bootstrapped from ``root`` reads, at whatever URL (not created)."""
    identity = root_identity(root)
    digest = identity[1] if identity else hashlib.sha256(root).hexdigest()
    return os.path.join(state_dir, TUF_DIR, f"root-{digest}")


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
def _locked(folder: str, operation: int, *, wait: float) -> Iterator[None]:
    """``folder``'s ``flock`` (``operation``), within ``wait`` seconds; the folder must be
    this user's (one another user made, or could write into, is not used)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid():
            raise MuxError(
                f"the trusted TUF metadata in {folder} belongs to another user "
                f"(uid {info.st_uid}): not used",
                hint="remove that folder (it is in mux's state dir)",
            )
        if info.st_mode & 0o077:
            os.fchmod(fd, 0o700)
        if not flock_within(fd, operation, wait=wait, interval=0.05):
            raise MuxError(
                f"another mux is refreshing the trusted TUF metadata in {folder}",
                hint="retry in a moment",
            )
        yield
    finally:
        os.close(fd)  # (and with it the lock)


@contextmanager
def refreshing(folder: str, *, wait: float) -> Iterator[None]:
    """Hold the folder's lock while its metadata is refreshed (created if missing)."""
    make_private_folder(os.path.join(folder, ROOT_HISTORY))
    with _locked(folder, fcntl.LOCK_EX, wait=wait):
        yield


def _read_trusted(path: str, limit: int = LOCAL_LIMIT) -> bytes | None:
    """A file of the store: bounded, a regular file (no link followed) and this user's;
    None when it is missing or is none of these."""
    try:
        return read_small_file(path, limit, inspect=owned_by_this_user, follow_links=False)
    except NotReadable:
        return None


def _version(path: str) -> int:
    """The version a trusted file of the store says it has (-1: none). Not verified: it only
    orders folders whose files python-tuf verifies again when it loads them."""
    data = _read_trusted(path)
    try:
        version = json.loads(data or b"null")["signed"]["version"]
    except (ValueError, TypeError, KeyError):
        return -1
    return version if isinstance(version, int) else -1


def _floor(folder: str) -> tuple[int, int, int]:
    """(newest root, timestamp, snapshot version) of a folder of the store."""
    try:
        names = os.listdir(os.path.join(folder, ROOT_HISTORY))
    except OSError:
        names = []
    roots = [int(m.group(1)) for m in map(_ROOT_FILE.fullmatch, names) if m]
    return (
        max(roots, default=-1),
        _version(os.path.join(folder, f"{Timestamp.type}.json")),
        _version(os.path.join(folder, f"{Snapshot.type}.json")),
    )


def carry_over(folder: str, root: bytes, *, wait: float) -> str | None:
    """Copy into ``folder`` (locked by the caller) the trusted metadata of the repository
    ``root`` starts, from the folder beside it with the highest floor (the module
    docstring), unless ``folder`` already holds a trusted timestamp; the folder copied."""
    if os.path.lexists(os.path.join(folder, f"{Timestamp.type}.json")):
        return None
    identity = root_identity(root)
    if identity is None:
        return None
    held = os.path.join(ROOT_HISTORY, f"{identity[0]}.root.json")
    best: tuple[tuple[int, int, int], str] | None = None
    parent = os.path.dirname(folder)
    with os.scandir(parent) as entries:
        for entry in entries:
            if entry.path == folder or not entry.is_dir(follow_symlinks=False):
                continue
            if entry.stat(follow_symlinks=False).st_uid != os.geteuid():
                continue
            data = _read_trusted(os.path.join(entry.path, held), ROOT_LIMIT)
            if data is None or root_identity(data) != identity:
                continue
            floor = _floor(entry.path)
            if best is None or floor > best[0]:
                best = (floor, entry.path)
    if best is None:
        return None
    with _locked(best[1], fcntl.LOCK_SH, wait=wait):
        _copy_trusted(best[1], folder)
    return best[1]


def _copy_trusted(source: str, folder: str) -> None:
    """Every root of ``source``'s history, then its roles, the timestamp last (the mark that
    the copy is whole: :func:`carry_over` copies again while it is missing)."""
    names = sorted(os.listdir(os.path.join(source, ROOT_HISTORY)))
    copies = [os.path.join(ROOT_HISTORY, n) for n in names if _ROOT_FILE.fullmatch(n)]
    roles = [n for n in os.listdir(source) if _ROLE_FILE.fullmatch(n) and n != "root.json"]
    stamp = f"{Timestamp.type}.json"
    copies += sorted(n for n in roles if n != stamp) + [n for n in roles if n == stamp]
    for name in copies:
        data = _read_trusted(os.path.join(source, name))
        if data is not None:
            atomic_write(os.path.join(folder, name), data, mode=0o600)


class StoredUpdater(Updater):
    """python-tuf's client workflow with mux's storage rules (the module docstring)."""

    def _load_local_metadata(self, rolename: str) -> bytes:
        path = os.path.join(self._dir, f"{parse.quote(rolename, '')}.json")
        try:
            data = read_small_file(path, LOCAL_LIMIT, inspect=owned_by_this_user)
        except NotReadable as exc:
            raise OSError(f"{path}: {exc}") from None
        if data is None:
            raise FileNotFoundError(path)
        return data

    def _persist_file(self, filename: str, data: bytes) -> None:
        atomic_write(filename, data, mode=0o600)
