"""What a build folder ships, file by file: the data behind its notices and its SBOM.

:func:`take_inventory` maps every file of a ``mux-<target>/`` build folder to the component it
comes from, in this order (the first rule that claims a file wins):

1. mux itself: its own package (``updater/``, with ``_build_info.json``), a stand-in's launcher
   and entry point, and the two documents written from this inventory
   (``THIRD_PARTY_NOTICES.md``, ``sbom.cdx.json``);
2. a pinned artifact: ``vendor/<name>/<asset>`` whose sha256 is the pin's for this target;
3. a Python distribution of mux's runtime closure: the path (below the build's contents
   folder) or the sha256 of a file its ``RECORD`` lists;
4. CPython: ``libpython*``/``Python``, ``base_library.zip`` and ``python3.X/lib-dynload/*``
   (extension modules the running interpreter has too);
5. the PyInstaller bootloader: the standalone build's ``mux`` executable (its appended archive
   holds the bytecode of mux, the standard library and the distributions above);
6. a shared library: the system package that installed the same bytes (``dpkg -S`` on
   Debian), else the documented table ``release/licenses/shared-libraries.toml``.

A file no rule claims is *unmapped*: ``mux-release notices --check-build`` names it and fails.
Collection does I/O (hashing, ``importlib.metadata``, ``dpkg``); the rules themselves are in
small functions, and rendering (:mod:`release.notices`, :mod:`release.sbom`) is pure.
"""

from __future__ import annotations

import base64
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from updater.errors import MuxError
from updater.files import sha256_file

from .notices import (
    LicenceText,
    NoticesError,
    normalise_text,
)

if TYPE_CHECKING:
    from importlib import metadata

    from .notices import Distribution, RuntimeComponent
    from .pins import Pin

from .sbom import SBOM_NAME

NOTICES_NAME = "THIRD_PARTY_NOTICES.md"
BILL_DOCUMENTS = (NOTICES_NAME, SBOM_NAME)
LIBRARY_TABLE = Path(__file__).resolve().parent / "licenses" / "shared-libraries.toml"
REPO_LICENCE = Path(__file__).resolve().parent.parent / "LICENSE"

KIND_APPLICATION = "application"
KIND_DISTRIBUTION = "python-distribution"
KIND_RUNTIME = "runtime"
KIND_LIBRARY = "shared-library"
KIND_PINNED = "pinned-artifact"

MUX_KEY = "mux"
CPYTHON_KEY = "cpython"
BOOTLOADER_KEY = "pyinstaller-bootloader"

_SHARED_LIBRARY_RE = re.compile(r".+\.(?:so(?:\.[0-9]+)*|dylib)$|^Python$")
_LIBPYTHON_RE = re.compile(r"^(?:libpython3\.[0-9]+t?\.(?:so(?:\.[0-9.]+)?|dylib)|Python)$")


class InventoryError(MuxError):
    """A build folder cannot be inventoried (not a build, unreadable table, ...)."""


@dataclass(frozen=True)
class Component:
    """Something a build ships: mux, a distribution, CPython, the bootloader, a library, a pin.

    ``key`` is stable and unique (``python:cryptography``, ``deb:libssl3``, ``pin:libfoo``);
    ``purl`` a Package URL when there is a natural one.
    """

    key: str
    kind: str
    name: str
    version: str
    licence: str
    role: str
    licence_texts: tuple[LicenceText, ...] = ()
    purl: str | None = None
    source: str | None = None  # where it came from: a package, a URL, a table entry


@dataclass(frozen=True)
class ShippedFile:
    path: str  # relative POSIX path inside the build folder
    sha256: str
    size: int
    component: str  # Component.key
    link: str | None = None  # a symlink's target (then sha256/size are the target's)


@dataclass(frozen=True)
class Inventory:
    target: str
    version: str
    standalone: bool
    components: tuple[Component, ...]
    files: tuple[ShippedFile, ...]
    unmapped: tuple[str, ...] = ()

    def component(self, key: str) -> Component:
        return next(c for c in self.components if c.key == key)

    def files_of(self, key: str) -> list[ShippedFile]:
        return [f for f in self.files if f.component == key]


# --- the documented table of shared libraries ---------------------------------------------


@dataclass(frozen=True)
class LibraryEntry:
    key: str
    name: str
    licence: str
    licence_text: LicenceText
    match: tuple[str, ...]
    modules: tuple[str, ...]

    def matches(self, file_name: str) -> bool:
        return any(fnmatch.fnmatchcase(file_name, pattern) for pattern in self.match)


def load_library_table(path: Path = LIBRARY_TABLE) -> list[LibraryEntry]:
    import tomllib

    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InventoryError(f"cannot read {path}: {exc}") from None
    entries = []
    for key, entry in sorted((doc.get("libraries") or {}).items()):
        try:
            text_path = path.parent / PurePosixPath(entry["license_file"])
            raw = text_path.read_bytes()
            entries.append(
                LibraryEntry(
                    key=key,
                    name=str(entry["name"]),
                    licence=str(entry["license"]),
                    licence_text=LicenceText(
                        f"release/licenses/{entry['license_file']}", normalise_text(raw)
                    ),
                    match=tuple(str(p) for p in entry["match"]),
                    modules=tuple(str(m) for m in entry.get("modules", ())),
                )
            )
        except (KeyError, TypeError, OSError) as exc:
            raise InventoryError(f"{path}: [libraries.{key}] is incomplete ({exc})") from None
    return entries


# --- system packages ------------------------------------------------------------------------


@dataclass(frozen=True)
class SystemPackage:
    """The distribution package that installed a file (found by its exact bytes)."""

    manager: str  # "deb"
    name: str
    version: str
    source_name: str
    arch: str
    licence_text: LicenceText | None


SystemLookup = Callable[[str, str], "SystemPackage | None"]


def _run(command: Sequence[str]) -> str | None:
    try:
        done = subprocess.run(
            list(command), capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def dpkg_lookup(file_name: str, sha256: str) -> SystemPackage | None:
    """The Debian package holding a file named ``file_name`` with exactly these bytes."""
    if shutil.which("dpkg") is None:
        return None
    out = _run(["dpkg", "-S", f"*/{file_name}"])
    for line in (out or "").splitlines():
        owner, sep, path = line.partition(": ")
        if not sep or not path.startswith("/") or Path(path).name != file_name:
            continue
        try:
            if sha256_file(Path(path)) != sha256:
                continue
        except OSError:
            continue
        package = owner.split(",")[0].strip()
        fields = _run(
            [
                "dpkg-query",
                "-W",
                "-f",
                "${Package}\t${Version}\t${source:Package}\t${Architecture}",
                package,
            ]
        )
        if not fields:
            continue
        name, version, source_name, arch = [*fields.split("\t"), "", "", ""][:4]
        bare = name.split(":")[0]
        copyright_file = Path("/usr/share/doc") / bare / "copyright"
        text = None
        try:
            text = LicenceText(
                f"/usr/share/doc/{bare}/copyright", normalise_text(copyright_file.read_bytes())
            )
        except OSError:
            pass
        return SystemPackage("deb", bare, version, source_name or bare, arch, text)
    return None


# --- helpers ----------------------------------------------------------------------------------


def _walk_files(root: Path) -> list[Path]:
    """Every file and symlink below ``root``, sorted bytewise by relative path."""
    found = []
    for directory, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in [*filenames, *(d for d in dirnames if Path(directory, d).is_symlink())]:
            found.append(Path(directory, name))
    return sorted(found, key=lambda p: os.fsencode(p.relative_to(root).as_posix()))


def _record_index(dist: metadata.Distribution) -> tuple[set[str], set[str]]:
    """The paths (relative to site-packages) and sha256s (hex) ``dist``'s RECORD lists."""
    paths: set[str] = set()
    digests: set[str] = set()
    for entry in dist.files or []:
        posix = PurePosixPath(entry.as_posix())
        if posix.is_absolute() or ".." in posix.parts:
            continue
        paths.add(posix.as_posix())
        if entry.hash is not None and entry.hash.mode == "sha256":
            raw = base64.urlsafe_b64decode(entry.hash.value + "=" * (-len(entry.hash.value) % 4))
            digests.add(raw.hex())
    return paths, digests


def _contents_dir(root: Path) -> PurePosixPath:
    """The folder holding the bundled packages: the parent of the build info's ``updater/``."""
    from .build import BUILD_INFO_NAME

    found = sorted(p for p in root.rglob(BUILD_INFO_NAME) if p.parent.name == "updater")
    if len(found) != 1:
        raise InventoryError(f"{root} holds {len(found)} updater/{BUILD_INFO_NAME}, not one")
    return PurePosixPath(found[0].parent.parent.relative_to(root).as_posix())


def _relative_to(path: str, folder: PurePosixPath) -> str | None:
    if str(folder) in ("", "."):
        return path
    prefix = f"{folder.as_posix()}/"
    return path[len(prefix) :] if path.startswith(prefix) else None


def _is_elf_or_macho(path: Path) -> bool:
    try:
        with open(path, "rb") as stream:
            magic = stream.read(4)
    except OSError:
        return False
    return magic in (
        b"\x7fELF",
        b"\xcf\xfa\xed\xfe",
        b"\xce\xfa\xed\xfe",
        b"\xca\xfe\xba\xbe",
    )


# --- the inventory ------------------------------------------------------------------------


@dataclass
class _Sources:
    """Everything the rules consult, gathered once (I/O); tests substitute their own."""

    target: str
    version: str
    pins: Sequence[Pin]
    pins_dir: Path
    distributions: Sequence[Distribution]
    records: Mapping[str, tuple[set[str], set[str]]]  # distribution name -> RECORD index
    runtime: Mapping[str, RuntimeComponent]  # "cpython" / "pyinstaller-bootloader"
    library_table: Sequence[LibraryEntry]
    system_lookup: SystemLookup
    dynload_names: frozenset[str]
    builtin_modules: frozenset[str]
    mux_licence: LicenceText
    components: dict[str, Component] = field(default_factory=dict)


def _mux_component(sources: _Sources) -> Component:
    return Component(
        key=MUX_KEY,
        kind=KIND_APPLICATION,
        name="mux",
        version=sources.version,
        licence="MIT",
        role="this program: its own code, build info, notices and SBOM",
        licence_texts=(sources.mux_licence,),
        purl=f"pkg:generic/mux@{sources.version}",
    )


def _distribution_component(dist: Distribution) -> Component:
    return Component(
        key=f"python:{dist.name}",
        kind=KIND_DISTRIBUTION,
        name=dist.name,
        version=dist.version,
        licence=dist.licence,
        role="a Python distribution in mux's runtime dependencies",
        licence_texts=dist.licence_files,
        purl=f"pkg:pypi/{dist.name}@{dist.version}",
    )


def _runtime_component(key: str, runtime: RuntimeComponent) -> Component:
    purl = (
        f"pkg:generic/cpython@{runtime.version}"
        if key == CPYTHON_KEY
        else f"pkg:pypi/pyinstaller@{runtime.version}"
    )
    return Component(
        key=key,
        kind=KIND_RUNTIME,
        name=runtime.name,
        version=runtime.version,
        licence=runtime.licence,
        role=runtime.role,
        licence_texts=(runtime.licence_text,),
        purl=purl,
    )


def _claim_mux(path: str, rel: str | None, absolute: Path, sources: _Sources) -> str | None:
    if rel is not None and (rel.startswith("updater/") or rel == "mux_entry.py"):
        return MUX_KEY
    if path == "mux" and not _is_elf_or_macho(absolute):
        return MUX_KEY  # a stand-in's sh launcher
    return None


def _claim_pin(path: str, sha256: str, sources: _Sources) -> str | None:
    from .build import VENDOR_DIR_NAME

    parts = PurePosixPath(path).parts
    if len(parts) != 3 or parts[0] != VENDOR_DIR_NAME:
        return None
    for pin in sources.pins:
        item = pin.file_for(sources.target)
        if (
            pin.name == parts[1]
            and item is not None
            and item.asset == parts[2]
            and item.sha256 == sha256
        ):
            key = f"pin:{pin.name}"
            if key not in sources.components:
                sources.components[key] = _pin_component(pin, item, sources)
            return key
    return None


def _pin_component(pin: Pin, item: object, sources: _Sources) -> Component:
    from .notices import pinned_artifacts

    (artifact,) = pinned_artifacts([pin], sources.pins_dir)
    target = getattr(item, "target", None)
    return Component(
        key=f"pin:{pin.name}",
        kind=KIND_PINNED,
        name=pin.name,
        version=str(pin.tag),
        licence=pin.license,
        role="a prebuilt artifact pinned in release/pins.toml"
        + (f" (its {target} asset)" if target else ""),
        licence_texts=(artifact.licence_text,),
        purl=f"pkg:github/{pin.repository}@{pin.tag}",
        source=getattr(item, "url", None),
    )


def _claim_distribution(path: str, rel: str | None, sha256: str, sources: _Sources) -> str | None:
    """By the path RECORD lists; for a shared library PyInstaller moved, by its bytes (small
    files such as an empty REQUESTED are the same in every distribution, so never by those)."""
    by_path = [d for d in sources.distributions if rel in sources.records.get(d.name, ((), ()))[0]]
    by_bytes = []
    if not by_path and _SHARED_LIBRARY_RE.match(PurePosixPath(path).name):
        by_bytes = [
            d for d in sources.distributions if sha256 in sources.records.get(d.name, ((), ()))[1]
        ]
    for dist in by_path or by_bytes:
        key = f"python:{dist.name}"
        sources.components.setdefault(key, _distribution_component(dist))
        return key
    return None


def _claim_cpython(path: str, rel: str | None, sources: _Sources) -> str | None:
    if CPYTHON_KEY not in sources.runtime:
        return None
    name = PurePosixPath(path).name
    parts = PurePosixPath(rel).parts if rel is not None else ()
    claimed = (
        _LIBPYTHON_RE.match(name) is not None
        or rel == "base_library.zip"
        or (
            len(parts) == 3
            and re.fullmatch(r"python3\.[0-9]+t?", parts[0]) is not None
            and parts[1] == "lib-dynload"
            and parts[2] in sources.dynload_names
        )
    )
    if not claimed:
        return None
    sources.components.setdefault(
        CPYTHON_KEY, _runtime_component(CPYTHON_KEY, sources.runtime[CPYTHON_KEY])
    )
    return CPYTHON_KEY


def _claim_bootloader(path: str, absolute: Path, sources: _Sources) -> str | None:
    if path != "mux" or BOOTLOADER_KEY not in sources.runtime:
        return None
    if not _is_elf_or_macho(absolute):
        return None
    sources.components.setdefault(
        BOOTLOADER_KEY, _runtime_component(BOOTLOADER_KEY, sources.runtime[BOOTLOADER_KEY])
    )
    return BOOTLOADER_KEY


def _claim_library(path: str, sha256: str, sources: _Sources) -> str | None:
    name = PurePosixPath(path).name
    if _SHARED_LIBRARY_RE.match(name) is None:
        return None
    package = sources.system_lookup(name, sha256)
    entry = next((e for e in sources.library_table if e.matches(name)), None)
    if package is not None:
        key = f"{package.manager}:{package.name}"
        if key not in sources.components:
            texts = (package.licence_text,) if package.licence_text else ()
            if not texts and entry is not None:
                texts = (entry.licence_text,)
            if not texts:
                return None
            sources.components[key] = Component(
                key=key,
                kind=KIND_LIBRARY,
                name=entry.name if entry is not None else package.source_name,
                version=package.version,
                licence=entry.licence if entry is not None else "see the licence text",
                role=f"a shared library from the {package.manager} package {package.name}",
                licence_texts=texts,
                purl=f"pkg:{package.manager}/{package.name}@{package.version}"
                + (f"?arch={package.arch}" if package.arch else ""),
                source=f"{package.manager} package {package.name} {package.version}",
            )
        return key
    if entry is None:
        return None
    key = f"library:{entry.key}"
    sources.components.setdefault(key, _library_component(entry, "a shared library"))
    return key


def _library_component(entry: LibraryEntry, role: str) -> Component:
    return Component(
        key=f"library:{entry.key}",
        kind=KIND_LIBRARY,
        name=entry.name,
        version="unknown",
        licence=entry.licence,
        role=f"{role} (release/licenses/shared-libraries.toml: {entry.key})",
        licence_texts=(entry.licence_text,),
        purl=f"pkg:generic/{entry.key}",
        source="release/licenses/shared-libraries.toml",
    )


def _static_libraries(sources: _Sources, shipped: Iterable[Component]) -> list[Component]:
    """Table libraries the interpreter links statically (a built-in module uses them) and that
    ship in no separate file: they are part of the libpython (or bootloader) that ships."""
    present = {c.name for c in shipped if c.kind == KIND_LIBRARY}
    found = []
    for entry in sources.library_table:
        if entry.name in present or not set(entry.modules) & sources.builtin_modules:
            continue
        found.append(_library_component(entry, "statically linked into CPython"))
    return found


def build_inventory(root: Path, sources: _Sources, *, standalone: bool) -> Inventory:
    """Map every file below ``root`` with ``sources`` (hashing is the only I/O here)."""
    root = Path(root)
    contents = _contents_dir(root)
    sources.components.clear()
    sources.components[MUX_KEY] = _mux_component(sources)
    files: list[ShippedFile] = []
    unmapped: list[str] = []
    for absolute in _walk_files(root):
        path = absolute.relative_to(root).as_posix()
        if path in BILL_DOCUMENTS:
            continue  # written from this inventory: the SBOM lists the notices it sits beside
        link = os.readlink(absolute) if absolute.is_symlink() else None
        target = absolute.resolve() if link is not None else absolute
        if link is not None and not (target.is_file() and target.is_relative_to(root.resolve())):
            unmapped.append(path)
            continue
        sha256 = sha256_file(target)
        size = target.stat().st_size
        rel = _relative_to(path, contents)
        key = (
            _claim_mux(path, rel, target, sources)
            or _claim_pin(path, sha256, sources)
            or _claim_distribution(path, rel, sha256, sources)
            or _claim_cpython(path, rel, sources)
            or _claim_bootloader(path, target, sources)
            or _claim_library(path, sha256, sources)
        )
        if key is None:
            unmapped.append(path)
            continue
        files.append(ShippedFile(path, sha256, size, key, link))
    components = list(sources.components.values())
    if standalone:
        components += _static_libraries(sources, components)
        for dist in sources.distributions:  # frozen into the mux executable
            components.append(
                sources.components.get(f"python:{dist.name}") or _distribution_component(dist)
            )
        for key, runtime in sources.runtime.items():
            if all(c.key != key for c in components):
                components.append(_runtime_component(key, runtime))
    unique = {c.key: c for c in components}
    return Inventory(
        target=sources.target,
        version=sources.version,
        standalone=standalone,
        components=tuple(sorted(unique.values(), key=lambda c: (c.kind, c.key))),
        files=tuple(files),
        unmapped=tuple(unmapped),
    )


def collect_sources(
    root: Path,
    *,
    pins_path: Path | None,
    standalone: bool,
    distributions: Sequence[Distribution] | None = None,
    system_lookup: SystemLookup | None = None,
    library_table: Path = LIBRARY_TABLE,
) -> _Sources:
    """Gather what :func:`build_inventory` consults, from this (the build's) environment."""
    from importlib import metadata as importlib_metadata

    from .notices import (
        OVERRIDES_NAME,
        load_overrides,
        shipped_distributions,
        standalone_components,
    )
    from .package import read_build_info
    from .pins import load_pins

    info = read_build_info(root)
    pins = load_pins(pins_path) if pins_path is not None and pins_path.is_file() else []
    pins_dir = pins_path.parent if pins_path is not None else Path(".")
    runtime: dict[str, RuntimeComponent] = {}
    records: dict[str, tuple[set[str], set[str]]] = {}
    dists: Sequence[Distribution] = ()
    dynload: frozenset[str] = frozenset()
    if standalone:
        if distributions is None:
            overrides = load_overrides(pins_dir / "licenses" / OVERRIDES_NAME)
            distributions = shipped_distributions(overrides=overrides)
        dists = distributions
        for dist in dists:
            try:
                records[dist.name] = _record_index(importlib_metadata.distribution(dist.name))
            except importlib_metadata.PackageNotFoundError:
                records[dist.name] = (set(), set())
        cpython, bootloader = standalone_components()
        runtime = {CPYTHON_KEY: cpython, BOOTLOADER_KEY: bootloader}
        destshared = sysconfig.get_config_var("DESTSHARED")
        if destshared and Path(destshared).is_dir():
            dynload = frozenset(p.name for p in Path(destshared).iterdir())
    try:
        mux_licence = LicenceText("LICENSE", normalise_text(REPO_LICENCE.read_bytes()))
    except OSError as exc:
        raise NoticesError(f"mux's own licence text {REPO_LICENCE} cannot be read") from exc
    return _Sources(
        target=info.target,
        version=info.version,
        pins=pins,
        pins_dir=pins_dir,
        distributions=dists,
        records=records,
        runtime=runtime,
        library_table=load_library_table(library_table) if standalone else [],
        system_lookup=system_lookup or dpkg_lookup,
        dynload_names=dynload,
        builtin_modules=frozenset(sys.builtin_module_names) if standalone else frozenset(),
        mux_licence=mux_licence,
    )


def is_standalone(root: Path) -> bool:
    """A PyInstaller build (an executable ``mux``), not a stand-in (an ``sh`` launcher)."""
    return _is_elf_or_macho(Path(root) / "mux")


def take_inventory(
    root: Path,
    *,
    pins_path: Path | None,
    distributions: Sequence[Distribution] | None = None,
    system_lookup: SystemLookup | None = None,
) -> Inventory:
    """The inventory of a build folder, from the environment that built it."""
    root = Path(root)
    standalone = is_standalone(root)
    sources = collect_sources(
        root,
        pins_path=pins_path,
        standalone=standalone,
        distributions=distributions,
        system_lookup=system_lookup,
    )
    return build_inventory(root, sources, standalone=standalone)
