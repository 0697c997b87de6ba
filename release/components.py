"""What a build folder is made of: the components its notices and SBOM list.

One :class:`Component` per thing a build ships (mux, a Python distribution, CPython, the
bootloader, a shared library, a pinned artifact), of one :class:`ComponentKind`. The inventory
(:mod:`release.inventory`) finds them, the notices (:mod:`release.notices`) and the SBOM
(:mod:`release.sbom`) render them; the kinds are spelled here only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from release.notices import LicenceText


class ComponentKind(StrEnum):
    APPLICATION = "application"  # mux itself
    DISTRIBUTION = "python-distribution"
    RUNTIME = "runtime"  # CPython, PyInstaller's bootloader
    LIBRARY = "shared-library"
    PINNED = "pinned-artifact"


# How each kind was matched to the file it owns, for the SBOM (``mux:mapped-by``): by exact
# bytes (a pin's sha256, a RECORD hash, a system package's file), by a path a package lists,
# or by name alone (the documented table: weaker, so marked).
MAPPED_BY_BYTES = "bytes"
MAPPED_BY_PATH = "path"
MAPPED_BY_NAME = "name"


@dataclass(frozen=True)
class Component:
    """Something a build ships. ``key`` is stable and unique (``python:cryptography``,
    ``deb:libssl3``, ``pin:libfoo``); ``purl`` a Package URL when there is a natural one."""

    key: str
    kind: ComponentKind
    name: str
    version: str
    licence: str
    role: str
    licence_texts: tuple[LicenceText, ...] = ()
    purl: str | None = None
    source: str | None = None  # where it came from: a package, a URL, a table entry
    mapped_by: str = MAPPED_BY_PATH  # how its files were matched to it
