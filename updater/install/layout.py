"""The installed layout shared with install.sh (see docs/contracts.md), read only.

``MUX_HOME/versions/<version>/`` holds one unpacked release each, with ``.mux-files``
listing the sha256 of every file in it; ``MUX_HOME/install.json`` records what is installed;
``<bin dir>/mux`` is a symlink to the active version's executable and is the truth of which
version is active. This module knows the layout and reads it (which names are versions,
which version the link makes active, which install and version this mux runs from, where its
bin dir is, what settling it keeps); every change to it is made by
:mod:`updater.install.transaction`.

One type, :class:`Layout`, on ``str`` paths with ``os.path`` and ``os.scandir``: the cached
``mux update --check`` reports the versions an install keeps and must start fast, and
importing ``pathlib`` (with ``urllib.parse`` and ``ipaddress``) was 12% of it in the released
build (docs/build.md).
"""

from __future__ import annotations

import json
import os
import sys

from updater._records import NamedTuple
from updater.config.buildfolder import build_info_in, running_package_folder
from updater.config.buildinfo import packager_marker_file
from updater.config.remembered import RECORD_NAME, install_home_of
from updater.core.retention import RECORD_SCHEMA, InUseHold, ServerHold, settle
from updater.errors import InstallError, MuxError, UsageError
from updater.files import STATE_FILE_LIMIT, NotReadable, read_small_file, sha256_file
from updater.install import inuse

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from collections.abc import Iterable
    from contextlib import ExitStack
    from typing import Any

    from updater.core.retention import KeptVersion
    from updater.core.verdicts import ServerReport

FILES_LIST_NAME = ".mux-files"
LOCK_NAME = ".lock"
FILES_LIST_LIMIT = 64 << 20  # a .mux-files line per file: 50,000 members (layer 4) fit easily
# What a killed run leaves behind, which the next run (holding the lock) removes: a partial
# unpack carries PARTIAL_MARK in its name, the others start with their prefix.
PARTIAL_MARK = ".partial-"
TRASH_PREFIX = ".trash-"
LINK_TEMP_PREFIX = ".mux.tmp-"
WRITE_PROBE_PREFIX = ".mux-write-probe-"


def pure(path: str) -> str:
    """``path`` spelt as ``pathlib`` spells it: no empty or ``.`` parts, no trailing slash
    (``..`` kept: like ``pathlib``, nothing here resolves a path without asking the OS)."""
    if path.startswith("//") and not path.startswith("///"):
        head = "//"  # POSIX leaves the meaning of exactly two leading slashes open; so does pathlib
    else:
        head = "/" if path.startswith("/") else ""
    parts = [part for part in path.split("/") if part and part != "."]
    return head + "/".join(parts) or "."


def absolute(path: str) -> str:
    """``Path(path).absolute()``: joined to the working directory, not resolved."""
    return pure(path if os.path.isabs(path) else os.path.join(os.getcwd(), path))


def _parent(path: str) -> str:
    """``Path(path).parent`` of a :func:`pure` path."""
    root = "//" if path.startswith("//") else "/" if path.startswith("/") else ""
    rest = path[len(root) :]
    if not rest:
        return root or "."
    head = rest.rpartition("/")[0]
    return root + head if head else root or "."


def _parents(path: str) -> list[str]:
    """``Path(path).parents`` of a :func:`pure` path."""
    found: list[str] = []
    while True:
        parent = _parent(path)
        if parent == path or (parent == "." and path == "."):
            return found
        found.append(parent)
        path = parent


def is_version_name(name: str) -> bool:
    """Whether a folder of ``versions/`` holds a version (not a partial unpack, not hidden)."""
    return bool(name) and not name.startswith(".") and PARTIAL_MARK not in name


class Layout(NamedTuple):
    """Where an install lives, as strings (a NamedTuple: the cached check defines it)."""

    home: str
    bin_dir: str

    @property
    def versions(self) -> str:
        return os.path.join(self.home, "versions")

    @property
    def record_path(self) -> str:
        return os.path.join(self.home, RECORD_NAME)

    @property
    def lock_path(self) -> str:
        return os.path.join(self.home, LOCK_NAME)

    @property
    def link(self) -> str:
        return os.path.join(self.bin_dir, "mux")

    def version_dir(self, version: str) -> str:
        return os.path.join(self.versions, version)

    def active_version(self) -> str | None:
        """The version the bin-dir link points at, if it points into this install."""
        try:
            target = os.readlink(self.link)
        except OSError:
            return None
        target = pure(target if os.path.isabs(target) else os.path.join(self.bin_dir, target))
        if target.rpartition("/")[2] != "mux":
            return None
        version_dir = _parent(target)
        # Compare resolved paths: MUX_HOME (or the link) may go through a symlink.
        if os.path.realpath(_parent(version_dir)) != os.path.realpath(self.versions):
            return None
        return version_dir.rpartition("/")[2]

    def version_of(self, path: str | os.PathLike[str]) -> str | None:
        """The version folder ``path`` (a resolved executable) lies in, if it is one of ours."""
        inside, versions = pure(os.fspath(path)), os.path.realpath(self.versions)
        if inside == versions:
            return None
        prefix = versions if versions.endswith("/") else versions + "/"
        if not inside.startswith(prefix):
            return None
        name = inside[len(prefix) :].split("/", 1)[0]
        return name if is_version_name(name) else None

    def installed_versions(self) -> list[str]:
        try:
            with os.scandir(self.versions) as entries:
                found = [entry for entry in entries if is_version_name(entry.name)]
        except OSError:
            return []
        return sorted(entry.name for entry in found if _is_dir(entry))


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()  # a link to a folder counts, as pathlib's is_dir() counts it
    except OSError:
        return False


def read_record(layout: Layout) -> dict[str, Any]:
    """``install.json``; a missing or unreadable record is an empty one (the link rules)."""
    return _read_record(layout.record_path)


def _read_record(record_path: str) -> dict[str, Any]:
    # Not a regular file of at most 1 MiB (a FIFO, a device, a link to /dev/zero): read as
    # an unreadable record is, and replaced by the next write (a rename).
    try:
        raw = read_small_file(record_path, STATE_FILE_LIMIT)
        doc = json.loads(raw) if raw is not None else None
    except (NotReadable, ValueError, RecursionError):
        return {"schema": RECORD_SCHEMA, "versions": {}}
    if not isinstance(doc, dict) or not isinstance(doc.get("versions"), dict):
        return {"schema": RECORD_SCHEMA, "versions": {}}
    return doc


def installed_protocol(layout: Layout, version: str) -> int | None:
    """The protocol the installed ``version`` speaks, from its build info file (read, never
    run); None when its folder holds none that can be read."""
    path = build_info_in(str(layout.version_dir(version)))
    if path is None:
        return None
    try:
        raw = read_small_file(path, STATE_FILE_LIMIT)
        doc = json.loads(raw) if raw is not None else None
    except (NotReadable, ValueError, RecursionError):
        return None
    protocol = doc.get("protocol_version") if isinstance(doc, dict) else None
    if isinstance(protocol, int) and not isinstance(protocol, bool):
        return protocol
    return None


# -- which versions stay, and why ----------------------------------------------------------


def server_holds(layout: Layout, reports: Iterable[ServerReport]) -> list[ServerHold]:
    """The servers that run from a version folder of the install: live ones by their status
    line (or the OS), silent ones (hung, garbage) by what the OS says of the process behind
    the socket. A server nothing can be learnt of holds nothing."""

    holds = []
    for report in reports:
        if report.executable is None:
            continue
        version = layout.version_of(report.executable)
        if version is not None:
            holds.append(ServerHold(version, report.address, report.pid, report.state == "live"))
    return holds


def version_holds(
    layout: Layout,
    candidates: Iterable[str],
    reports: Iterable[ServerReport],
    *,
    locks: ExitStack | None = None,
) -> list[ServerHold | InUseHold]:
    """Who uses the ``candidates`` for removal: servers that run from them (by their status
    line or the OS), running mux processes that hold their lock (:mod:`updater.install.inuse`), and,
    for a candidate nobody holds, this user's processes whose program lies in it (builds that
    take no lock).

    With ``locks``, each candidate nobody holds stays locked exclusively in it (the remover
    renames it away before letting go); without, a lock is let go at once (a reader).
    """

    holds: list[ServerHold | InUseHold] = [*server_holds(layout, reports)]
    free = []
    for version in candidates:
        probe = inuse.try_exclusive(layout.version_dir(version))
        if locks is not None:
            locks.enter_context(probe)
        else:
            probe.close()
        if probe.acquired:
            free.append(version)
        else:
            holds.append(InUseHold(version, probe.holders))
    if free:
        for version, pids in inuse.processes_running_from(layout.versions).items():
            if version in free:
                holds.append(InUseHold(version, pids))
    return holds


def kept_versions(layout: Layout, reports: Iterable[ServerReport]) -> list[KeptVersion]:
    """What settling this install keeps and why, with each version's size on disk (read only:
    what ``mux update --check`` reports)."""

    record, active = read_record(layout), layout.active_version()
    installed, running = layout.installed_versions(), running_version(layout)
    settlement = settle(record, active=active, installed=installed, running=running)
    if settlement.remove:
        holds = version_holds(layout, settlement.remove, reports)
        settlement = settle(
            record, active=active, installed=installed, running=running, holds=holds
        )
    return with_sizes(layout, settlement.kept)


def with_sizes(layout: Layout, kept: Iterable[KeptVersion]) -> list[KeptVersion]:
    return [k._replace(size_bytes=tree_size(layout.version_dir(k.version))) for k in kept]


def tree_size(root: str | os.PathLike[str]) -> int:
    """Bytes used by the regular files below ``root`` (links not followed); 0 if it is gone."""
    total = 0
    pending = [os.fspath(root)]
    while pending:
        try:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return total


# -- the per-version file list -------------------------------------------------------------


class UnpackedFile(NamedTuple):
    """A file as :func:`updater.trust.pipeline.unpack` wrote it: its digest, and what ``lstat`` said
    once it was written (a write, chmod, rename or replacement since changes one of these)."""

    sha256: str
    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int


UnpackedFiles = dict[str, UnpackedFile]  # by path relative to the unpacked folder


def unpacked_file(path: str | os.PathLike[str], sha256: str) -> UnpackedFile:
    st = os.lstat(path)
    return UnpackedFile(sha256, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def files_list(root: str | os.PathLike[str], unpacked: UnpackedFiles | None = None) -> bytes:
    """``sha256sum`` lines for every regular file below ``root``, as install.sh writes them.

    ``unpacked``: the digests taken as the files were unpacked, each used only while the file
    is still what was written (:class:`UnpackedFile`); any other file is read and hashed.
    """

    root = os.fspath(root)
    lines = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            path = os.path.join(dirpath, name)
            relative = "./" + os.path.relpath(path, root).replace(os.sep, "/")
            if relative == f"./{FILES_LIST_NAME}" or os.path.islink(path):
                continue
            if not os.path.isfile(path):
                continue
            known = unpacked.get(relative[2:]) if unpacked else None
            if known is not None and unpacked_file(path, known.sha256) == known:
                digest = known.sha256
            else:
                digest = sha256_file(path)
            lines.append((relative.encode(), f"{digest}  {relative}\n".encode()))
    return b"".join(line for _, line in sorted(lines))


def verify_files(root: str | os.PathLike[str], expected_list_sha256: str | None) -> str | None:
    """None when ``root`` still holds exactly what was installed, else what differs."""
    root = os.fspath(root)
    listed = os.path.join(root, FILES_LIST_NAME)
    try:
        recorded = read_small_file(listed, FILES_LIST_LIMIT)
    except NotReadable as exc:
        return f"{listed} cannot be read: {exc}"
    if recorded is None:
        return f"{root} has no {FILES_LIST_NAME}"
    import hashlib  # only a check of the files pays for it: the cached check only reads

    if expected_list_sha256 and hashlib.sha256(recorded).hexdigest() != expected_list_sha256:
        return f"{listed} does not match the install record"
    actual = files_list(root)
    if actual != recorded:
        return f"the files in {root} changed since they were installed"
    return None


# -- whose install is this -----------------------------------------------------------------

# Path fragments of trees that package managers own, and the command that updates mux there:
# a guess, for packages without a marker (updater.config.marker), which always wins.
_PACKAGE_MANAGERS = (
    ("/Cellar/", "Homebrew", "brew upgrade mux"),
    ("/homebrew/", "Homebrew", "brew upgrade mux"),
    ("/nix/store/", "Nix", "update mux through your Nix configuration (nix profile upgrade mux)"),
    ("/pipx/venvs/", "pipx", "pipx upgrade mux"),
    ("/uv/tools/", "uv tool", "uv tool upgrade mux"),
    ("/.cargo/bin/", "cargo", "cargo install mux"),
    ("/site-packages/", "a Python environment (pip)", "pip install --upgrade mux"),
    ("/dist-packages/", "a Python environment (pip)", "pip install --upgrade mux"),
)


def package_manager_for(path: str | os.PathLike[str]) -> tuple[str, str] | None:
    text = os.fspath(path) + "/"
    for fragment, manager, command in _PACKAGE_MANAGERS:
        if fragment in text:
            return manager, command
    return None


def running_install_home(module_file: str | None = None) -> str | None:
    """The ``MUX_HOME`` the running mux was unpacked into, if it runs from one."""
    return install_home_of(module_file or running_package_folder())


def running_version(layout: Layout, module_file: str | None = None) -> str | None:
    """The version folder of ``layout`` that the running mux was started from, if any."""
    here = pure(os.path.realpath(module_file or running_package_folder()))
    resolved = os.path.realpath(layout.versions)
    for parent in _parents(here):
        if _parent(parent) == resolved:
            return parent.rpartition("/")[2]
    return None


def resolve_layout(
    home: str | os.PathLike[str] | None,
    bin_dir: str | os.PathLike[str] | None,
    *,
    development: bool,
) -> Layout:
    """The install to update: ``home`` (``--home`` / ``MUX_HOME``), else the one this mux
    belongs to. Its bin dir: ``bin_dir`` (``MUX_INSTALL_DIR`` / ``XDG_BIN_HOME``), else the one
    on record, else ``~/.local/bin``."""
    configured = None if bin_dir is None else os.fspath(bin_dir)
    if home is not None:
        home = absolute(os.path.expanduser(os.fspath(home)))
        return Layout(home, bin_dir_for(home, configured))
    if not development and packager_marker_file() is not None:
        # deferred (+1.2 ms, 1 module, on the cached check): only a packaged build has a
        # marker
        from updater.config.marker import find_marker

        marker = find_marker()  # a packager's own word wins over every guess below
        if marker is not None:
            raise InstallError(
                f"this mux is managed by {marker.manager} ({marker.path}), not by mux update",
                hint=f"update it with: {marker.update_command}",
            )
    owned = running_install_home()
    if owned is not None:
        return Layout(owned, bin_dir_for(owned, configured))
    location = os.path.realpath(sys.executable if getattr(sys, "frozen", False) else __file__)
    argv0 = os.path.realpath(sys.argv[0]) if sys.argv and sys.argv[0] else None
    for candidate in (location, argv0):
        found = package_manager_for(candidate) if candidate else None
        if found:
            manager, command = found
            raise InstallError(
                f"this mux ({candidate}) is managed by {manager}, not by mux update",
                hint=f"update it with: {command}",
            )
    if development:
        raise UsageError(
            "this is a development checkout, not an installed mux",
            hint="pass --home DIR (or set MUX_HOME) to update an install",
        )
    raise InstallError(
        f"cannot tell which install this mux ({location}) belongs to",
        hint="pass --home DIR (or set MUX_HOME), or reinstall with install.sh",
    )


def bin_dir_for(home: str, configured: str | None) -> str:
    if configured is not None:
        return absolute(configured)
    recorded = _read_record(os.path.join(home, RECORD_NAME)).get("bin_dir")
    if isinstance(recorded, str) and recorded:
        return pure(recorded)
    return absolute(os.path.join(os.path.expanduser("~"), ".local", "bin"))


# -- what a delta can start from -----------------------------------------------------------


class KeptBuild(NamedTuple):
    """An installed version a delta may start from: its folder and the digest its
    ``.mux-files`` has on record."""

    version: str
    folder: str
    files_sha256: str


def kept_builds(layout: Layout, record: dict[str, Any], target: str) -> list[KeptBuild]:
    """The installed versions of ``target`` whose file list is on record: the active one
    first, then the others from the newest (what a delta from each would start from)."""
    # deferred (+40 ms, 35 modules): models imports dataclasses and packaging, which the
    # cached check, reading this module, does without; only an update that may use a delta
    # asks
    from updater.formats.models import is_sha256, parse_version

    versions = record.get("versions")
    versions = versions if isinstance(versions, dict) else {}
    found = []
    for version in layout.installed_versions():
        entry = versions.get(version)
        if not isinstance(entry, dict) or not is_sha256(entry.get("files_sha256")):
            continue
        if str(entry.get("target") or record.get("target") or "") != target:
            continue
        try:
            order = parse_version(version)
        except MuxError:
            continue
        kept = KeptBuild(version, layout.version_dir(version), entry["files_sha256"])
        found.append((order, kept))
    active = layout.active_version()
    found.sort(key=lambda item: item[0], reverse=True)
    return [b for _, b in found if b.version == active] + [
        b for _, b in found if b.version != active
    ]


def recorded_files(build: KeptBuild, *, limit: int = 8 * 1024 * 1024) -> dict[str, str] | None:
    """The digest of every file of a kept build, from its ``.mux-files``, once that list
    matches the digest on record; None when it is missing, changed or malformed."""
    import hashlib  # deferred: only an update asks (as in verify_files)

    path = os.path.join(build.folder, FILES_LIST_NAME)
    try:
        raw = read_small_file(path, limit)
    except NotReadable:
        return None
    if raw is None or hashlib.sha256(raw).hexdigest() != build.files_sha256:
        return None
    files: dict[str, str] = {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    for line in text.splitlines():
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or not name.startswith("./"):
            return None
        files[name[2:]] = digest
    return files
