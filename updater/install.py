"""Unpack, smoke-test and switch: the only module that changes an installed mux.

Everything here runs under the install lock. The order makes ``kill -9`` harmless: the new
version is unpacked and tested under a ``.partial-`` name, renamed into ``versions/``, and
only then does one ``rename`` move the bin-dir link; older versions are renamed to
``.trash-`` before they are deleted. Whatever a killed run leaves is named so that the next
run recognises it as garbage and removes it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .errors import InstallError, VerificationError
from .files import fsync_dir, fsync_tree
from .layout import (
    DOWNLOAD_PREFIX,
    FILES_LIST_NAME,
    LINK_TEMP_PREFIX,
    PARTIAL_MARK,
    TRASH_PREFIX,
    Layout,
    files_list,
)

MAX_MEMBERS = 50_000
MAX_UNPACKED_BYTES = 2 * 1024**3
SMOKE_TEST_TIMEOUT = 30.0
KEEP_VERSIONS = 2


# -- the lock --------------------------------------------------------------------------------


@contextmanager
def install_lock(layout: Layout, *, wait: float | None = None) -> Iterator[None]:
    """One install or update at a time per ``MUX_HOME`` (released by the kernel on kill)."""
    if wait is None:
        wait = float(os.environ.get("MUX_LOCK_TIMEOUT", "10"))
    layout.home.mkdir(parents=True, exist_ok=True)
    fd = os.open(layout.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise InstallError(
                        f"another mux update is running on {layout.home}",
                        hint="wait for it to finish, then retry",
                    ) from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)


def _is_leftover(name: str, markers: tuple[str, ...]) -> bool:
    # "<version>.partial-XXXX" carries its mark inside the name; the others are prefixes.
    return any(name.startswith(m) or (m == PARTIAL_MARK and m in name) for m in markers)


def remove_leftovers(layout: Layout) -> list[str]:
    """Delete what killed runs left behind (call with the lock held)."""
    removed = []
    candidates: list[Path] = []
    probe = ".mux-write-probe-"
    for directory, markers in (
        (layout.versions, (PARTIAL_MARK, TRASH_PREFIX, probe)),
        # install.sh's temporary record and startup-file copies are named likewise, and so
        # is the record's own temporary file (files.atomic_write).
        (layout.home, (DOWNLOAD_PREFIX, ".install.json-", ".install.json.", ".mux-rc-", probe)),
        (layout.bin_dir, (LINK_TEMP_PREFIX, probe)),
    ):
        try:
            entries = list(directory.iterdir())
        except OSError:
            continue
        candidates += [p for p in entries if _is_leftover(p.name, markers)]
    for path in candidates:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(str(path))
    return removed


# -- layer 4: unpacking ------------------------------------------------------------------------


def _archive_error(message: str) -> VerificationError:
    return VerificationError(f"verification failed (archive): {message}")


def _checked_members(archive: tarfile.TarFile, top: str) -> list[tarfile.TarInfo]:
    members = []
    total = 0
    for count, member in enumerate(archive, start=1):
        if count > MAX_MEMBERS:
            raise _archive_error(f"more than {MAX_MEMBERS} members")
        name = member.name
        if any(ord(c) < 32 for c in name) or name.startswith("/") or "\\" in name:
            raise _archive_error(f"unsafe member name {name!r}")
        parts = PurePosixPath(name).parts
        if ".." in parts:
            raise _archive_error(f"member {name!r} escapes the folder")
        if not parts or parts[0] != top:
            raise _archive_error(f"member {name!r} is outside the top folder {top}/")
        if not (member.isfile() or member.isdir() or member.issym()):
            raise _archive_error(f"member {name!r} is not a file, folder or symlink")
        if member.issym():
            # Relative targets without "..", so every link (and every chain of links) stays
            # at or below its own folder, whatever else the archive holds.
            target = PurePosixPath(member.linkname)
            if target.is_absolute() or ".." in target.parts:
                raise _archive_error(f"symlink {name!r} -> {member.linkname} leaves its folder")
        total += max(member.size, 0)
        if total > MAX_UNPACKED_BYTES:
            raise _archive_error(f"unpacks to more than {MAX_UNPACKED_BYTES} bytes")
        members.append(member)
    return members


def unpack(archive_path: Path, destination: Path, *, top: str) -> None:
    """Unpack ``top/`` of the archive into ``destination`` (which must be empty)."""
    try:
        with tarfile.open(archive_path, "r:gz") as archive:
            members = _checked_members(archive, top)
            for member in members:
                stripped = PurePosixPath(*PurePosixPath(member.name).parts[1:])
                member.name = str(stripped) if stripped.parts else "."
            members = [m for m in members if m.name != "."]
            archive.extractall(destination, members=members, filter="data")
    except VerificationError:
        raise
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            raise InstallError(
                f"cannot unpack into {destination}: {exc.strerror}",
                hint="free some disk space, then retry",
            ) from None
        raise _archive_error(f"cannot unpack: {exc}") from None
    executable = destination / "mux"
    if not executable.is_file() or executable.is_symlink():
        raise _archive_error(f"no mux executable at the top of {top}/")
    if not os.access(executable, os.X_OK):
        raise _archive_error("the mux in the archive is not executable")


# -- layer 5: the new build runs ---------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    version: str
    protocol_version: int
    target: str


def reported_build(folder: Path) -> Expected:
    """What ``<folder>/mux version --json`` says it is (run once, with a timeout)."""
    command = [str(folder / "mux"), "version", "--json"]
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            timeout=float(os.environ.get("MUX_SMOKE_TEST_TIMEOUT", SMOKE_TEST_TIMEOUT)),
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise VerificationError(
            f"verification failed (smoke-test): {folder / 'mux'} did not answer "
            "`mux version --json`"
        ) from None
    except OSError as exc:
        raise VerificationError(
            f"verification failed (smoke-test): {folder / 'mux'} does not run here "
            f"({exc.strerror}); wrong architecture?"
        ) from None
    try:
        doc = json.loads(result.stdout)
        return Expected(str(doc["version"]), int(doc["protocol_version"]), str(doc["target"]))
    except (ValueError, KeyError, TypeError, RecursionError):
        raise VerificationError(
            f"verification failed (smoke-test): {folder / 'mux'} exited {result.returncode} "
            "without a valid `version --json` (wrong architecture or a broken build?)"
        ) from None


def smoke_test(folder: Path, expected: Expected) -> None:
    """``<folder>/mux version --json`` must report the release's version, protocol, target."""
    check_build(reported_build(folder), expected)


def check_build(reported: Expected, expected: Expected) -> None:
    if reported != expected:
        raise VerificationError(
            "verification failed (smoke-test): the new mux reports "
            f"{reported.version} / protocol {reported.protocol_version} / {reported.target}, "
            f"expected {expected.version} / protocol {expected.protocol_version} / {expected.target}"
        )


# -- the switch --------------------------------------------------------------------------------


def stage_version(layout: Layout, archive: Path, *, top: str, expected: Expected) -> Path:
    """Unpack, write ``.mux-files``, fsync and smoke-test under a ``.partial-`` name."""
    layout.versions.mkdir(parents=True, exist_ok=True)
    staging = Path(
        tempfile.mkdtemp(dir=layout.versions, prefix=f"{expected.version}{PARTIAL_MARK}")
    )
    try:
        unpack(archive, staging, top=top)
        (staging / FILES_LIST_NAME).write_bytes(files_list(staging))
        smoke_test(staging, expected)
        fsync_tree(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging


def place_version(layout: Layout, staging: Path, version: str) -> Path:
    """Rename the staged folder to ``versions/<version>``, replacing a stale copy."""
    final = layout.version_dir(version)
    if final.exists():
        if layout.active_version() == version:
            shutil.rmtree(staging, ignore_errors=True)
            return final  # already active: never swap files under a running mux
        trash = Path(tempfile.mkdtemp(dir=layout.versions, prefix=TRASH_PREFIX))
        os.rename(final, trash / "old")
        shutil.rmtree(trash, ignore_errors=True)
    os.rename(staging, final)
    fsync_dir(layout.versions)
    return final


def switch_link(layout: Layout, version: str) -> None:
    """Point ``<bin>/mux`` at the version by renaming a new link over the old one."""
    layout.bin_dir.mkdir(parents=True, exist_ok=True)
    target = layout.version_dir(version) / "mux"
    temp = layout.bin_dir / f"{LINK_TEMP_PREFIX}{os.getpid()}-{time.monotonic_ns()}"
    os.symlink(target, temp)
    try:
        os.replace(temp, layout.link)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(layout.bin_dir)


def prune_versions(layout: Layout, keep: list[str]) -> list[str]:
    """Remove installed versions other than ``keep`` (renamed to trash first)."""
    removed = []
    for version in layout.installed_versions():
        if version in keep:
            continue
        trash = Path(tempfile.mkdtemp(dir=layout.versions, prefix=TRASH_PREFIX))
        os.rename(layout.version_dir(version), trash / version)
        shutil.rmtree(trash, ignore_errors=True)
        removed.append(version)
    return removed


def files_sha256(folder: Path) -> str:
    return hashlib.sha256((folder / FILES_LIST_NAME).read_bytes()).hexdigest()
