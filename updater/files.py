"""Durable file writes, file digests and the one bounded read of a small file (stdlib only).

A file that must never be seen half-written (``install.json``, the check cache, the feed
index, ``pins.toml``) is written to a temporary file in the same folder, flushed and fsynced,
then renamed over its target: a reader sees the old bytes or the new ones, never a mix, and
a crash leaves at most a ``.<name>.XXXX.tmp`` file, which the next writer's owner tidies.

A small file that others may put in mux's way (the machine policy, a packager's marker,
state files, a local source's files, a TUF root) is read by :func:`read_small_file`: never
blocking, regular files only, bounded; a larger one is streamed from
:func:`open_regular_file`, which opens it the same way.

``pathlib``, ``tempfile`` and ``hashlib`` are imported on first use: the cached check only
reads, and imports this module for its reads.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import BinaryIO, TypeAlias

    StrPath: TypeAlias = str | os.PathLike[str]

_CHUNK = 1 << 20


def sha256_file(path: StrPath) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB blocks."""
    # deferred: this module is on a fast path (docs/build.md)
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def private_folders(path: StrPath) -> None:
    """Create the folder ``path`` and every missing folder above it with mode 0700 (the XDG
    base directory rule, which ``os.makedirs`` applies only to the last one)."""
    missing = []
    folder = os.path.abspath(path)
    while not os.path.isdir(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            if not os.path.isdir(folder):
                raise


def write_temp_beside(path: StrPath, data: bytes, *, mode: int | None = None) -> Path:
    """``data`` in a new fsynced ``.<name>.XXXX.tmp`` file next to ``path``; returns it.

    ``mode`` sets its permissions (default: ``tempfile``'s private 0600).
    """
    # deferred: this module is on a fast path (docs/build.md)
    import tempfile
    from pathlib import Path

    path = Path(path)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return Path(temporary)


def atomic_write(
    path: StrPath, data: bytes, *, mode: int | None = None, private: bool = False
) -> None:
    """Replace ``path`` with ``data`` in one rename (see the module docstring); ``private``:
    a state file of the user's, whose missing folders are made 0700 (the file itself is
    0600 unless ``mode`` says otherwise)."""
    # deferred: this module is on a fast path (docs/build.md)
    from pathlib import Path

    path = Path(path)
    if private:
        private_folders(path.parent)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
    temporary = write_temp_beside(path, data, mode=mode)
    try:
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def fsync_dir(path: StrPath) -> None:
    """Make the renames and links in a folder durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: StrPath) -> tuple[int, int]:
    """Make one file's bytes durable; returns the (device, inode) that was flushed."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        info = os.fstat(fd)
    finally:
        os.close(fd)
    return info.st_dev, info.st_ino


class Flush:
    """Makes files durable in another thread, in the order they are handed over.

    An install hands over each file as soon as the unpacking has written it and set its mode
    and times (:meth:`file`), so the disk writes it out while the rest unpacks; then the whole
    tree (:meth:`tree`): every folder, and every file not flushed before (its entries, anything
    the unpacking did not announce), once the tree is complete. :meth:`join` waits for all of
    it and raises the first failure; after one, the rest is skipped.

    A file or folder gone by its turn is skipped: nothing of it is left to write. That is a
    tree thrown away while it was being flushed (a delta that failed its attestation, whose
    staging folder is emptied for the full archive). A file counts as flushed by the inode
    that was flushed, not by its path: one written later at the same path is flushed again.
    """

    def __init__(self) -> None:
        # deferred: this module is on a fast path (docs/build.md)
        import queue
        import threading

        self._work: queue.SimpleQueue[tuple[str, str] | None] = queue.SimpleQueue()
        self._flushed: dict[str, tuple[int, int]] = {}  # path: (device, inode) flushed there
        self._failed: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name="mux-fsync", daemon=True)
        self._thread.start()

    def file(self, path: str) -> None:
        self._work.put(("file", path))

    def tree(self, root: StrPath) -> None:
        self._work.put(("tree", os.fspath(root)))

    def join(self) -> None:
        self._work.put(None)
        self._thread.join()
        if self._failed:
            raise self._failed[0]

    def _run(self) -> None:
        while (item := self._work.get()) is not None:
            if self._failed:
                continue
            kind, path = item
            try:
                if kind == "file":
                    self._flush_file(path)
                else:
                    self._flush_tree(path)
            except BaseException as exc:  # re-raised by join(), in the caller's thread
                self._failed.append(exc)

    def _flush_file(self, path: str) -> None:
        try:
            self._flushed[path] = fsync_file(path)
        except FileNotFoundError:
            pass  # gone by its turn: nothing of it is left to write

    def _flush_tree(self, root: str) -> None:
        for dirpath, _dirnames, filenames in os.walk(root):
            for name in filenames:
                file_path = os.path.join(dirpath, name)
                try:
                    info = os.lstat(file_path)
                except FileNotFoundError:
                    continue
                if stat.S_ISLNK(info.st_mode):
                    continue
                if self._flushed.get(file_path) != (info.st_dev, info.st_ino):
                    self._flush_file(file_path)
            try:
                fsync_dir(dirpath)
            except FileNotFoundError:
                pass  # the folder went with the tree it was in


class NotReadable(Exception):
    """A small file is there but cannot be taken for what it should be; ``str()`` says why."""


class NotARegularFile(NotReadable):
    """What is there is no regular file: a folder, a FIFO, a device, a socket."""


class TooLarge(NotReadable):
    """The file is longer than its reader takes."""


STATE_FILE_LIMIT = 1 << 20  # a state file mux writes (a record, a cache, a counter) is far smaller


def owned_by_this_user(info: os.stat_result) -> None:
    """For :func:`read_small_file`'s ``inspect``: a state file of this user's must be this
    user's (one that another user made could say anything: a cached answer, a rate limit)."""
    if info.st_uid != os.geteuid():
        raise NotReadable(f"it belongs to another user (uid {info.st_uid})")


def read_small_file(
    path: str,
    limit: int,
    *,
    inspect: Callable[[os.stat_result], None] | None = None,
    follow_links: bool = True,
) -> bytes | None:
    """The bytes of the regular file at ``path``, at most ``limit`` of them; None when nothing
    is there (a link to nothing included: the caller may ask ``os.path.lexists``).

    Opened without blocking, so a FIFO cannot hang the reader, and judged by what was opened,
    never by a name that may change between a check and the read: anything but a regular
    file, or one longer than ``limit``, raises :class:`NotReadable`. ``inspect`` sees the
    opened file's status before a byte is read (the machine policy's owner rules).
    ``follow_links=False``: a symbolic link at ``path`` itself is not followed (``O_NOFOLLOW``)
    and raises :class:`NotReadable`.
    """
    try:
        fd, info = _open_regular(path, follow_links=follow_links)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if inspect is not None:
            inspect(info)
        try:
            raw = handle.read(limit + 1)
        except OSError as exc:
            raise NotReadable(exc.strerror or str(exc)) from None
    if len(raw) > limit:
        raise TooLarge(f"it is larger than {limit} bytes")
    return raw


def open_regular_file(path: StrPath) -> BinaryIO:
    """``path`` open for reading, opened as :func:`read_small_file` opens a file (without
    blocking, judged by what was opened), for a reader that streams a large one.

    ``FileNotFoundError`` when nothing is there; :class:`NotARegularFile` for anything but a
    regular file; :class:`NotReadable` when it cannot be opened."""
    fd, _ = _open_regular(os.fspath(path), follow_links=True)
    return os.fdopen(fd, "rb")


def _open_regular(path: str, *, follow_links: bool) -> tuple[int, os.stat_result]:
    """A descriptor of the regular file at ``path`` and its status (the caller closes it)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    if not follow_links:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if not follow_links and _is_link(path):  # ELOOP, whose number differs by system
            raise NotReadable("it is a symbolic link") from None
        raise NotReadable(exc.strerror or str(exc)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # judged before fdopen, which refuses a folder itself
            raise NotARegularFile("it is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def _is_link(path: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False
