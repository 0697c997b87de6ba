"""The layout of a ``mux-<target>/`` build folder: the names every release tool agrees on.

A build folder (docs/contracts.md) holds the ``mux`` executable at its top (PyInstaller's
bootloader, or a stand-in's ``sh`` launcher starting with :data:`LAUNCHER_HEADER`), the build
info where :mod:`updater.config.buildfolder` puts it (read back by :func:`read_build_info`),
each pinned artifact as ``vendor/<pin name>/<asset>`` (:data:`VENDOR_DIR_NAME`), and its bill:
``THIRD_PARTY_NOTICES.md`` (:data:`updater.config.buildinfo.NOTICES_NAME`) and the SBOM
(:data:`SBOM_NAME`). Its archive's one top folder is :func:`build_folder_name`. The builders
write this layout; the inventory, the packager and the checks read it.
"""

from __future__ import annotations

import json
from pathlib import Path

from updater.config.buildfolder import BUILD_INFO_NAME, CODE_PACKAGE, build_infos_in, the_build_info
from updater.config.buildinfo import BuildInfo
from updater.errors import MuxError, ParseError
from updater.formats.models import archive_folder

SBOM_NAME = "sbom.cdx.json"  # inside a build folder (and so in every archive)
# Where pinned artifacts go inside a build folder: vendor/<pin name>/<asset>.
VENDOR_DIR_NAME = "vendor"
# How the inventory knows a stand-in's launcher (its first lines).
LAUNCHER_HEADER = """\
#!/bin/sh
# mux stand-in launcher (mux-release build --standin): runs the updater package next to it.
"""


class PackageError(MuxError):
    """Build folders cannot be packaged into a release (not release builds, or not together)."""


def build_folder_name(target: str) -> str:
    return archive_folder(target)  # the archive's one top folder (docs/contracts.md)


def read_build_info(build_dir: Path) -> BuildInfo:
    """The build info baked into a build folder, where the one rule puts it
    (:mod:`updater.config.buildfolder`)."""
    listed = build_infos_in(str(build_dir))
    relative = the_build_info(listed)
    if relative is None:
        raise PackageError(
            f"{build_dir} holds {len(listed)} {CODE_PACKAGE}/{BUILD_INFO_NAME} files, expected "
            f"exactly one, as <code folder>/{CODE_PACKAGE}/{BUILD_INFO_NAME}"
        )
    found = Path(build_dir, relative)
    try:
        info = BuildInfo.from_json(json.loads(found.read_bytes()))
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise ParseError(f"{found} is not valid build info ({exc})") from None
    if info.development:
        raise PackageError(f"{build_dir} is a development build; build it with mux-release build")
    return info
