"""The deterministic archive of a build folder, and the one time a release's files carry.

:func:`write_archive` turns a ``mux-<target>/`` build folder into ``mux-<target>.tar.gz``:
the same folder gives the same bytes (sorted members, mtime 0 or ``SOURCE_DATE_EPOCH``, owner
0/0 with empty names, modes 0755/0644, gzip without name or timestamp), so anyone can rebuild
and compare (:mod:`release.build.reproduce`). :func:`source_date_epoch` is that time, also the
SBOM's and the signatures' when set.
"""

from __future__ import annotations

import gzip
import os
import tarfile
from pathlib import Path

from release.folder.layout import build_folder_name
from release.folder.walk import DIRECTORY, LINK, build_files
from updater.errors import UsageError


def source_date_epoch() -> int:
    """``SOURCE_DATE_EPOCH`` (reproducible-builds.org) when set, else 0."""
    raw = os.environ.get("SOURCE_DATE_EPOCH", "")
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(f"SOURCE_DATE_EPOCH={raw[:30]!r} is not an integer") from None
    if value < 0:
        raise UsageError("SOURCE_DATE_EPOCH must not be negative")
    return value


def _tar_info(name: str, mode: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = mode
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_archive(build_dir: Path, target: str, destination: Path) -> None:
    """A deterministic ``.tar.gz`` of ``build_dir`` with every member under ``mux-<target>/``."""
    root = Path(build_dir).resolve()
    top = build_folder_name(target)
    mtime = source_date_epoch()
    with (
        open(destination, "wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        directory = _tar_info(top, 0o755, mtime)
        directory.type = tarfile.DIRTYPE
        tar.addfile(directory)
        # The folder's entries by one rule for all tools (release.folder.walk): a link stays
        # inside and names a file, so the updater's unpacking accepts it.
        for entry in build_files(root, directories=True):
            name = f"{top}/{entry.path}"
            if entry.kind == LINK:
                info = _tar_info(name, 0o777, mtime)
                info.type = tarfile.SYMTYPE
                info.linkname = str(entry.link)
                tar.addfile(info)
            elif entry.kind == DIRECTORY:
                info = _tar_info(name, 0o755, mtime)
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info = _tar_info(name, 0o755 if entry.mode & 0o111 else 0o644, mtime)
                info.size = entry.absolute.stat().st_size
                with open(entry.absolute, "rb") as stream:
                    tar.addfile(info, stream)
