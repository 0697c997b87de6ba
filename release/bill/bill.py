"""The bill of a build folder: its third-party notices and its SBOM, written and checked.

Both come from one :class:`release.bill.inventory.Inventory` of the folder, taken in the environment
that built it: :func:`write_build_bill` (the last step of ``mux-release build``) writes
``THIRD_PARTY_NOTICES.md`` and ``sbom.cdx.json`` at the top of the folder, so they ship in the
archive's version folder; :func:`check_build` (``mux-release notices --check-build DIR``, run by
the release workflow before packaging and by the rehearsal) takes the inventory again and fails
on any file that maps to nothing, naming it, or on notices or an SBOM that differ from what the
folder's content gives now. The SBOM's time says when the build was made (``SOURCE_DATE_EPOCH``
then): the check keeps the time the SBOM carries, so it does not depend on the checker's
environment, and every other byte must be what the folder gives.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from release.bill.inventory import Inventory, ShippedFile, SystemLookup, take_inventory
from release.bill.sbom import render_sbom, sbom_timestamp
from release.bill.third_party_notices import Distribution, render_build_notices
from release.folder.layout import SBOM_NAME
from release.textdiff import name_some
from updater.config.buildinfo import NOTICES_NAME
from updater.errors import MuxError
from updater.files import atomic_write, sha256_file

MAX_NAMED = 10


class UnmappedFilesError(MuxError):
    """A build folder holds files that no notice entry accounts for."""


@dataclass(frozen=True)
class Bill:
    notices: str
    sbom: str
    files: int
    components: int


def _unmapped_error(folder: Path, inventory: Inventory) -> UnmappedFilesError:
    if inventory.unmapped:
        return UnmappedFilesError(
            f"{folder}: {len(inventory.unmapped)} file(s) map to no notice entry: "
            + name_some(inventory.unmapped, MAX_NAMED),
            hint="add the library to release/licenses/shared-libraries.toml, or stop shipping it",
        )
    return UnmappedFilesError(
        f"{folder}: {len(inventory.unknown_modules)} C module(s) of the interpreter are neither "
        "CPython's own code nor linked to a listed library: "
        + name_some(inventory.unknown_modules, MAX_NAMED),
        hint="add each to [cpython] own_modules or to the modules of its library in "
        "release/licenses/shared-libraries.toml",
    )


def compose_bill(
    folder: Path,
    *,
    pins_path: Path | None,
    distributions: Sequence[Distribution] | None = None,
    system_lookup: SystemLookup | None = None,
    built_at: datetime | None = None,
) -> Bill:
    """The notices and SBOM ``folder`` should carry (nothing written); ``built_at`` is the
    SBOM's time (default: ``SOURCE_DATE_EPOCH``, :func:`release.bill.sbom.render_sbom`)."""
    inventory = take_inventory(
        folder, pins_path=pins_path, distributions=distributions, system_lookup=system_lookup
    )
    if inventory.unmapped or inventory.unknown_modules:
        raise _unmapped_error(folder, inventory)
    notices = render_build_notices(
        inventory.components, version=inventory.version, target=inventory.target
    )
    data = notices.encode("utf-8")
    notices_entry = ShippedFile(NOTICES_NAME, hashlib.sha256(data).hexdigest(), len(data), "mux")
    sbom = render_sbom(inventory, (notices_entry,), timestamp=built_at)
    return Bill(notices, sbom, len(inventory.files) + 1, len(inventory.components))


def _write(path: Path, text: str) -> None:
    atomic_write(path, text.encode("utf-8"), mode=0o644)  # shipped files, readable by all


def write_build_bill(
    folder: Path,
    *,
    pins_path: Path | None,
    distributions: Sequence[Distribution] | None = None,
    system_lookup: SystemLookup | None = None,
) -> Bill:
    """Write ``THIRD_PARTY_NOTICES.md`` and ``sbom.cdx.json`` into a build folder."""
    bill = compose_bill(
        folder, pins_path=pins_path, distributions=distributions, system_lookup=system_lookup
    )
    _write(Path(folder) / NOTICES_NAME, bill.notices)
    _write(Path(folder) / SBOM_NAME, bill.sbom)
    return bill


def check_build(
    folder: Path,
    *,
    pins_path: Path | None,
    distributions: Sequence[Distribution] | None = None,
    system_lookup: SystemLookup | None = None,
) -> Bill:
    """Every file maps to an entry, and the shipped notices and SBOM are what it gives now.

    Raises :class:`UnmappedFilesError` naming the unmapped files, or a :class:`MuxError`
    naming the stale document.
    """
    folder = Path(folder)
    try:
        built_at = sbom_timestamp((folder / SBOM_NAME).read_bytes())
    except OSError:
        built_at = None  # no SBOM: reported below
    bill = compose_bill(
        folder,
        pins_path=pins_path,
        distributions=distributions,
        system_lookup=system_lookup,
        built_at=built_at,
    )
    for name, expected in ((NOTICES_NAME, bill.notices), (SBOM_NAME, bill.sbom)):
        path = folder / name
        try:
            current = path.read_bytes()
        except FileNotFoundError:
            raise MuxError(
                f"{folder} has no {name}", hint="build it with mux-release build"
            ) from None
        if current != expected.encode("utf-8"):
            raise MuxError(
                f"{path} is not what the folder's content gives (sha256 "
                f"{sha256_file(path)[:12]}); a file changed after the build",
                hint="rebuild, or find out what changed the folder",
            )
    return bill
