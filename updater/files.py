"""Durable file writes and file digests (stdlib only).

A file that must never be seen half-written (``install.json``, the check cache, the feed
index, ``pins.toml``) is written to a temporary file in the same folder, flushed and fsynced,
then renamed over its target: a reader sees the old bytes or the new ones, never a mix, and
a crash leaves at most a ``.<name>.XXXX.tmp`` file, which the next writer's owner tidies.
``tempfile`` and ``hashlib`` are imported on first use: the cached check only reads.
"""

from __future__ import annotations

import os
from pathlib import Path

_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB blocks."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def write_temp_beside(path: Path, data: bytes, *, mode: int | None = None) -> Path:
    """``data`` in a new fsynced ``.<name>.XXXX.tmp`` file next to ``path``; returns it.

    ``mode`` sets its permissions (default: ``tempfile``'s private 0600).
    """
    import tempfile

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


def atomic_write(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` in one rename (see the module docstring)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = write_temp_beside(path, data, mode=mode)
    try:
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def fsync_dir(path: Path) -> None:
    """Make the renames and links in a folder durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every regular file and folder below ``root`` (symlinks are skipped)."""
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            file_path = os.path.join(dirpath, name)
            if os.path.islink(file_path):
                continue
            fd = os.open(file_path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))
