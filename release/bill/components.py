"""What a build folder is made of: the components its notices and SBOM list, and their licence
texts.

One :class:`Component` per thing a build ships (mux, a Python distribution, CPython, the
bootloader, a shared library, a pinned artifact), of one :class:`ComponentKind`, carrying the
:class:`LicenceText` files that hold its terms. The inventory (:mod:`release.bill.inventory`)
finds them, the notices (:mod:`release.bill.third_party_notices`) and the SBOM (:mod:`release.bill.sbom`)
render them; the kinds are spelled here only, and so is how a licence file becomes text
(:func:`normalise_text`) and the identifier the notices give each distinct text.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum

TEXT_ID_LENGTH = 12


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
class LicenceText:
    """One licence file: where it comes from (a stable label) and its normalised text."""

    label: str
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @property
    def text_id(self) -> str:
        return self.sha256[:TEXT_ID_LENGTH]


def normalise_text(raw: bytes) -> str:
    """Licence bytes to text: UTF-8 (else Latin-1), no BOM, LF, no trailing blanks."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    lines = [line.rstrip() for line in text.split("\n")]
    return "\n".join(lines).strip("\n") + "\n"


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
