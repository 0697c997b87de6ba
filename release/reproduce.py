"""Reproducible builds as a checked property: two builds of one commit must be identical.

:func:`compare_builds` packages two build folders of the same target the deterministic way
(:func:`release.package.write_archive`, ``SOURCE_DATE_EPOCH`` for member times) and compares
the archives byte for byte; when they differ it names the files whose bytes, modes or links
differ, so the report says what is not reproducible. ``mux-release compare-builds A B`` runs it
(the release workflow compares a second, independent build of one target with the first;
the rehearsal builds one version twice). docs/release.md says what is fixed and what is not.
"""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from updater.errors import MuxError
from updater.files import sha256_file

MAX_NAMED = 10


class NotReproducible(MuxError):
    """Two builds of the same source differ."""


@dataclass(frozen=True)
class Comparison:
    archive_sha256: str
    files: int


def _listing(root: Path) -> dict[str, tuple[str, str]]:
    """``{path: (kind+mode, sha256 or link target)}`` of every entry below ``root``."""
    found: dict[str, tuple[str, str]] = {}
    for directory, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(directory, name)
            relative = path.relative_to(root).as_posix()
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                found[relative] = ("link", os.readlink(path))
            elif stat.S_ISDIR(mode):
                found[relative] = ("dir", "")
            else:
                kind = "exec" if mode & 0o111 else "file"
                found[relative] = (kind, sha256_file(path))
    return found


def differing_files(first: Path, second: Path) -> list[str]:
    one, two = _listing(Path(first)), _listing(Path(second))
    names = sorted(set(one) | set(two), key=os.fsencode)
    problems = []
    for name in names:
        if name not in two:
            problems.append(f"{name} (only in the first)")
        elif name not in one:
            problems.append(f"{name} (only in the second)")
        elif one[name] != two[name]:
            problems.append(name)
    return problems


def compare_builds(first: Path, second: Path) -> Comparison:
    """Package both build folders and compare the archives; raise :class:`NotReproducible`."""
    from .package import read_build_info, write_archive

    infos = [read_build_info(Path(folder)) for folder in (first, second)]
    if infos[0].target != infos[1].target or infos[0].version != infos[1].version:
        raise MuxError(
            f"{first} is mux {infos[0].version} for {infos[0].target}, {second} is mux "
            f"{infos[1].version} for {infos[1].target}: compare two builds of one version"
        )
    with tempfile.TemporaryDirectory(prefix="mux-compare-") as scratch:
        archives = []
        for index, folder in enumerate((first, second)):
            archive = Path(scratch, f"{index}.tar.gz")
            write_archive(Path(folder), infos[0].target, archive)
            archives.append(sha256_file(archive))
    if archives[0] == archives[1]:
        return Comparison(archives[0], len(_listing(Path(first))))
    differ = differing_files(Path(first), Path(second))
    named = ", ".join(differ[:MAX_NAMED]) or "only the archive metadata"
    more = f" (and {len(differ) - MAX_NAMED} more)" if len(differ) > MAX_NAMED else ""
    raise NotReproducible(
        f"the two builds of mux {infos[0].version} for {infos[0].target} differ: {named}{more}",
        hint="see docs/release.md (reproducible builds) for what must be fixed",
    )
