"""What a build folder holds: one walk and one rule for links, for every tool that reads it.

The inventory (notices and SBOM), the SBOM check, the archive writer, the build comparison and
the glibc check all list a ``mux-<target>/`` folder with :func:`build_files`, so they agree on
what it holds. Entries come depth first, each level sorted bytewise (a folder's entries
right after it). The rule for symbolic links is the updater's (what an install accepts,
:mod:`updater.trust.pipeline`): a link is an entry of its own and is never followed while walking;
its target is relative, without ``..``, and names a regular file of the same folder (through
any chain of links). Anything else, a link to a folder, out of the folder, or to nothing, a
device or a FIFO, is a :class:`BuildFolderError` naming it: no tool silently skips it, archives
it or calls it unmapped.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from updater.errors import MuxError

FILE = "file"
LINK = "link"
DIRECTORY = "dir"


class BuildFolderError(MuxError):
    """A build folder holds something no release may ship."""


@dataclass(frozen=True)
class BuildEntry:
    path: str  # relative POSIX path inside the folder
    absolute: Path
    kind: str  # FILE, LINK or DIRECTORY
    mode: int  # permission bits (of the link's target for a link)
    link: str | None = None  # a link's target, as written
    target: str | None = None  # a link's resolved target, relative to the folder

    @property
    def content(self) -> Path:
        """The regular file holding this entry's bytes (a link's target)."""
        return self.absolute.resolve() if self.link is not None else self.absolute


def _link_target(root: Path, path: Path, relative: str) -> str:
    written = os.readlink(path)
    if os.path.isabs(written) or ".." in PurePosixPath(written).parts:
        raise BuildFolderError(
            f"{relative} is a link to {written}, which leaves the build folder (a link must be "
            "relative, without '..')"
        )
    resolved = Path(os.path.realpath(path))
    try:
        inside = resolved.relative_to(root).as_posix()
    except ValueError:
        raise BuildFolderError(f"{relative} is a link that leaves the build folder") from None
    if not resolved.is_file():
        raise BuildFolderError(
            f"{relative} is a link to {written}, which is not a file of the folder"
        )
    return inside


def build_files(root: Path, *, directories: bool = False) -> list[BuildEntry]:
    """Every file and link below ``root`` (and every folder, with ``directories``)."""
    root = Path(os.path.realpath(root))
    if not root.is_dir():
        raise BuildFolderError(f"{root} is not a folder")
    entries = []
    for directory, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(directory, name)
            relative = path.relative_to(root).as_posix()
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                target = _link_target(root, path, relative)
                mode = path.stat().st_mode & 0o777
                entries.append(BuildEntry(relative, path, LINK, mode, os.readlink(path), target))
            elif stat.S_ISDIR(st.st_mode):
                if directories:
                    entries.append(BuildEntry(relative, path, DIRECTORY, st.st_mode & 0o777))
            elif stat.S_ISREG(st.st_mode):
                entries.append(BuildEntry(relative, path, FILE, st.st_mode & 0o777))
            else:
                raise BuildFolderError(f"{relative} is not a regular file, folder or link")
    # Depth first, each level bytewise: a folder's entries right after it.
    return sorted(entries, key=lambda e: tuple(os.fsencode(part) for part in e.path.split("/")))
