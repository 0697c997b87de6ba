"""The installed layout shared with install.sh (see docs/contracts.md), read only.

``MUX_HOME/versions/<version>/`` holds one unpacked release each, with ``.mux-files``
listing the sha256 of every file in it; ``MUX_HOME/install.json`` records what is installed;
``<bin dir>/mux`` is a symlink to the active version's executable and is the truth of which
version is active. This module knows the layout and reads it; every change to it is made by
:mod:`updater.install.transaction`.

Its rules are written once, on path strings, in :mod:`updater.install.paths` (the cached
check reads the layout through it without importing ``pathlib``); :class:`Layout` is the
``pathlib`` record the rest of mux passes around, and applies them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from updater._records import NamedTuple
from updater.config.buildfolder import build_info_in
from updater.install import paths as _paths
from updater.install.paths import PARTIAL_MARK as PARTIAL_MARK  # (the layout's names, one place)
from updater.install.paths import RECORD_NAME as RECORD_NAME
from updater.install.paths import RECORD_SCHEMA as RECORD_SCHEMA
from updater.install.paths import InstallPaths
from updater.install.paths import package_manager_for as package_manager_for
from updater.install.paths import tree_size as tree_size
from updater.net.download import DOWNLOAD_PREFIX as DOWNLOAD_PREFIX

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from collections.abc import Iterable
    from contextlib import ExitStack
    from typing import Any

    from updater.core.retention import InUseHold, KeptVersion, ServerHold
    from updater.servers.client import ServerReport

FILES_LIST_NAME = ".mux-files"
LOCK_NAME = ".lock"
TRASH_PREFIX = ".trash-"
LINK_TEMP_PREFIX = ".mux.tmp-"
WRITE_PROBE_PREFIX = ".mux-write-probe-"


class Layout(NamedTuple):
    """Where an install lives (a NamedTuple, like its string twin
    :class:`updater.install.paths.InstallPaths`, whose rules it applies)."""

    home: Path
    bin_dir: Path

    @property
    def paths(self) -> InstallPaths:
        return InstallPaths(str(self.home), str(self.bin_dir))

    @property
    def versions(self) -> Path:
        return self.home / "versions"

    @property
    def record_path(self) -> Path:
        return self.home / RECORD_NAME

    @property
    def lock_path(self) -> Path:
        return self.home / LOCK_NAME

    @property
    def link(self) -> Path:
        return self.bin_dir / "mux"

    def version_dir(self, version: str) -> Path:
        return self.versions / version

    def active_version(self) -> str | None:
        """The version the bin-dir link points at, if it points into this install."""
        return self.paths.active_version()

    def version_of(self, path: str | Path) -> str | None:
        """The version folder ``path`` (a resolved executable) lies in, if it is one of ours."""
        return self.paths.version_of(path)

    def installed_versions(self) -> list[str]:
        return self.paths.installed_versions()


# -- the record ---------------------------------------------------------------------------


def read_record(layout: Layout) -> dict[str, Any]:
    """``install.json``; a missing or unreadable record is an empty one (the link rules)."""
    return _paths.read_record(str(layout.record_path))


def installed_protocol(layout: Layout, version: str) -> int | None:
    """The protocol the installed ``version`` speaks, from its build info file (read, never
    run); None when its folder holds none that can be read."""
    path = build_info_in(str(layout.version_dir(version)))
    if path is None:
        return None
    try:
        with open(path, "rb") as stream:
            doc = json.loads(stream.read())
    except (OSError, ValueError, RecursionError):
        return None
    protocol = doc.get("protocol_version") if isinstance(doc, dict) else None
    if isinstance(protocol, int) and not isinstance(protocol, bool):
        return protocol
    return None


# -- which versions stay, and why ----------------------------------------------------------


def server_holds(layout: Layout, reports: Iterable[ServerReport]) -> list[ServerHold]:
    """The servers that run from a version folder of ``layout`` (see :mod:`._layout_paths`)."""
    return _paths.server_holds(layout.paths, reports)


def version_holds(
    layout: Layout,
    candidates: Iterable[str],
    reports: Iterable[ServerReport],
    *,
    locks: ExitStack | None = None,
) -> list[ServerHold | InUseHold]:
    """Who uses the ``candidates`` for removal, and with ``locks`` the exclusive locks of the
    free ones (see :func:`updater.install.paths.version_holds`)."""
    return _paths.version_holds(layout.paths, candidates, reports, locks=locks)


def kept_versions(layout: Layout, reports: Iterable[ServerReport]) -> list[KeptVersion]:
    """What settling this install keeps and why, with each version's size on disk (read only:
    what ``mux update --check`` reports)."""
    return _paths.kept_versions(layout.paths, reports)


def with_sizes(layout: Layout, kept: Iterable[KeptVersion]) -> list[KeptVersion]:
    return _paths.with_sizes(layout.paths, kept)


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


def unpacked_file(path: str | Path, sha256: str) -> UnpackedFile:
    st = os.lstat(path)
    return UnpackedFile(sha256, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def files_list(root: Path, unpacked: UnpackedFiles | None = None) -> bytes:
    """``sha256sum`` lines for every regular file below ``root``, as install.sh writes them.

    ``unpacked``: the digests taken as the files were unpacked, each used only while the file
    is still what was written (:class:`UnpackedFile`); any other file is read and hashed.
    """
    from updater.files import sha256_file  # the cached check reads the layout and hashes nothing

    lines = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            path = Path(dirpath) / name
            relative = "./" + path.relative_to(root).as_posix()
            if relative == f"./{FILES_LIST_NAME}" or path.is_symlink() or not path.is_file():
                continue
            known = unpacked.get(relative[2:]) if unpacked else None
            if known is not None and unpacked_file(path, known.sha256) == known:
                digest = known.sha256
            else:
                digest = sha256_file(path)
            lines.append((relative.encode(), f"{digest}  {relative}\n".encode()))
    return b"".join(line for _, line in sorted(lines))


def verify_files(root: Path, expected_list_sha256: str | None) -> str | None:
    """None when ``root`` still holds exactly what was installed, else what differs."""
    try:
        recorded = (root / FILES_LIST_NAME).read_bytes()
    except OSError:
        return f"{root} has no {FILES_LIST_NAME}"
    import hashlib  # only a check of the files pays for it: the cached check only reads

    if expected_list_sha256 and hashlib.sha256(recorded).hexdigest() != expected_list_sha256:
        return f"{root / FILES_LIST_NAME} does not match the install record"
    actual = files_list(root)
    if actual != recorded:
        return f"the files in {root} changed since they were installed"
    return None


# -- whose install is this -----------------------------------------------------------------


def running_install_home(module_file: str | None = None) -> Path | None:
    """The ``MUX_HOME`` the running mux was unpacked into, if it runs from one."""
    home = _paths.running_install_home(module_file)
    return None if home is None else Path(home)


def running_version(layout: Layout, module_file: str | None = None) -> str | None:
    """The version folder of ``layout`` that the running mux was started from, if any."""
    return _paths.running_version(str(layout.versions), module_file)


def resolve_layout(home: Path | None, bin_dir: Path | None, *, development: bool) -> Layout:
    """The install to update (the rules: :func:`updater.install.paths.resolve_install`)."""
    paths = _paths.resolve_install(home, bin_dir, development=development)
    return Layout(home=Path(paths.home), bin_dir=Path(paths.bin_dir))
