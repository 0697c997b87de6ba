"""The CycloneDX SBOM of a build, from the same inventory as its notices.

:func:`render_sbom` (cyclonedx-python-lib, CycloneDX 1.6 JSON) lists every component of a
build folder (:mod:`release.bill.inventory`) with its licence and Package URL, and nests under each
component the files of the folder that come from it, each with its SHA-256: the SBOM is the
build's file list. It is deterministic: the serial number is derived from the content, the
timestamp is ``SOURCE_DATE_EPOCH`` (else 0), so two builds of one commit give the same bytes.

Reading (:func:`sbom_files`, :func:`check_sbom_matches`) needs only the standard library, so
``mux-release verify`` checks a release's SBOMs without the generator installed.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.licenses import InvalidLicenseExpression, canonicalize_license_expression

from release.bill.components import ComponentKind
from release.folder.archive import source_date_epoch
from release.folder.layout import SBOM_NAME
from release.folder.walk import BuildFolderError, build_files
from release.textdiff import name_some
from updater.errors import NetworkError, ParseError, VerificationError
from updater.files import sha256_file

if TYPE_CHECKING:
    from release.bill.components import Component
    from release.bill.inventory import Inventory, ShippedFile
    from updater.sources.base import ReleaseSource
    from updater.trust.layers import VerificationLog, VerifiedRelease

MAX_SBOM_BYTES = 16 * 1024 * 1024
LAYER_SBOM = "sbom"


def sbom_asset_name(target: str) -> str:
    """The SBOM of ``mux-<target>.tar.gz`` as a release file."""
    return f"mux-{target}.cdx.json"


def _licences(expression: str) -> list[Any]:
    # deferred: cyclonedx takes 0.19 s to import; only an SBOM needs it
    from cyclonedx.model.license import (
        DisjunctiveLicense,
        LicenseExpression,
    )

    try:
        return [LicenseExpression(canonicalize_license_expression(expression))]
    except InvalidLicenseExpression:
        return [DisjunctiveLicense(name=expression)]


def _file_component(shipped: ShippedFile) -> Any:
    # deferred: cyclonedx takes 0.19 s to import; only an SBOM needs it
    from cyclonedx.model import (
        HashAlgorithm,
        HashType,
    )
    from cyclonedx.model.component import (
        Component,
        ComponentType,
    )

    return Component(
        name=shipped.path,
        type=ComponentType.FILE,
        bom_ref=f"file:{shipped.path}",
        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=shipped.sha256)],
    )


def _component(component: Component, files: list[ShippedFile]) -> Any:
    # deferred: cyclonedx takes 0.19 s to import; only an SBOM needs it
    from cyclonedx.model import (
        Property,
    )
    from cyclonedx.model.component import (
        Component as CdxComponent,
    )
    from cyclonedx.model.component import (
        ComponentType,
    )

    # deferred: with cyclonedx, only an SBOM needs it
    from packageurl import PackageURL

    kinds = {
        ComponentKind.APPLICATION: ComponentType.APPLICATION,
        ComponentKind.RUNTIME: ComponentType.FRAMEWORK,
    }
    return CdxComponent(
        name=component.name,
        version=component.version,
        type=kinds.get(component.kind, ComponentType.LIBRARY),
        bom_ref=component.key,
        description=component.role,
        licenses=_licences(component.licence),
        purl=PackageURL.from_string(component.purl) if component.purl else None,
        # How its files were matched to it: by bytes, by a path a package lists, or by a file
        # name alone (the documented table, no package owning those bytes): weaker evidence.
        properties=[Property(name="mux:mapped-by", value=component.mapped_by)],
        components=[_file_component(f) for f in files],
    )


def render_sbom(
    inventory: Inventory,
    extra_files: tuple[ShippedFile, ...] = (),
    *,
    timestamp: datetime | None = None,
) -> str:
    """The build's SBOM; ``extra_files`` (the notices beside it) join mux's own files.

    ``timestamp`` defaults to ``SOURCE_DATE_EPOCH`` (else 0); a check of a finished build passes
    the one its SBOM carries (:func:`sbom_timestamp`): the time is when it was built, not
    checked.
    """
    # deferred: cyclonedx takes 0.19 s to import; only an SBOM needs it
    from cyclonedx.model import (
        Property,
    )
    from cyclonedx.model.bom import (
        Bom,
        BomMetaData,
    )
    from cyclonedx.model.component import (
        Component as CdxComponent,
    )
    from cyclonedx.model.component import (
        ComponentType,
    )
    from cyclonedx.output.json import (
        JsonV1Dot6,
    )

    files = [*inventory.files, *extra_files]
    listing = "".join(f"{f.sha256}  {f.path}\n" for f in sorted(files, key=lambda f: f.path))
    serial = uuid.uuid5(
        uuid.NAMESPACE_URL,
        f"mux-sbom:{inventory.version}:{inventory.target}:"
        + hashlib.sha256(listing.encode()).hexdigest(),
    )
    build = CdxComponent(
        name=f"mux-{inventory.target}",
        version=inventory.version,
        type=ComponentType.APPLICATION,
        bom_ref="build",
        description=f"the mux {inventory.version} build for {inventory.target}",
        properties=[
            Property(name="mux:target", value=inventory.target),
            Property(name="mux:standalone", value=str(inventory.standalone).lower()),
        ],
    )
    metadata = BomMetaData(
        component=build,
        timestamp=timestamp or datetime.fromtimestamp(source_date_epoch(), UTC),
    )
    bom = Bom(serial_number=serial, metadata=metadata)
    parts = []
    for component in inventory.components:
        owned = [f for f in files if f.component == component.key]
        part = _component(component, owned)
        bom.components.add(part)
        parts.append(part)
    bom.register_dependency(build, parts)
    text = JsonV1Dot6(bom).output_as_string(indent=2)
    # Canonical form: the library's key order is stable, but sorting keys makes the bytes
    # independent of its version's choices too.
    return json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"


# --- reading (standard library only) --------------------------------------------------------


def sbom_timestamp(raw: bytes) -> datetime | None:
    """The ``metadata.timestamp`` of a CycloneDX JSON SBOM, or None when it has none."""
    try:
        doc = json.loads(raw)
        return datetime.fromisoformat(doc["metadata"]["timestamp"])
    except (ValueError, UnicodeDecodeError, RecursionError, KeyError, TypeError):
        return None


def _walk(components: Any) -> Iterator[Mapping[str, Any]]:
    for component in components if isinstance(components, list) else []:
        if isinstance(component, Mapping):
            yield component
            yield from _walk(component.get("components"))


def sbom_files(raw: bytes, *, what: str = "the SBOM") -> dict[str, str]:
    """``{path: sha256}`` of every file component of a CycloneDX JSON SBOM."""
    if len(raw) > MAX_SBOM_BYTES:
        raise ParseError(f"{what} is larger than {MAX_SBOM_BYTES} bytes")
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ParseError(f"{what} is not valid JSON") from None
    if not isinstance(doc, dict) or doc.get("bomFormat") != "CycloneDX":
        raise ParseError(f"{what} is not a CycloneDX document")
    files: dict[str, str] = {}
    for component in _walk(doc.get("components")):
        if component.get("type") != "file":
            continue
        name = component.get("name")
        digests = [
            h.get("content")
            for h in component.get("hashes") or []
            if isinstance(h, Mapping) and h.get("alg") == "SHA-256"
        ]
        if not isinstance(name, str) or len(digests) != 1 or not isinstance(digests[0], str):
            raise ParseError(f"{what} has a file without a name and one SHA-256")
        if name in files:
            raise ParseError(f"{what} lists {name} twice")
        files[name] = digests[0]
    return files


def folder_files(folder: Path, *, skip: tuple[str, ...] = (SBOM_NAME,)) -> dict[str, str]:
    """``{path: sha256}`` of every file (and link, by its target) below ``folder``, as
    :func:`release.folder.walk.build_files` lists them (one rule for links everywhere)."""
    return {
        entry.path: sha256_file(entry.content)
        for entry in build_files(folder)
        if entry.path not in skip
    }


def check_sbom_matches(raw: bytes, folder: Path, *, what: str) -> int:
    """The SBOM lists exactly the files of ``folder`` (but itself), with their SHA-256s.

    Returns how many files it lists; a difference is a :class:`VerificationError` naming the
    first few files that differ.
    """
    try:
        listed = sbom_files(raw, what=what)
    except ParseError as exc:
        raise VerificationError(f"verification failed ({LAYER_SBOM}): {exc.message}") from None
    try:
        present = folder_files(folder)
    except BuildFolderError as exc:
        raise VerificationError(f"verification failed ({LAYER_SBOM}): {exc.message}") from None
    problems = [f"{p} is not in the SBOM" for p in sorted(set(present) - set(listed))]
    problems += [
        f"{p} is in the SBOM but not in the build" for p in sorted(set(listed) - set(present))
    ]
    problems += [
        f"{p} has sha256 {present[p][:12]}…, the SBOM says {listed[p][:12]}…"
        for p in sorted(set(present) & set(listed))
        if present[p] != listed[p]
    ]
    if problems:
        raise VerificationError(
            f"verification failed ({LAYER_SBOM}): {what} does not match the build: "
            + name_some(problems, 3, "; ")
        )
    return len(listed)


def check_release_sbom(
    source: ReleaseSource,
    release: VerifiedRelease,
    target: str,
    unpacked: Path,
    *,
    log: VerificationLog,
) -> None:
    """``mux-release verify``, right after the archive of ``target`` was unpacked: the
    release's SBOM of that target is listed in the (verified) ``SHA256SUMS``, has that digest,
    and lists exactly the files of the unpacked archive."""
    name = sbom_asset_name(target)

    def fail(message: str) -> VerificationError:
        return VerificationError(f"verification failed ({LAYER_SBOM}): {message}")

    sums = release.sums
    if name not in sums:
        raise fail(f"SHA256SUMS does not list {name} (every archive ships its SBOM)")
    try:
        raw = source.fetch(release.tag, name, max_size=MAX_SBOM_BYTES)
    except NetworkError as exc:
        raise fail(f"{name} cannot be read: {exc.message}") from None
    actual = hashlib.sha256(raw).hexdigest()
    if actual != sums[name]:
        raise fail(f"{name} has sha256 {actual}, SHA256SUMS says {sums[name]}")
    count = check_sbom_matches(raw, unpacked, what=name)
    log.ok(LAYER_SBOM, f"{name} lists the {count} files of mux-{target}.tar.gz")
