"""Layer 4's alternative: a release's tree built from a kept version's files and a delta.

:func:`apply_delta` writes into the empty staging folder exactly the tree the release's signed
file list describes (:mod:`updater.formats.delta`), by the rules of :mod:`updater.trust.unpack`:
every path inside the folder, no link leaving it, no devices, sizes capped. Each file is a
kept file that did not change (linked when the file system allows it, else copied) or the
output of a BSDIFF40 patch, applied as a stream (:class:`_Patch`): memory stays at a few MiB
whatever the files' sizes, and no output grows past the size the signed list gives it.

Every kept file is checked against the digest its version recorded (``.mux-files``, whose own
digest is in ``install.json``) before it is used, and every file written against the signed
list; then the tree must hold nothing else. Any failure raises :class:`DeltaUnusable`, one
line saying why: the caller throws the staging tree away and installs the full archive.
"""

from __future__ import annotations

import bz2
import errno
import hashlib
import os
import stat
from typing import TYPE_CHECKING, BinaryIO

from bsdiff4 import core as bsdiff_core

from updater.errors import InstallError, MuxError, ParseError
from updater.formats.delta import (
    BSDIFF_HEADER_SIZE,
    DELTA_PREFIX_SIZE,
    DIR,
    FILE,
    LINK,
    DeltaEntry,
    DeltaHeader,
    FileList,
    TreeEntry,
    control_entry,
    header_length,
    parse_bsdiff_header,
    parse_delta_header,
)
from updater.install.layout import unpacked_file

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from updater.install.layout import UnpackedFiles

_WINDOW = 1 << 20  # output made per step of a patch: what one step holds in memory
_READ = 64 * 1024  # compressed bytes read from the delta per step
_CONTROL = 24  # bytes per bsdiff control entry
_IDLE_ENTRIES = 16  # control entries that make no byte: bsdiff writes at most one


class DeltaUnusable(MuxError):
    """The delta cannot build this release here; ``message`` says why (the full archive is
    installed instead). ``downloaded``: the bytes fetched for it so far; ``tried``: whether
    it went as far as fetching (else the release simply has none to offer here);
    ``asked``: whether the attestation's worker was asked already."""

    def __init__(
        self, message: str, downloaded: int = 0, *, tried: bool = True, asked: bool = False
    ) -> None:
        super().__init__(message)
        self.downloaded = downloaded
        self.tried = tried
        self.asked_worker = asked


def _broken(message: str) -> DeltaUnusable:
    return DeltaUnusable(message)


def apply_delta(
    delta: BinaryIO,
    delta_size: int,
    file_list: FileList,
    *,
    from_version: str,
    base_dir: str,
    base_files: Mapping[str, str],
    destination: str,
    on_file: Callable[[str], None] | None = None,
) -> UnpackedFiles:
    """Build the tree of ``file_list`` in the empty folder ``destination`` from the delta
    (``delta_size`` bytes, digest already checked) and the files of ``base_dir``, the kept
    version ``from_version`` whose recorded digests are ``base_files``.

    Returns each written file's digest with what ``lstat`` said of it (as
    :func:`updater.trust.unpack.unpack` does). ``on_file`` is given each file once it is
    complete (an install starts making it durable then).
    """
    try:
        header = _read_header(delta, delta_size)
    except ParseError as exc:
        raise _broken(exc.message) from None
    if (header.from_version, header.version, header.target) != (
        from_version,
        file_list.version,
        file_list.target,
    ):
        raise _broken(
            f"it is a delta from {header.from_version} to {header.version} for "
            f"{header.target}, not from {from_version} to {file_list.version}"
        )
    files = file_list.files
    made = header.by_path()
    if set(made) != set(files):
        extra = sorted(set(made) - set(files))[:1] or sorted(set(files) - set(made))[:1]
        raise _broken(f"it does not make exactly the files of the file list ({extra[0]!r})")
    written: dict[str, str] = {}
    try:
        for entry in sorted(
            (e for e in file_list.entries if e.kind == DIR), key=lambda e: e.path.count("/")
        ):
            os.mkdir(os.path.join(destination, entry.path), 0o755)
        patches_start = DELTA_PREFIX_SIZE + (delta_size - DELTA_PREFIX_SIZE - header.patch_area)
        for step in header.entries:
            wanted = files[step.path]
            path = os.path.join(destination, step.path)
            if step.patched:
                digest = _patched(delta, patches_start, step, wanted, base_dir, base_files, path)
                _finish(path, wanted.mode, file_list.mtime)
            else:
                digest = _kept(step, wanted, base_dir, base_files, path, file_list.mtime)
            if digest != wanted.sha256:
                raise _broken(f"{step.path} came out with sha256 {digest}, not {wanted.sha256}")
            written[step.path] = digest
            if on_file is not None:
                on_file(path)
        for entry in file_list.entries:
            if entry.kind == LINK:
                os.symlink(entry.target, os.path.join(destination, entry.path))
        for entry in sorted(
            (e for e in file_list.entries if e.kind == DIR), key=lambda e: -e.path.count("/")
        ):
            os.utime(os.path.join(destination, entry.path), (file_list.mtime, file_list.mtime))
        _exactly(destination, file_list)
        return {
            path: unpacked_file(os.path.join(destination, path), sha256)
            for path, sha256 in written.items()
        }
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            raise InstallError(
                f"cannot build the new version in {destination}: {exc.strerror}",
                hint="free some disk space, then retry",
            ) from None
        raise _broken(f"cannot build the tree: {exc.strerror or exc}") from None


def _read_header(delta: BinaryIO, size: int) -> DeltaHeader:
    length = header_length(delta.read(DELTA_PREFIX_SIZE))
    raw = delta.read(length)
    if len(raw) != length:
        raise ParseError("the delta is shorter than its header")
    return parse_delta_header(raw, size=size)


def _finish(path: str, mode: int, mtime: int) -> None:
    os.chmod(path, mode)
    os.utime(path, (mtime, mtime))


def _open_kept(base_dir: str, step: DeltaEntry, base_files: Mapping[str, str]) -> int:
    """The kept file ``step`` starts from, opened (never through a link), after checking
    that its version recorded it with the digest the delta was made from."""
    assert step.source is not None
    recorded = base_files.get(step.source)
    if recorded is None:
        raise _broken(f"the kept version has no {step.source} on record")
    if recorded != step.source_sha256:
        raise _broken(f"the kept {step.source} is not the file the delta was made from")
    try:
        fd = os.open(
            os.path.join(base_dir, step.source), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        )
    except OSError as exc:
        raise _broken(f"cannot read the kept {step.source}: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size != step.source_size:
        os.close(fd)
        raise _broken(f"the kept {step.source} changed since it was installed")
    return fd


def _hash_fd(fd: int, size: int) -> str:
    digest = hashlib.sha256()
    offset = 0
    while offset < size:
        block = os.pread(fd, min(_WINDOW, size - offset), offset)
        if not block:
            break
        digest.update(block)
        offset += len(block)
    return digest.hexdigest()


def _kept(
    step: DeltaEntry,
    wanted: TreeEntry,
    base_dir: str,
    base_files: Mapping[str, str],
    path: str,
    mtime: int,
) -> str:
    """An unchanged file: linked to the kept one when the file system allows it and the
    mode agrees (nothing of the kept file changes), else copied; hashed as it now is."""
    if step.source_sha256 != wanted.sha256 or step.source_size != wanted.size:
        raise _broken(f"the delta copies {step.path} from a file the file list does not name")
    fd = _open_kept(base_dir, step, base_files)
    try:
        info = os.fstat(fd)
        linked = False
        if stat.S_IMODE(info.st_mode) == wanted.mode:
            try:
                os.link(os.path.join(base_dir, str(step.source)), path, follow_symlinks=False)
                linked = True
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise
        if linked:
            # The same inode as the one checked open: what is hashed is what is installed.
            now = os.lstat(path)
            if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
                raise _broken(f"the kept {step.source} changed while it was linked")
            return _unchanged(step, _hash_fd(fd, wanted.size))
        digest = hashlib.sha256()
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            offset = 0
            while offset < wanted.size:
                block = os.pread(fd, min(_WINDOW, wanted.size - offset), offset)
                if not block:
                    raise _broken(f"the kept {step.source} is shorter than recorded")
                digest.update(block)
                os.write(out, block)
                offset += len(block)
        finally:
            os.close(out)
        _finish(path, wanted.mode, mtime)
        return _unchanged(step, digest.hexdigest())
    finally:
        os.close(fd)


def _unchanged(step: DeltaEntry, sha256: str) -> str:
    """``sha256``, the digest the kept file ``step`` copies has now, once it is the one
    recorded (and the delta made from): else the kept file changed on disk."""
    if sha256 != step.source_sha256:
        raise _broken(f"the kept {step.source} changed since it was installed")
    return sha256


def _patched(
    delta: BinaryIO,
    patches_start: int,
    step: DeltaEntry,
    wanted: TreeEntry,
    base_dir: str,
    base_files: Mapping[str, str],
    path: str,
) -> str:
    """A file made by a patch, from a kept file checked first (or from nothing)."""
    fd = -1
    try:
        if step.source is not None:
            fd = _open_kept(base_dir, step, base_files)
            if _hash_fd(fd, step.source_size) != step.source_sha256:
                raise _broken(f"the kept {step.source} changed since it was installed")
        out = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        with os.fdopen(out, "wb") as target:
            patch = _Patch(delta, patches_start + step.offset, step.length, step.path)
            return patch.apply(fd, step.source_size, target, wanted.size)
    finally:
        if fd >= 0:
            os.close(fd)


class _Block:
    """One bzip2 stream of a patch, decompressed on demand and never past what is asked."""

    def __init__(self, delta: BinaryIO, start: int, length: int, what: str) -> None:
        self._delta, self._position, self._left = delta, start, length
        self._inflater = bz2.BZ2Decompressor()
        self._what = what

    def _input(self) -> bytes:
        if not self._left:
            return b""
        self._delta.seek(self._position)
        data = self._delta.read(min(_READ, self._left))
        if not data:
            raise _broken(f"{self._what} is cut short")
        self._position += len(data)
        self._left -= len(data)
        return data

    def read(self, size: int, *, exact: bool = True) -> bytes:
        """``size`` bytes (fewer only at the end when not ``exact``)."""
        parts: list[bytes] = []
        wanted = size
        try:
            while wanted and not self._inflater.eof:
                data = b"" if not self._inflater.needs_input else self._input()
                if self._inflater.needs_input and not data:
                    raise _broken(f"{self._what} ends before its end marker")
                out = self._inflater.decompress(data, max_length=wanted)
                parts.append(out)
                wanted -= len(out)
        except (OSError, EOFError, ValueError):
            raise _broken(f"{self._what} is corrupt") from None
        if wanted and exact:
            raise _broken(f"{self._what} ends early")
        return b"".join(parts)

    def end(self) -> None:
        """Nothing may be left: the stream at its end marker, every compressed byte used."""
        if self.read(1, exact=False) or self._inflater.unused_data or self._left:
            raise _broken(f"{self._what} holds more than the patch uses")


class _Patch:
    """A BSDIFF40 patch applied as a stream: the control entries, diff and extra bytes come
    a window at a time, each window's sum with the old bytes is bsdiff4's own (its C core,
    given exactly that window), and the output is capped at the size the file list gives."""

    def __init__(self, delta: BinaryIO, start: int, length: int, path: str) -> None:
        self._delta, self._start, self._length = delta, start, length
        self._what = f"the patch of {path}"

    def apply(self, fd: int, old_size: int, out: BinaryIO, size: int) -> str:
        self._delta.seek(self._start)
        try:
            control_size, diff_size, new_size = parse_bsdiff_header(
                self._delta.read(BSDIFF_HEADER_SIZE), what=self._what
            )
        except ParseError as exc:
            raise _broken(exc.message) from None
        if new_size != size:
            raise _broken(f"{self._what} makes {new_size} bytes, the file list says {size}")
        if BSDIFF_HEADER_SIZE + control_size + diff_size > self._length:
            raise _broken(f"{self._what} is shorter than its header says")
        first = self._start + BSDIFF_HEADER_SIZE
        control = _Block(self._delta, first, control_size, f"{self._what} (control)")
        diff = _Block(self._delta, first + control_size, diff_size, f"{self._what} (diff)")
        extra_start = first + control_size + diff_size
        extra = _Block(
            self._delta,
            extra_start,
            self._start + self._length - extra_start,
            f"{self._what} (extra)",
        )
        digest = hashlib.sha256()
        new_position = old_position = 0
        idle = 0
        while True:
            raw = control.read(_CONTROL, exact=False)
            if not raw:
                break
            if len(raw) != _CONTROL:
                raise _broken(f"{self._what} has a cut control entry")
            add, copy, seek = control_entry(raw)
            if add < 0 or copy < 0 or new_position + add + copy > new_size:
                raise _broken(f"{self._what} writes outside its {new_size} bytes")
            if add + copy == 0:
                idle += 1
                if idle > _IDLE_ENTRIES:
                    raise _broken(f"{self._what} has control entries that make nothing")
            while add:
                step = min(add, _WINDOW)
                block = self._sum(diff.read(step), fd, old_position, old_size)
                out.write(block)
                digest.update(block)
                old_position += step
                new_position += step
                add -= step
            while copy:
                step = min(copy, _WINDOW)
                block = extra.read(step)
                out.write(block)
                digest.update(block)
                new_position += step
                copy -= step
            old_position += seek
        if new_position != new_size:
            raise _broken(f"{self._what} makes {new_position} bytes, not {new_size}")
        diff.end()
        extra.end()
        return digest.hexdigest()

    def _sum(self, diff: bytes, fd: int, position: int, old_size: int) -> bytes:
        """``diff`` added bytewise to the old bytes at ``position`` (none outside the old
        file: bsdiff's rule), by bsdiff4's core on exactly this window."""
        low = min(max(position, 0), old_size)
        high = min(max(position + len(diff), 0), old_size)
        old = os.pread(fd, high - low, low) if high > low else b""
        if len(old) != high - low:
            raise _broken(f"{self._what}: the kept file changed while it was read")
        control = _entry(0, 0, position - low) + _entry(len(diff), 0, 0)
        try:
            return bytes(bsdiff_core.patch(old, len(diff), control, diff, b""))
        except (ValueError, TypeError, MemoryError) as exc:
            raise _broken(f"{self._what} does not apply: {exc}") from None


def _entry(add: int, copy: int, seek: int) -> bytes:
    return b"".join(bsdiff_core.encode_int64(n) for n in (add, copy, seek))


def _exactly(destination: str, file_list: FileList) -> None:
    """The tree holds what the list names, each of its kind, and nothing else."""
    expected = {e.path: e.kind for e in file_list.entries}
    found: dict[str, str] = {}
    for directory, dirnames, filenames in os.walk(destination):
        for name in [*dirnames, *filenames]:
            full = os.path.join(directory, name)
            relative = os.path.relpath(full, destination)
            mode = os.lstat(full).st_mode
            if stat.S_ISLNK(mode):
                found[relative] = LINK
            elif stat.S_ISDIR(mode):
                found[relative] = DIR
            elif stat.S_ISREG(mode):
                found[relative] = FILE
            else:
                found[relative] = "other"
    if found != expected:
        odd = sorted(set(found.items()) ^ set(expected.items()))[:1]
        raise _broken(f"the tree built does not match the file list ({odd[0][0]!r})")
