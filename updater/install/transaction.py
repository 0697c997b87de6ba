"""Every change to ``MUX_HOME``: lock, leftovers, stage, place, record, switch, settle, rollback.

Nothing else writes there (:mod:`updater.install.layout` only reads). Everything runs under the
install lock. The order makes ``kill -9`` harmless: a new version is unpacked, tested and
fsynced under a ``versions/<version>.partial-`` name, renamed into ``versions/``, recorded in
``install.json``, and only then does one ``rename`` move the bin-dir link; older versions are
renamed to ``.trash-`` before they are deleted. Whatever a killed run leaves is named so that
the next run recognises it as garbage and removes it, and :func:`updater.core.retention.settle` makes a
record that a kill left behind agree with the link again.

Settling never removes a version a running mux uses. Every mux process holds a shared lock on
its version's ``.mux-files`` for its whole life (:mod:`updater.install.inuse`); a version is removed
only under its exclusive lock, taken without waiting and kept until the folder is renamed
away. Builds that take no lock are found by their servers' status lines (read in parallel,
one shared timeout; a silent server is placed by what the OS says of the process behind its
socket) and, on Linux, by the programs of this user's processes.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pwd
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from updater.core.permissions import unwritable
from updater.core.retention import (
    InUseHold,
    KeptVersion,
    ServerHold,
    record_install,
    record_rollback,
    record_staged,
    rollback_choice,
    settle,
    staged_version,
    without_staged,
)
from updater.errors import InstallError, MuxError, VerificationError
from updater.files import (
    Flush,
    atomic_write,
    fsync_dir,
    fsync_file,
    private_folders,
    sha256_file,
)
from updater.formats import models
from updater.install import inuse
from updater.install.layout import (
    FILES_LIST_NAME,
    LINK_TEMP_PREFIX,
    LOCK_NAME,
    PARTIAL_MARK,
    RECORD_NAME,
    TRASH_PREFIX,
    WRITE_PROBE_PREFIX,
    Layout,
    files_list,
    read_record,
    running_version,
    tree_size,
    verify_files,
    version_holds,
    with_sizes,
)
from updater.locks import flock_within, held_by_other_users, lock_holders, process_uid
from updater.net.download import DOWNLOAD_PREFIX
from updater.servers import status as servers

if TYPE_CHECKING:
    from updater.core.verdicts import ServerReport
    from updater.install.layout import UnpackedFiles


@dataclass(frozen=True)
class InstallSettings:
    """How long to wait for the lock and for a build's smoke test, and which servers to ask
    before removing a version (from the Settings)."""

    lock_timeout: float = 10.0
    smoke_test_timeout: float = 30.0
    server_url: str | None = None  # MUX_SERVER_URL: asked besides the runtime dir's servers
    server_timeout: float = 1.0  # one shared deadline for every server's status line


@dataclass(frozen=True)
class Settled:
    """What settling did: the versions removed, the versions kept (with why), and the server
    reports it read to decide (None when nothing was up for removal, so none were asked:
    every server retention asks, :func:`updater.servers.status.retention_reports`)."""

    removed: tuple[str, ...] = ()
    kept: tuple[KeptVersion, ...] = ()
    reports: tuple[ServerReport, ...] | None = None


# -- the lock and what killed runs left --------------------------------------------------------


@contextmanager
def install_lock(layout: Layout, *, wait: float) -> Iterator[None]:
    """One install or update at a time per ``MUX_HOME`` (released by the kernel on kill).

    ``flock`` works on any descriptor, so whoever can open the lock file can hold it: a
    ``MUX_HOME`` mux creates is 0700 and its lock file 0600 (opened without following a
    link), and a lock file of this user's that others may read (an older mux's, 0644) is
    made 0600 here. A lock only other users hold (a descriptor they opened before) is said
    at once, with who holds it, rather than waited for.
    """
    private_folders(layout.home)
    try:
        fd = os.open(layout.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise InstallError(
            f"cannot open the lock file {layout.lock_path}: {exc.strerror or exc}",
            hint=f"it must be a regular file of yours (remove what is there: {LOCK_NAME} "
            "holds nothing else)",
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InstallError(f"the lock file {layout.lock_path} is not a regular file")
        if info.st_uid == os.geteuid() and info.st_mode & 0o077:
            os.fchmod(fd, 0o600)  # an older mux's or install.sh's: nobody else may hold it
        if not flock_within(fd, fcntl.LOCK_EX, wait=wait, interval=0.1, unless=held_by_other_users):
            raise _lock_busy(layout, fd)
        yield
    finally:
        os.close(fd)


def _lock_busy(layout: Layout, fd: int) -> InstallError:
    holders = lock_holders(fd)
    others = [(pid, process_uid(pid)) for pid in holders]
    if others and all(uid not in (None, 0, os.geteuid()) for _, uid in others):
        named = ", ".join(f"pid {pid} (uid {uid})" for pid, uid in others)
        return InstallError(
            f"{layout.lock_path} is held by another user's process ({named}), which opened it "
            "before mux made it private",
            hint="that is no mux update of yours: end that process (or have root end it), "
            "then retry",
        )
    return InstallError(
        f"another mux update is running on {layout.home}",
        hint="wait for it to finish, then retry",
    )


def _is_leftover(name: str, markers: tuple[str, ...]) -> bool:
    # "<version>.partial-XXXX" carries its mark inside the name; the others are prefixes.
    return any(name.startswith(m) or (m == PARTIAL_MARK and m in name) for m in markers)


def remove_leftovers(layout: Layout) -> list[str]:
    """Delete what killed runs left behind (call with the lock held)."""
    removed = []
    candidates: list[Path] = []
    for directory, markers in (
        (layout.versions, (PARTIAL_MARK, TRASH_PREFIX, WRITE_PROBE_PREFIX)),
        # install.sh's temporary record and startup-file copies are named likewise, and so
        # is the record's own temporary file (files.atomic_write).
        (
            layout.home,
            (DOWNLOAD_PREFIX, ".install.json-", ".install.json.", ".mux-rc-", WRITE_PROBE_PREFIX),
        ),
        (layout.bin_dir, (LINK_TEMP_PREFIX, WRITE_PROBE_PREFIX)),
    ):
        try:
            entries = list(Path(directory).iterdir())
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


def ensure_writable(directory: str | Path) -> None:
    """Fail before downloading anything when a directory we must change is not writable.

    A real probe rather than ``os.access``: root passes every permission check, yet a
    read-only file system still says no.
    """
    probe = Path(directory)
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    try:
        fd, name = tempfile.mkstemp(dir=probe, prefix=WRITE_PROBE_PREFIX)
    except OSError as exc:
        if exc.errno == errno.EROFS:
            raise InstallError(
                f"cannot write {probe}: it is on a read-only file system",
                hint="reinstall into a writable directory (MUX_HOME / MUX_INSTALL_DIR) with install.sh",
            ) from None
        try:
            info = probe.stat()
        except OSError:
            info = None
        try:
            owner = pwd.getpwuid(info.st_uid).pw_name if info is not None else "another user"
        except (KeyError, ImportError):
            owner = "another user"
        message, hint = unwritable(
            str(probe),
            owner=owner,
            yours=info is not None and info.st_uid == os.geteuid(),
            mode=info.st_mode if info is not None else 0,
        )
        raise InstallError(message, hint=hint) from None
    os.close(fd)
    Path(name).unlink(missing_ok=True)  # a concurrent run's tidy may have removed it already


def _write_error(directory: str | Path, exc: OSError) -> InstallError:
    return InstallError(
        f"cannot write {directory}: {exc.strerror or exc}; the installed mux is unchanged",
        hint="free some disk space or fix the permissions, then retry",
    )


# -- the record, the versions and the link -----------------------------------------------------


def write_record(layout: Layout, record: dict[str, Any]) -> None:
    text = json.dumps(record, indent=2, sort_keys=True) + "\n"
    atomic_write(layout.record_path, text.encode(), private=True)


def _settle(layout: Layout, settings: InstallSettings, *, prune: bool = True) -> Settled:
    """Apply :func:`settle` to this install (lock held); ``prune=False`` only makes the
    record agree with the link.

    What is up for removal is checked only then, last: the versions running mux processes
    hold (their lock), the ones a server runs from (its status line, or the OS), and on Linux
    the ones this user's processes run from. A version is renamed away while its exclusive
    lock is held, so no mux can start using it in between. When the servers cannot even be
    listed, nothing is removed this time.
    """
    record = read_record(layout)
    active, installed = layout.active_version(), layout.installed_versions()
    running = running_version(layout)  # never delete the files this process runs from
    settlement = settle(record, active=active, installed=installed, running=running, prune=prune)
    reports: tuple[ServerReport, ...] | None = None
    trash: list[Path] = []
    with ExitStack() as locks:
        if settlement.remove:
            found = _holds(layout, settings, settlement.remove, locks)
            if found is None:
                settlement = settlement._replace(remove=())
            else:
                reports, holds = found
                if holds:
                    settlement = settle(
                        record, active=active, installed=installed, running=running, holds=holds
                    )
            for version in settlement.remove:
                trash.append(_to_trash(layout, version))
    for folder in trash:  # renamed away: nothing can start from it any more
        shutil.rmtree(folder, ignore_errors=True)
    if settlement.record is not None:
        write_record(layout, settlement.record)
    return Settled(tuple(settlement.remove), tuple(with_sizes(layout, settlement.kept)), reports)


def _holds(
    layout: Layout, settings: InstallSettings, candidates: tuple[str, ...], locks: ExitStack
) -> tuple[tuple[ServerReport, ...], list[ServerHold | InUseHold]] | None:
    """Who uses the ``candidates`` for removal; None when the servers cannot be listed.

    Each candidate that nobody holds stays locked (exclusively, in ``locks``) until the
    caller has renamed it away.
    """

    try:
        reports = tuple(
            servers.retention_reports(settings.server_url, timeout=settings.server_timeout)
        )
    except MuxError:
        return None
    return reports, version_holds(layout, candidates, reports, locks=locks)


def _to_trash(layout: Layout, version: str) -> Path:
    """Rename a version to ``versions/.trash-XXXX/`` (returned, to delete): a kill leaves a
    leftover the next run removes, never a half-deleted version."""
    trash = Path(tempfile.mkdtemp(dir=layout.versions, prefix=TRASH_PREFIX))
    os.rename(layout.version_dir(version), trash / version)
    return trash


def _place(layout: Layout, staging: Path, version: str) -> Path:
    """Rename the staged folder to ``versions/<version>``, replacing a stale copy.

    A copy that is already there and holds exactly the staged files (the kept previous
    version, one a server runs from) stays where it is: files are never swapped under a
    running mux or server, and a kill cannot leave the version missing. A stale copy that a
    running mux still uses is not replaced either: the update stops and says so.
    """
    final = Path(layout.version_dir(version))
    if final.exists():
        staged_list = sha256_file(staging / FILES_LIST_NAME)
        if layout.active_version() == version or verify_files(final, staged_list) is None:
            shutil.rmtree(staging, ignore_errors=True)
            return final
        with inuse.try_exclusive(final) as probe:
            if not probe.acquired:
                raise InstallError(
                    f"{final} differs from the release and cannot be replaced: "
                    f"{InUseHold(version, probe.holders).describe()}",
                    hint="stop what runs from it and retry; mux server status lists the servers",
                )
            old = _to_trash(layout, version)
        shutil.rmtree(old, ignore_errors=True)
    os.rename(staging, final)
    fsync_dir(layout.versions)
    return final


def _write_private(path: Path, data: bytes) -> None:
    """A new file of this user's only (0600), such as ``.mux-files``, whose lock every mux
    process of the version holds: nobody else can open it, so nobody else can hold it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)  # (a file of that name the archive brought is replaced in place)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _switch_link(layout: Layout, version: str) -> None:
    """Point ``<bin>/mux`` at the version by renaming a new link over the old one."""
    os.makedirs(layout.bin_dir, exist_ok=True)
    target = os.path.join(layout.version_dir(version), "mux")
    temp = Path(layout.bin_dir, f"{LINK_TEMP_PREFIX}{os.getpid()}-{time.monotonic_ns()}")
    os.symlink(target, temp)
    try:
        os.replace(temp, layout.link)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(layout.bin_dir)


# -- an install or an update -------------------------------------------------------------------


class Transaction:
    """One install or update of a version into ``MUX_HOME``, under its lock.

    Entering checks that every folder it will change is writable, takes the lock, removes
    what killed runs left and settles the record (so "active" names the version that is
    about to be replaced). :meth:`staging` gives the empty ``.partial-`` folder the release
    is unpacked and smoke-tested in (by :func:`updater.trust.pipeline.verify_release_files`);
    :meth:`switch_to` makes it the active version. Leaving without a switch removes it.
    """

    def __init__(self, layout: Layout, settings: InstallSettings) -> None:
        self.layout = layout
        self._settings = settings
        self._held = ExitStack()
        self._staging: Path | None = None
        self._flush: Flush | None = None
        self._flushing: Path | None = None  # the folder whose whole tree the flush covers

    def __enter__(self) -> Transaction:
        layout = self.layout
        for directory in (layout.home, layout.versions, layout.bin_dir):
            ensure_writable(directory)
        with ExitStack() as held:
            held.enter_context(install_lock(layout, wait=self._settings.lock_timeout))
            remove_leftovers(layout)
            try:
                # The record only: what the update frees is removed once, after the switch,
                # and reported then.
                _settle(layout, self._settings, prune=False)
            except OSError as exc:
                raise _write_error(layout.home, exc) from None
            self._held = held.pop_all()
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._held:
            if self._flush is not None:
                with suppress(OSError):
                    self._flush.join()  # never remove a folder another thread still walks
            if self._staging is not None:
                shutil.rmtree(self._staging, ignore_errors=True)

    @property
    def active(self) -> str | None:
        return self.layout.active_version()

    @property
    def download_dir(self) -> Path:
        """Where a download streams to: ``MUX_HOME`` (one file system with ``versions/``, and
        a killed run's ``.download-`` file is a leftover the next run removes)."""
        return Path(self.layout.home)

    def staging(self, version: str) -> Path:
        """A new empty ``versions/<version>.partial-XXXX`` folder."""
        try:
            private_folders(self.layout.versions)
            self._staging = Path(
                tempfile.mkdtemp(dir=self.layout.versions, prefix=f"{version}{PARTIAL_MARK}")
            )
        except OSError as exc:
            raise _write_error(self.layout.versions, exc) from None
        return self._staging

    def flush_file(self, path: str) -> None:
        """Start making one unpacked file durable now, beside the rest of the unpacking."""
        if self._flush is None:
            self._flush = Flush()
        self._flush.file(path)

    def flush_unpacked(self, staged: Path) -> None:
        """Start making the unpacked ``staged`` folder durable (its folders, and the files
        :meth:`flush_file` was not given) as soon as its tree is complete, beside what runs
        before the switch (for a delta the wait for layer 3 too; the smoke test,
        ``.mux-files``); :meth:`switch_to` waits for it."""
        if self._flush is None:
            self._flush = Flush()
        self._flush.tree(staged)
        self._flushing = staged

    def _join_flush(self) -> None:
        flush, self._flush = self._flush, None
        if flush is not None:
            flush.join()

    def switch_to(self, staged: Path, version: str, placed: Placed) -> Settled:
        """Make the verified, unpacked ``staged`` folder the active ``version``.

        Writes its ``.mux-files`` (after the smoke test, as install.sh does), fsyncs it,
        renames it into place, records it, moves the link, and settles: returns what was
        removed and what was kept (the active, the previous, and every version a live
        server runs from).
        """
        # An install makes any staged copy obsolete (the same version: it is this one now).
        self._place_and_record(staged, version, placed, without_staged)
        try:
            _switch_link(self.layout, version)
        except OSError as exc:
            raise _write_error(self.layout.home, exc) from None
        return self._settle_after(version, "installed and active")

    def keep_staged(
        self, staged: Path, version: str, placed: Placed, *, staged_at: float, took: float
    ) -> Settled:
        """Place the verified ``staged`` folder as ``versions/<version>`` and record it as the
        one staged version, without moving the link (``mux update`` applies it later); a
        version staged before it is removed by the settling."""
        size = tree_size(staged)
        self._place_and_record(
            staged,
            version,
            placed,
            lambda record: record_staged(
                record, version, staged_at=staged_at, took=took, size=size
            ),
        )
        return self._settle_after(version, "staged")

    def _place_and_record(
        self,
        staged: Path,
        version: str,
        placed: Placed,
        also: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> Path:
        """Write and flush ``.mux-files``, rename the folder into ``versions/`` and record it
        (``also`` changes the record in the same write)."""
        layout = self.layout
        try:
            if self._flush is None or self._flushing != staged:
                self.flush_unpacked(staged)  # a caller that unpacked without starting it
            listing = files_list(staged, placed.unpacked)
            # Left set on a failure above, the flush is joined by __exit__ before the folder goes.
            self._join_flush()
            _write_private(staged / FILES_LIST_NAME, listing)
            fsync_file(staged / FILES_LIST_NAME)
            fsync_dir(staged)
        except OSError as exc:
            raise _write_error(layout.versions, exc) from None
        try:
            final = _place(layout, staged, version)
            self._staging = None
            record = record_install(
                read_record(layout),
                version,
                archive_sha256=placed.archive_sha256,
                files_sha256=sha256_file(final / FILES_LIST_NAME),
                target=placed.target,
                source=placed.source,
                bin_dir=str(layout.bin_dir),
                signed_at=placed.signed_at,
            )
            write_record(layout, also(record))
        except OSError as exc:
            raise _write_error(layout.home, exc) from None
        return final

    def _settle_after(self, version: str, what: str) -> Settled:
        try:
            return _settle(self.layout, self._settings)
        except OSError as exc:
            raise InstallError(
                f"mux {version} is {what}, but tidying {self.layout.home} "
                f"failed: {exc.strerror or exc}",
                hint="run mux update again to finish",
            ) from None


@dataclass(frozen=True)
class Placed:
    """What the record keeps of a verified version: how it came and what vouched for it."""

    archive_sha256: str
    target: str
    source: str
    signed_at: int | None = None
    unpacked: UnpackedFiles | None = None


def tidy(layout: Layout, settings: InstallSettings) -> Settled | None:
    """Remove what killed runs left, when nothing else is running (best effort); None when
    it could not (another update holds the lock and tidies, or the home is not writable)."""
    if not os.path.isdir(layout.home):
        return None
    try:
        with install_lock(layout, wait=0):
            remove_leftovers(layout)
            return _settle(layout, settings)
    except (InstallError, OSError):
        return None


def prune(layout: Layout, settings: InstallSettings) -> Settled:
    """``mux update --prune``: remove every version nothing needs any more, now.

    Kept: the active and previous versions, the running mux's, and every version a running
    mux uses (a server, hung or not, above all); a staged version goes too (``--stage``
    downloads it again). Waits for the lock like an update.
    """
    _require_install(layout)
    for directory in (layout.home, layout.versions):
        ensure_writable(directory)
    with install_lock(layout, wait=settings.lock_timeout):
        remove_leftovers(layout)
        try:
            record = read_record(layout)
            if staged_version(record) is not None:
                write_record(layout, without_staged(record))
            return _settle(layout, settings)
        except OSError as exc:
            raise _write_error(layout.versions, exc) from None


def _require_install(layout: Layout) -> None:
    """Refuse a home that holds no install (a typo in --home): never create one to prune."""
    if not (os.path.isfile(layout.record_path) or os.path.isdir(layout.versions)):
        raise InstallError(
            f"no mux install at {layout.home} (no {RECORD_NAME}, no versions/)",
            hint="pass the MUX_HOME of an install with --home, or install mux with install.sh",
        )


# -- rollback ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RolledBack:
    from_version: str | None
    to_version: str
    target: str
    protocol_version: int
    settled: Settled = Settled()


def _checked_kept(
    layout: Layout,
    record: dict[str, Any],
    version: str,
    run_build: Callable[[Path, str, str], int],
    step: str,
) -> tuple[int, str]:
    """A kept version's files against the record, then the build run once (``run_build``):
    (the protocol it speaks, its target). Raises :class:`VerificationError` naming ``step``."""
    reinstall = f"reinstall it with: mux update --version {version} --allow-downgrade"
    entry = record.get("versions", {}).get(version, {})
    expected_list = entry.get("files_sha256") if isinstance(entry, dict) else None
    if not models.is_sha256(expected_list):
        raise VerificationError(
            f"verification failed ({step}): {version} has no file list on record "
            f"in {layout.record_path}",
            hint=reinstall,
        )
    problem = verify_files(layout.version_dir(version), expected_list)
    if problem:
        raise VerificationError(f"verification failed ({step}): {problem}", hint=reinstall)
    recorded_target = entry.get("target") if isinstance(entry, dict) else None
    target = str(recorded_target or record.get("target", ""))
    # The kept build runs once: its protocol comes from the same answer that is checked.
    return run_build(Path(layout.version_dir(version)), version, target), target


def kept_executable(
    layout: Layout, version: str, *, run_build: Callable[[Path, str, str], int]
) -> str:
    """The executable of ``version`` as kept in this install, checked as ``--rollback``
    checks it (its files against the record, the build run once), for a restart to start
    again: the one build besides its own that mux runs as a server. Raises
    :class:`MuxError` when this install keeps no such version or it fails a check."""
    if version not in layout.installed_versions():
        raise InstallError(f"this install ({layout.home}) keeps no mux {version}")
    _checked_kept(layout, read_record(layout), version, run_build, "restart")
    return os.path.join(layout.version_dir(version), "mux")


def unstage(layout: Layout, settings: InstallSettings) -> str | None:
    """Drop the staged version (its folder, unless something runs from it, and its record
    entry); returns its version (None: nothing was staged)."""
    _require_install(layout)
    ensure_writable(layout.home)
    with install_lock(layout, wait=settings.lock_timeout):
        record = read_record(layout)
        version = staged_version(record)
        if version is None:
            return None
        try:
            write_record(layout, without_staged(record))
            _settle(layout, settings)
        except OSError as exc:
            raise _write_error(layout.home, exc) from None
    return version


def apply_staged(
    layout: Layout,
    settings: InstallSettings,
    version: str,
    *,
    run_build: Callable[[Path, str, str], int],
) -> RolledBack:
    """Make the staged ``version`` active, checked as a rollback checks a kept version: every
    file against the digests recorded when it was verified (the disk is not trusted in
    between), then the build run once. Raises :class:`VerificationError` when it fails."""
    return rollback(layout, settings, run_build=run_build, to=version, step="apply")


def rollback(
    layout: Layout,
    settings: InstallSettings,
    *,
    run_build: Callable[[Path, str, str], int],
    to: str | None = None,
    step: str = "rollback",
) -> RolledBack:
    """Switch back to the previous version (or the kept version ``to``: a withdrawn release
    moving back) after checking its files against the record.

    ``run_build(folder, version, target)`` runs the kept build once and returns the protocol
    it speaks, raising when it is not that version for that target (the smoke test,
    :func:`updater.trust.smoke.run_kept_build`)."""
    _require_install(layout)
    for directory in (layout.home, layout.bin_dir):
        ensure_writable(directory)
    with install_lock(layout, wait=settings.lock_timeout):
        remove_leftovers(layout)
        try:
            settled = _settle(layout, settings)
        except OSError as exc:
            raise _write_error(layout.home, exc) from None
        record = read_record(layout)
        active = layout.active_version()
        installed = layout.installed_versions()
        if step == "apply" and staged_version(record) != to:
            # Decided before the lock: another update may have applied or dropped it since.
            raise VerificationError(f"verification failed (apply): mux {to} is not staged")
        if to is not None:
            previous = to if to in installed and to != active else None
        else:
            previous = rollback_choice(record, active=active, installed=installed)
        if previous is None:
            raise InstallError(
                f"no previous version to roll back to in {layout.home}",
                hint="install a specific one with: mux update --version X.Y.Z --allow-downgrade",
            )
        protocol_version, target = _checked_kept(layout, record, previous, run_build, step)
        try:
            _switch_link(layout, previous)
        except OSError as exc:
            raise _write_error(layout.bin_dir, exc) from None
        try:
            write_record(layout, record_rollback(record, to=previous, from_=active))
        except OSError as exc:
            raise InstallError(
                f"rolled back to mux {previous}, but recording it in {layout.record_path} "
                f"failed: {exc.strerror or exc}",
                hint="run mux update --rollback again once the disk is writable",
            ) from None
    return RolledBack(active, previous, target, protocol_version, settled)
