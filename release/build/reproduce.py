"""Reproducible builds as a checked property: two builds of one commit must be identical.

:func:`compare_builds` packages two build folders of the same target the deterministic way
(:func:`release.folder.archive.write_archive`, ``SOURCE_DATE_EPOCH`` for member times) and compares
the archives byte for byte; when they differ it names the files whose bytes, modes or links
differ, so the report says what is not reproducible. ``mux-release compare-builds A B`` runs it
(the release workflow compares a second, independent build of one target with the first;
the rehearsal builds one version twice). docs/release.md says what is fixed and what is not.

Each build job records the machine it ran on (the runner image: ``ImageOS``,
``ImageVersion``; a container's image) in a small JSON file beside the build. The runner image
is not something a build can fix (docs/release.md): two builds that differ on two different
images are reported as *not comparable*, with the files that differ, instead of failing the
release on an image rollout between the two jobs; on the same image a difference fails.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from release.folder.archive import write_archive
from release.folder.layout import read_build_info
from release.folder.walk import DIRECTORY, LINK, build_files
from release.textdiff import name_some
from updater.errors import MuxError, ParseError
from updater.files import sha256_file

MAX_NAMED = 10
MAX_ENVIRONMENT_BYTES = 64 * 1024


class NotReproducible(MuxError):
    """Two builds of the same source differ."""


@dataclass(frozen=True)
class Comparison:
    archive_sha256: str  # the first build's archive
    files: int
    differing: tuple[str, ...] = ()  # empty: identical
    not_comparable: str | None = None  # why a difference does not count (different machines)

    @property
    def identical(self) -> bool:
        return not self.differing

    def describe(self) -> str:
        if self.identical:
            return (
                f"the builds are identical: {self.files} entries, archive sha256 "
                f"{self.archive_sha256}"
            )
        return (
            f"not comparable: {self.not_comparable}; they differ in "
            f"{name_some(self.differing, MAX_NAMED)}"
        )


def read_environment(path: Path) -> dict[str, str]:
    """A build's recorded machine: a JSON object of strings (written by the build job)."""
    try:
        with open(path, "rb") as stream:
            raw = stream.read(MAX_ENVIRONMENT_BYTES + 1)
        doc = json.loads(raw)
    except OSError as exc:
        raise ParseError(f"cannot read {path}: {exc.strerror}") from None
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ParseError(f"{path} is not JSON") from None
    if len(raw) > MAX_ENVIRONMENT_BYTES or not isinstance(doc, dict):
        raise ParseError(f"{path} is not a build environment (a small JSON object)")
    return {str(key): str(value) for key, value in doc.items()}


def _environment_difference(first: Mapping[str, str], second: Mapping[str, str]) -> str | None:
    keys = sorted(set(first) | set(second))
    changed = [
        f"{k}: {first.get(k, '-')} != {second.get(k, '-')}"
        for k in keys
        if first.get(k) != second.get(k)
    ]
    if not changed:
        return None
    return "the builds ran on different machines (" + "; ".join(changed) + ")"


def _listing(root: Path) -> dict[str, tuple[str, str]]:
    """``{path: (kind+mode, sha256 or link target)}`` of every entry below ``root``."""
    found: dict[str, tuple[str, str]] = {}
    for entry in build_files(root, directories=True):
        if entry.kind == LINK:
            found[entry.path] = ("link", str(entry.link))
        elif entry.kind == DIRECTORY:
            found[entry.path] = ("dir", "")
        else:
            kind = "exec" if entry.mode & 0o111 else "file"
            found[entry.path] = (kind, sha256_file(entry.absolute))
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


def compare_builds(
    first: Path,
    second: Path,
    environments: tuple[Mapping[str, str], Mapping[str, str]] | None = None,
) -> Comparison:
    """Package both build folders and compare the archives; raise :class:`NotReproducible`
    unless they are identical or (``environments``) were made on different machines."""
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
    entries = len(_listing(Path(first)))
    if archives[0] == archives[1]:
        return Comparison(archives[0], entries)
    differ = tuple(differing_files(Path(first), Path(second))) or ("only the archive metadata",)
    reason = _environment_difference(*environments) if environments is not None else None
    if reason is not None:
        return Comparison(archives[0], entries, differ, reason)
    raise NotReproducible(
        f"the two builds of mux {infos[0].version} for {infos[0].target} differ: "
        f"{name_some(differ, MAX_NAMED)}",
        hint="see docs/release.md (reproducible builds) for what must be fixed",
    )
