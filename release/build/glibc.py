"""The glibc floor of the Linux (gnu) builds: the one place it is decided, and its check.

A gnu build runs on every Linux whose glibc is at least the highest ``GLIBC_x.y`` version any
of its ELF files asks for (the dynamic linker refuses older ones with "version `GLIBC_2.34'
not found"). The floor is :data:`GLIBC_FLOOR` (manylinux2014); from it follow

* the wheel platform a gnu build job installs for (:func:`wheel_platform`, e.g.
  ``x86_64-manylinux_2_17``: ``python3 -m release.build.glibc wheel-platform TARGET`` prints
  it for the workflow before anything is installed, so this module needs only the standard
  library at import time);
* what a gnu build takes from the system instead of shipping it (:data:`SYSTEM_LIBRARIES`,
  :func:`leave_out_system_libraries`): ``libgcc_s.so.1``. glibc itself loads it (unwinding,
  ``pthread_cancel``, ``pthread_exit``) and every distribution installs it with glibc
  (Debian's ``libc6`` depends on ``libgcc-s1``, Red Hat's ``glibc`` on ``libgcc``); the
  manylinux wheels mux freezes link the system's copy, as the manylinux policy (PEP 599) lets
  them. PyInstaller would copy the build machine's, and a new one asks for a new glibc
  (Debian 12's needs ``GLIBC_2.35`` for ``_dl_find_object``), so the build leaves it out;
  what the build asks of the system's copy is checked instead: no ``GCC_x.y`` symbol version
  newer than :data:`LIBGCC_FLOOR`, the libgcc_s of the floor's oldest system (CentOS 7, GCC
  4.8);
* the check: :func:`required_glibc` reads each ELF file's dynamic symbols with ``objdump -T``
  (binutils) and :func:`check_glibc_floor` (``mux-release glibc DIR``) fails naming every file
  that needs more. Parsing is pure (:func:`glibc_versions`, :func:`libgcc_versions`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from release.folder.walk import build_files
from release.textdiff import name_some
from updater.errors import MuxError, UsageError

if TYPE_CHECKING:
    from packaging.version import Version

# manylinux2014: CentOS/RHEL 7 and later, Amazon Linux 2, Debian 10+, Ubuntu 18.04+.
GLIBC_FLOOR = "2.17"
# The newest GCC_x.y symbol version of the libgcc_s.so.1 such a system has (GCC 4.8.5).
LIBGCC_FLOOR = "4.8.0"
SYSTEM_LIBRARIES = frozenset({"libgcc_s.so.1"})

_GLIBC_RE = re.compile(r"\bGLIBC_([0-9]+\.[0-9]+(?:\.[0-9]+)?)\b")
_LIBGCC_RE = re.compile(r"\bGCC_([0-9]+\.[0-9]+(?:\.[0-9]+)?)\b")
_ELF_MAGIC = b"\x7fELF"
MAX_NAMED = 5


class GlibcError(MuxError):
    """A build needs a newer glibc than allowed, or cannot be read."""


def wheel_platform(target: str, floor: str = GLIBC_FLOOR) -> str:
    """The ``uv --python-platform`` a gnu build of ``target`` installs wheels for (pure)."""
    arch, _, system = target.partition("-")
    if not system.endswith("-linux-gnu"):
        raise UsageError(f"{target} is not a Linux gnu target")
    major, minor = floor.split(".")
    return f"{arch}-manylinux_{major}_{minor}"


def _parse(text: str) -> Version:
    # deferred: the build job runs `python3 -S -m release.build.glibc wheel-platform` before anything is installed: the standard library only
    from packaging.version import Version

    return Version(text)


def glibc_versions(objdump_output: str) -> set[Version]:
    """Every ``GLIBC_x.y`` version in ``objdump -T`` output (pure)."""
    return {_parse(v) for v in _GLIBC_RE.findall(objdump_output)}


def libgcc_versions(objdump_output: str) -> set[Version]:
    """Every ``GCC_x.y`` (libgcc_s) symbol version in ``objdump -T`` output (pure)."""
    return {_parse(v) for v in _LIBGCC_RE.findall(objdump_output)}


@dataclass(frozen=True)
class GlibcRequirement:
    version: Version | None  # None: no ELF file asks for a versioned glibc symbol
    files: tuple[str, ...]  # the files that ask for exactly that version
    elf_files: int
    by_file: tuple[tuple[str, Version], ...] = ()  # each ELF file's newest glibc version
    libgcc: tuple[tuple[str, Version], ...] = ()  # each ELF file's newest GCC_ version

    def above(self, floor: str) -> list[tuple[str, Version]]:
        limit = _parse(floor)
        return [(name, v) for name, v in self.by_file if v > limit]

    def libgcc_above(self, floor: str) -> list[tuple[str, Version]]:
        limit = _parse(floor)
        return [(name, v) for name, v in self.libgcc if v > limit]

    def describe(self) -> str:
        if self.version is None:
            return f"{self.elf_files} ELF files, none needs a versioned glibc symbol"
        return (
            f"needs glibc {self.version} ({self.elf_files} ELF files; the newest symbols are "
            f"asked for by {name_some(self.files, MAX_NAMED)})"
        )


def _elf_files(folder: Path) -> list[Path]:
    found = []
    for entry in build_files(folder):
        if entry.link is not None:
            continue  # its target is a file of the folder, read once under its own name
        with open(entry.absolute, "rb") as stream:
            if stream.read(4) == _ELF_MAGIC:
                found.append(entry.absolute)
    return found


def required_glibc(folder: Path) -> GlibcRequirement:
    objdump = shutil.which("objdump")
    if objdump is None:
        raise GlibcError("objdump is not installed", hint="Debian: apt-get install binutils")
    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder")
    by_file: dict[str, Version] = {}
    libgcc: dict[str, Version] = {}
    elf = _elf_files(folder)
    for path in elf:
        done = subprocess.run(
            [objdump, "-T", str(path)], capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            raise GlibcError(f"objdump cannot read {path}: {done.stderr.strip()[:200]}")
        name = path.relative_to(folder).as_posix()
        if versions := glibc_versions(done.stdout):
            by_file[name] = max(versions)
        if versions := libgcc_versions(done.stdout):
            libgcc[name] = max(versions)
    newest = max(by_file.values(), default=None)
    files = tuple(sorted(name for name, v in by_file.items() if v == newest))
    return GlibcRequirement(
        newest, files, len(elf), tuple(sorted(by_file.items())), tuple(sorted(libgcc.items()))
    )


def check_glibc_floor(folder: Path, floor: str = GLIBC_FLOOR) -> GlibcRequirement:
    """``required_glibc``, failing when the build needs more than ``floor`` (naming every file
    above it, with what it needs) or more of the system's libgcc_s than :data:`LIBGCC_FLOOR`."""
    # deferred: the build job runs `python3 -S -m release.build.glibc wheel-platform` before anything is installed: the standard library only
    from packaging.version import InvalidVersion

    try:
        _parse(floor)
    except InvalidVersion:
        raise UsageError(f"--max {floor!r} is not a version like {GLIBC_FLOOR}") from None
    requirement = required_glibc(folder)
    # The neediest first: what to fix comes first in a one-line message.
    above = sorted(requirement.above(floor), key=lambda item: item[1], reverse=True)
    if above:
        raise GlibcError(
            f"{folder} {requirement.describe()}, above the floor glibc {floor}: "
            + name_some([f"{name} ({version})" for name, version in above], MAX_NAMED),
            hint=f"build with wheels for the floor (uv sync --python-platform "
            f"{wheel_platform('<arch>-unknown-linux-gnu', floor)}), python-build-standalone, "
            "and no system library but glibc's and libgcc_s (docs/release.md)",
        )
    newer_libgcc = requirement.libgcc_above(LIBGCC_FLOOR)
    if newer_libgcc:
        raise GlibcError(
            f"{folder} asks the system's libgcc_s.so.1 for more than GCC_{LIBGCC_FLOOR}: "
            + name_some([f"{name} (GCC_{version})" for name, version in newer_libgcc], MAX_NAMED),
            hint="the oldest systems of the glibc floor have GCC 4.8's libgcc_s (docs/release.md)",
        )
    return requirement


def leave_out_system_libraries(folder: Path) -> list[str]:
    """Remove from a gnu build what every glibc system provides (:data:`SYSTEM_LIBRARIES`),
    and any link to it; returns the removed paths (relative, sorted)."""
    entries = build_files(folder)
    libraries = {
        entry.path
        for entry in entries
        if entry.link is None and PurePosixPath(entry.path).name in SYSTEM_LIBRARIES
    }
    removed = [
        entry
        for entry in entries
        if entry.path in libraries
        or (entry.target in libraries or PurePosixPath(entry.path).name in SYSTEM_LIBRARIES)
    ]
    for entry in removed:
        entry.absolute.unlink()
    return [entry.path for entry in removed]


def main(argv: Sequence[str] | None = None) -> int:
    """``python3 -m release.build.glibc wheel-platform TARGET``: for the workflow, before the
    release tooling's dependencies are installed (standard library only)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "wheel-platform":
        print("usage: python3 -m release.build.glibc wheel-platform TARGET", file=sys.stderr)
        return 2
    try:
        print(wheel_platform(args[1]))
    except UsageError as exc:
        print(f"release.build.glibc: {exc.message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
