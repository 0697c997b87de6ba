"""The newest glibc a Linux (gnu) build needs: the highest ``GLIBC_`` symbol version.

A gnu build runs on every Linux whose glibc is at least the highest ``GLIBC_x.y`` version any
of its ELF files asks for (the dynamic linker refuses older ones with "version `GLIBC_2.34'
not found"). :func:`required_glibc` reads each ELF file's dynamic symbol table with
``objdump -T`` (binutils) and returns that version with the files that need it;
``mux-release glibc DIR --max 2.17`` fails when a build needs more than the documented floor
(docs/release.md), naming the files. Parsing is pure (:func:`glibc_versions`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from updater.errors import MuxError, UsageError

# The floor the release builds for (manylinux2014: CentOS 7, RHEL 7+, Amazon Linux 2, Debian 10+,
# Ubuntu 18.04+); the release workflow checks every gnu build against it.
GLIBC_FLOOR = "2.17"
_SYMBOL_VERSION_RE = re.compile(r"\bGLIBC_([0-9]+\.[0-9]+(?:\.[0-9]+)?)\b")
_ELF_MAGIC = b"\x7fELF"


class GlibcError(MuxError):
    """A build needs a newer glibc than allowed, or cannot be read."""


@dataclass(frozen=True)
class GlibcRequirement:
    version: Version | None  # None: no ELF file asks for a versioned glibc symbol
    files: tuple[str, ...]  # the files that ask for exactly that version
    elf_files: int

    def describe(self) -> str:
        if self.version is None:
            return f"{self.elf_files} ELF files, none needs a versioned glibc symbol"
        return (
            f"needs glibc {self.version} ({self.elf_files} ELF files; the newest symbols are "
            f"asked for by {', '.join(self.files[:5])}"
            + (f" and {len(self.files) - 5} more" if len(self.files) > 5 else "")
            + ")"
        )


def glibc_versions(objdump_output: str) -> set[Version]:
    """Every ``GLIBC_x.y`` version in ``objdump -T`` output (pure)."""
    return {Version(v) for v in _SYMBOL_VERSION_RE.findall(objdump_output)}


def _elf_files(folder: Path) -> Iterable[Path]:
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        with open(path, "rb") as stream:
            if stream.read(4) == _ELF_MAGIC:
                yield path


def required_glibc(folder: Path) -> GlibcRequirement:
    objdump = shutil.which("objdump")
    if objdump is None:
        raise GlibcError("objdump is not installed", hint="Debian: apt-get install binutils")
    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder")
    newest: Version | None = None
    by_file: dict[str, Version] = {}
    count = 0
    for path in _elf_files(folder):
        count += 1
        done = subprocess.run(
            [objdump, "-T", str(path)], capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            raise GlibcError(f"objdump cannot read {path}: {done.stderr.strip()[:200]}")
        versions = glibc_versions(done.stdout)
        if versions:
            top = max(versions)
            by_file[path.relative_to(folder).as_posix()] = top
            newest = top if newest is None or top > newest else newest
    files = tuple(sorted(name for name, v in by_file.items() if v == newest))
    return GlibcRequirement(newest, files, count)


def check_glibc_floor(folder: Path, floor: str = GLIBC_FLOOR) -> GlibcRequirement:
    """``required_glibc``, failing when the build needs more than ``floor``."""
    try:
        limit = Version(floor)
    except ValueError:
        raise UsageError(f"--max {floor!r} is not a version like 2.17") from None
    requirement = required_glibc(folder)
    if requirement.version is not None and requirement.version > limit:
        raise GlibcError(
            f"{folder} {requirement.describe()}, above the floor glibc {limit}",
            hint="build with wheels for the floor (uv sync --python-platform "
            "<arch>-manylinux_2_17) and python-build-standalone (docs/release.md)",
        )
    return requirement
