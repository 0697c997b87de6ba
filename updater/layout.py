"""The installed layout shared with install.sh (see docs/contracts.md), read only.

``MUX_HOME/versions/<version>/`` holds one unpacked release each, with ``.mux-files``
listing the sha256 of every file in it; ``MUX_HOME/install.json`` records what is installed;
``<bin dir>/mux`` is a symlink to the active version's executable and is the truth of which
version is active. This module knows the layout and reads it; every change to it is made by
:mod:`updater.install`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .errors import InstallError, UsageError

if TYPE_CHECKING:
    from collections.abc import Iterable
    from contextlib import ExitStack

    from .plan import InUseHold, KeptVersion, ServerHold
    from .servers import ServerReport

RECORD_NAME = "install.json"
FILES_LIST_NAME = ".mux-files"
LOCK_NAME = ".lock"
PARTIAL_MARK = ".partial-"
DOWNLOAD_PREFIX = ".download-"
TRASH_PREFIX = ".trash-"
LINK_TEMP_PREFIX = ".mux.tmp-"
WRITE_PROBE_PREFIX = ".mux-write-probe-"
RECORD_SCHEMA = 1


class Layout(NamedTuple):
    """Where an install lives (a NamedTuple: the cached check defines it, see plan.py)."""

    home: Path
    bin_dir: Path

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
        try:
            target = Path(os.readlink(self.link))
        except OSError:
            return None
        if not target.is_absolute():
            target = self.bin_dir / target
        if target.name != "mux":
            return None
        # Compare resolved paths: MUX_HOME (or the link) may go through a symlink.
        if target.parent.parent.resolve() != self.versions.resolve():
            return None
        return target.parent.name

    def version_of(self, path: str | Path) -> str | None:
        """The version folder ``path`` (a resolved executable) lies in, if it is one of ours."""
        try:
            relative = Path(path).relative_to(self.versions.resolve())
        except ValueError:
            return None
        name = relative.parts[0] if relative.parts else ""
        if not name or name.startswith(".") or PARTIAL_MARK in name:
            return None
        return name

    def installed_versions(self) -> list[str]:
        try:
            entries = list(self.versions.iterdir())
        except OSError:
            return []
        return sorted(
            p.name
            for p in entries
            if p.is_dir() and not p.name.startswith(".") and PARTIAL_MARK not in p.name
        )


# -- the record ---------------------------------------------------------------------------


def read_record(layout: Layout) -> dict[str, Any]:
    """``install.json``; a missing or unreadable record is an empty one (the link rules)."""
    try:
        doc = json.loads(layout.record_path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return {"schema": RECORD_SCHEMA, "versions": {}}
    if not isinstance(doc, dict) or not isinstance(doc.get("versions"), dict):
        return {"schema": RECORD_SCHEMA, "versions": {}}
    return doc


BUILD_INFO_NAME = "_build_info.json"


def build_info_path(folder: Path) -> Path | None:
    """A build's info file, where docs/contracts.md pins it: ``<folder>/<code folder>/
    updater/_build_info.json``, exactly one level below the top (``_internal/`` in a
    standalone build, ``lib/`` in a stand-in). None unless there is exactly one."""
    try:
        with os.scandir(folder) as entries:
            found = [
                Path(entry.path, "updater", BUILD_INFO_NAME)
                for entry in entries
                if entry.is_dir(follow_symlinks=False)
            ]
    except OSError:
        return None
    present = [path for path in found if path.is_file()]
    return present[0] if len(present) == 1 else None


def installed_protocol(layout: Layout, version: str) -> int | None:
    """The protocol the installed ``version`` speaks, from its build info file (read, never
    run); None when its folder holds none that can be read."""
    path = build_info_path(layout.version_dir(version))
    if path is None:
        return None
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    protocol = doc.get("protocol_version") if isinstance(doc, dict) else None
    if isinstance(protocol, int) and not isinstance(protocol, bool):
        return protocol
    return None


# -- which versions stay, and why ----------------------------------------------------------


def server_holds(layout: Layout, reports: Iterable[ServerReport]) -> list[ServerHold]:
    """The servers that run from a version folder of ``layout``: live ones by their status
    line (or the OS), silent ones (hung, garbage) by what the OS says of the process behind
    the socket. A server nothing can be learnt of holds nothing."""
    from .plan import ServerHold

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
    line or the OS), running mux processes that hold their lock (:mod:`updater.inuse`), and,
    for a candidate nobody holds, this user's processes whose program lies in it (builds that
    take no lock).

    With ``locks``, each candidate nobody holds stays locked exclusively in it (the remover
    renames it away before letting go); without, a lock is let go at once (a reader).
    """
    from . import inuse
    from .plan import InUseHold

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
    from .plan import settle

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


def tree_size(root: Path) -> int:
    """Bytes used by the regular files below ``root`` (links not followed); 0 if it is gone."""
    total = 0
    pending = [str(root)]
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


def files_list(root: Path) -> bytes:
    """``sha256sum`` lines for every regular file below ``root``, as install.sh writes them."""
    from .files import sha256_file  # the cached check reads the layout and hashes nothing

    lines = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            path = Path(dirpath) / name
            relative = "./" + path.relative_to(root).as_posix()
            if relative == f"./{FILES_LIST_NAME}" or path.is_symlink() or not path.is_file():
                continue
            lines.append((relative.encode(), f"{sha256_file(path)}  {relative}\n".encode()))
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

# Path fragments of trees that package managers own, and the command that updates mux there:
# a guess, for packages without a marker (updater.marker), which always wins.
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


def package_manager_for(path: Path) -> tuple[str, str] | None:
    text = str(path) + "/"
    for fragment, manager, command in _PACKAGE_MANAGERS:
        if fragment in text:
            return manager, command
    return None


def running_install_home(module_file: str | None = None) -> Path | None:
    """The ``MUX_HOME`` the running mux was unpacked into, if it runs from one."""
    here = Path(module_file or __file__).resolve()
    for parent in here.parents:
        if parent.name == "versions" and (parent.parent / RECORD_NAME).exists():
            return parent.parent
    return None


def running_version(layout: Layout, module_file: str | None = None) -> str | None:
    """The version folder of ``layout`` that the running mux was started from, if any."""
    here = Path(module_file or __file__).resolve()
    versions = layout.versions.resolve()
    for parent in here.parents:
        if parent.parent == versions:
            return parent.name
    return None


def resolve_layout(home: Path | None, bin_dir: Path | None, *, development: bool) -> Layout:
    """The install to update: ``home`` (``--home`` / ``MUX_HOME``), else the one this mux
    belongs to. Its bin dir: ``bin_dir`` (``MUX_INSTALL_DIR`` / ``XDG_BIN_HOME``), else the one
    on record, else ``~/.local/bin``."""
    if home is not None:
        return Layout(home=home.expanduser().absolute(), bin_dir=_bin_dir_for(home, bin_dir))
    if not development:
        from .marker import find_marker

        marker = find_marker()  # a packager's own word wins over every guess below
        if marker is not None:
            raise InstallError(
                f"this mux is managed by {marker.manager} ({marker.path}), not by mux update",
                hint=f"update it with: {marker.update_command}",
            )
    owned = running_install_home()
    if owned is not None:
        return Layout(home=owned, bin_dir=_bin_dir_for(owned, bin_dir))
    location = Path(sys.executable if getattr(sys, "frozen", False) else __file__).resolve()
    for candidate in (location, Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None):
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


def _bin_dir_for(home: Path, configured: Path | None) -> Path:
    if configured is not None:
        return configured.absolute()
    recorded = read_record(Layout(home=home, bin_dir=Path())).get("bin_dir")
    if isinstance(recorded, str) and recorded:
        return Path(recorded)
    return (Path.home() / ".local" / "bin").absolute()
