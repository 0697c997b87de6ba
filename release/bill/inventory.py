"""What a build folder ships, file by file: the data behind its notices and its SBOM.

:func:`take_inventory` maps every file of a ``mux-<target>/`` build folder (as
:func:`release.folder.walk.build_files` lists it) to the component it comes from, in this order (the
first rule that claims a file wins):

1. mux itself: its build info (``updater/_build_info.json``); for a stand-in also the Python
   sources of its package (``updater/**/*.py``), its entry point and its ``sh`` launcher;
   nothing else that happens to sit below ``updater/``. The two documents written from this
   inventory (``THIRD_PARTY_NOTICES.md``, ``sbom.cdx.json``) are not files it maps: the SBOM
   lists the notices as mux's;
2. a pinned artifact: ``vendor/<name>/<asset>`` whose sha256 is the pin's for this target;
3. a Python distribution of mux's runtime closure: the path (below the build's contents
   folder) or, for a shared library PyInstaller moved, the sha256 of a file its ``RECORD``
   lists;
4. CPython: ``libpython*``/``Python``, ``base_library.zip`` and ``python3.X/lib-dynload/*``
   (extension modules the running interpreter has too);
5. the PyInstaller bootloader: the standalone build's ``mux`` executable (its appended archive
   holds the bytecode of mux, the standard library and the distributions above);
6. a shared library (an ELF or Mach-O file): the system package that installed exactly those
   bytes (``dpkg -S`` and the package's own checksums on Debian and Ubuntu, ``apk`` and its
   database on Alpine), else by its name alone in the documented table
   ``release/licenses/shared-libraries.toml`` (marked ``mux:mapped-by=name`` in the SBOM).

A file no rule claims is *unmapped*: ``mux-release notices --check-build`` names it and fails.

A standalone build also ships code no file shows: the C extension modules built into the
interpreter (``sys.builtin_module_names``; python-build-standalone links most of them, and the
libraries they use, into libpython) and those in ``lib-dynload``. Each must be CPython's own
code (the table's ``[cpython] own_modules``) or name the libraries it links (an entry's
``modules``), which the notices then list; any other is an *unknown module*, named and failed
like an unmapped file.

Collection does I/O (hashing, ``importlib.metadata``, ``dpkg``/``apk``); the rules are small
functions that return the component a file belongs to, and :func:`build_inventory` alone
records them. Rendering (:mod:`release.bill.third_party_notices`, :mod:`release.bill.sbom`) is pure.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata as importlib_metadata
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from release.bill.components import (
    MAPPED_BY_BYTES,
    MAPPED_BY_NAME,
    MAPPED_BY_PATH,
    Component,
    ComponentKind,
    LicenceText,
    normalise_text,
)
from release.bill.third_party_notices import (
    OVERRIDES_NAME,
    Distribution,
    NoticesError,
    RuntimeComponent,
    load_overrides,
    pinned_artifacts,
    shipped_distributions,
    standalone_components,
)
from release.checkout import RELEASE_DIR, REPO_ROOT
from release.folder.layout import LAUNCHER_HEADER, SBOM_NAME, VENDOR_DIR_NAME, read_build_info
from release.folder.walk import BuildEntry, build_files
from release.pins.pinfile import Pin, PinnedAsset, load_pins
from updater.config.buildfolder import BUILD_INFO_NAME, CODE_PACKAGE, the_build_info
from updater.config.buildinfo import NOTICES_NAME
from updater.errors import MuxError
from updater.files import sha256_file

if TYPE_CHECKING:
    from importlib import metadata

BILL_DOCUMENTS = (NOTICES_NAME, SBOM_NAME)
LIBRARY_TABLE = RELEASE_DIR / "licenses" / "shared-libraries.toml"
REPO_LICENCE = REPO_ROOT / "LICENSE"

MUX_KEY = "mux"
CPYTHON_KEY = "cpython"
BOOTLOADER_KEY = "pyinstaller-bootloader"

_SHARED_LIBRARY_RE = re.compile(r".+\.(?:so(?:\.[0-9]+)*|dylib)$|^Python$")
_LIBPYTHON_RE = re.compile(r"^(?:libpython3\.[0-9]+t?\.(?:so(?:\.[0-9.]+)?|dylib)|Python)$")
_BINARY_MAGIC = (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe", b"\xca\xfe\xba\xbe")


class InventoryError(MuxError):
    """A build folder cannot be inventoried (not a build, unreadable table, ...)."""


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
    unknown_modules: tuple[str, ...] = ()  # C modules neither CPython's own nor in the table

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


@dataclass(frozen=True)
class LibraryTable:
    libraries: tuple[LibraryEntry, ...]
    cpython_modules: frozenset[str]  # C modules whose code is CPython's own


def load_library_table(path: Path = LIBRARY_TABLE) -> LibraryTable:

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
    own = (doc.get("cpython") or {}).get("own_modules")
    if not isinstance(own, list) or not all(isinstance(m, str) for m in own):
        raise InventoryError(f"{path}: [cpython] own_modules must be a list of module names")
    return LibraryTable(tuple(entries), frozenset(own))


# --- system packages ------------------------------------------------------------------------


@dataclass(frozen=True)
class SystemPackage:
    """The distribution package that installed a file (found by its exact bytes)."""

    manager: str  # "deb" or "apk"
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


def _dpkg_checksum_matches(package: str, path: str) -> bool:
    """The installed file (through its links) still has the md5 its package recorded (dpkg's
    own list, ``/var/lib/dpkg/info/<package>.md5sums``)."""
    real = os.path.realpath(path)
    try:
        listed = (Path("/var/lib/dpkg/info") / f"{package}.md5sums").read_text(
            encoding="utf-8", errors="replace"
        )
    except OSError:
        return False
    for line in listed.splitlines():
        digest, _, relative = line.partition("  ")
        if os.path.realpath("/" + relative.strip()) == real:
            try:
                actual = hashlib.md5(Path(real).read_bytes(), usedforsecurity=False)
            except OSError:
                return False
            return actual.hexdigest() == digest.strip()
    return False


def dpkg_lookup(file_name: str, sha256: str) -> SystemPackage | None:
    """The Debian package holding a file named ``file_name`` with exactly these bytes, which
    are also the bytes the package installed (its md5sums)."""
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
        if not any(_dpkg_checksum_matches(name, path) for name in (package, package.split(":")[0])):
            continue
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


APK_DATABASE = Path("/lib/apk/db/installed")
_APK_PACKAGE_RE = re.compile(r"^(?P<name>.+)-(?P<version>[0-9][^-]*-r[0-9]+)$")


def apk_file_owner(database: str, path: str) -> tuple[str, str, str] | None:
    """``(package, version, Q1 checksum)`` of ``path`` in an apk database's text (pure).

    The database lists each package (``P:`` name, ``V:`` version), then its folders (``F:``)
    each followed by its files (``R:``) and their checksums (``Z:Q1`` + base64 of the SHA-1).
    """
    folder, _, name = path.lstrip("/").rpartition("/")
    package = version = current = ""
    pending = False
    for line in database.splitlines():
        key, _, value = line.partition(":")
        if key == "P":
            package, version, current, pending = value, "", "", False
        elif key == "V":
            version = value
        elif key == "F":
            current = value
        elif key == "R":
            pending = current == folder and value == name
        elif key == "Z" and pending:
            return package, version, value
    return None


def apk_lookup(file_name: str, sha256: str) -> SystemPackage | None:
    """The Alpine package holding a file named ``file_name`` with exactly these bytes, which
    are the bytes the package installed (the database's checksum)."""
    if shutil.which("apk") is None:
        return None
    try:
        database = APK_DATABASE.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for folder in ("/lib", "/usr/lib"):
        path = f"{folder}/{file_name}"
        try:
            data = Path(path).read_bytes()
        except OSError:
            continue
        if hashlib.sha256(data).hexdigest() != sha256:
            continue
        owner = apk_file_owner(database, path)
        if owner is None:
            continue
        package, version, checksum = owner
        recorded = (
            "Q1" + base64.b64encode(hashlib.sha1(data, usedforsecurity=False).digest()).decode()
        )
        if checksum != recorded:
            continue
        return SystemPackage("apk", package, version, package, "", None)
    return None


def find_system_package(file_name: str, sha256: str) -> SystemPackage | None:
    return dpkg_lookup(file_name, sha256) or apk_lookup(file_name, sha256)


# --- helpers ----------------------------------------------------------------------------------


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


def _contents_dir(entries: Iterable[BuildEntry]) -> PurePosixPath:
    """The folder holding the bundled packages: the parent of the build info's ``updater/``."""
    found = the_build_info(e.path for e in entries)
    if found is None:
        raise InventoryError(
            f"the folder holds no single <code folder>/{CODE_PACKAGE}/{BUILD_INFO_NAME}"
            " (exactly one, one folder below its top)"
        )
    return PurePosixPath(found).parent.parent


def _relative_to(path: str, folder: PurePosixPath) -> str | None:
    if str(folder) in ("", "."):
        return path
    prefix = f"{folder.as_posix()}/"
    return path[len(prefix) :] if path.startswith(prefix) else None


def _is_binary(path: Path) -> bool:
    """An ELF or Mach-O file: what the dynamic linker loads, not just a name."""
    try:
        with open(path, "rb") as stream:
            return stream.read(4) in _BINARY_MAGIC
    except OSError:
        return False


def _module_name(file_name: str) -> str:
    return file_name.split(".", 1)[0]


# --- the inventory ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Sources:
    """Everything the rules consult, gathered once (I/O); tests substitute their own."""

    target: str
    version: str
    pins: Sequence[Pin]
    pins_dir: Path
    distributions: Sequence[Distribution]
    records: Mapping[str, tuple[set[str], set[str]]]  # distribution name -> RECORD index
    runtime: Mapping[str, RuntimeComponent]  # "cpython" / "pyinstaller-bootloader"
    library_table: LibraryTable
    system_lookup: SystemLookup
    dynload_names: frozenset[str]
    builtin_modules: frozenset[str]
    mux_licence: LicenceText
    standalone: bool


def _mux_component(sources: _Sources) -> Component:
    return Component(
        key=MUX_KEY,
        kind=ComponentKind.APPLICATION,
        name="mux",
        version=sources.version,
        licence="MIT",
        role="this program: its own code, build info, notices and SBOM",
        licence_texts=(sources.mux_licence,),
        purl=f"pkg:generic/mux@{sources.version}",
    )


def _distribution_component(dist: Distribution, mapped_by: str = MAPPED_BY_PATH) -> Component:
    return Component(
        key=f"python:{dist.name}",
        kind=ComponentKind.DISTRIBUTION,
        name=dist.name,
        version=dist.version,
        licence=dist.licence,
        role="a Python distribution in mux's runtime dependencies",
        licence_texts=dist.licence_files,
        purl=f"pkg:pypi/{dist.name}@{dist.version}",
        mapped_by=mapped_by,
    )


def _runtime_component(key: str, runtime: RuntimeComponent) -> Component:
    purl = (
        f"pkg:generic/cpython@{runtime.version}"
        if key == CPYTHON_KEY
        else f"pkg:pypi/pyinstaller@{runtime.version}"
    )
    return Component(
        key=key,
        kind=ComponentKind.RUNTIME,
        name=runtime.name,
        version=runtime.version,
        licence=runtime.licence,
        role=runtime.role,
        licence_texts=(runtime.licence_text,),
        purl=purl,
    )


def _claim_mux(rel: str | None, sources: _Sources) -> Component | None:
    """The build info; a stand-in's Python sources (a standalone build has none)."""
    if rel == f"{CODE_PACKAGE}/{BUILD_INFO_NAME}" or (
        not sources.standalone
        and rel is not None
        and (
            (rel.startswith("updater/") and rel.endswith((".py", ".pyc"))) or rel == "mux_entry.py"
        )
    ):
        return _mux_component(sources)
    return None


def _claim_pin(path: str, sha256: str, sources: _Sources) -> Component | None:
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
            return _pin_component(pin, item, sources)
    return None


def _pin_component(pin: Pin, item: PinnedAsset, sources: _Sources) -> Component:
    (artifact,) = pinned_artifacts([pin], sources.pins_dir)
    return Component(
        key=f"pin:{pin.name}",
        kind=ComponentKind.PINNED,
        name=pin.name,
        version=str(pin.tag),
        licence=pin.license,
        role="a prebuilt artifact pinned in release/pins.toml"
        + (f" (its {item.target} asset)" if item.target else ""),
        licence_texts=(artifact.licence_text,),
        purl=f"pkg:github/{pin.repository}@{pin.tag}",
        source=item.url,
        mapped_by=MAPPED_BY_BYTES,
    )


def _claim_distribution(
    path: str, rel: str | None, sha256: str, sources: _Sources
) -> Component | None:
    """By the path RECORD lists; for a shared library PyInstaller moved, by its bytes (small
    files such as an empty REQUESTED are the same in every distribution, so never by those)."""
    for dist in sources.distributions:
        if rel in sources.records.get(dist.name, ((), ()))[0]:
            return _distribution_component(dist)
    if _SHARED_LIBRARY_RE.match(PurePosixPath(path).name):
        for dist in sources.distributions:
            if sha256 in sources.records.get(dist.name, ((), ()))[1]:
                return _distribution_component(dist, MAPPED_BY_BYTES)
    return None


def _claim_cpython(path: str, rel: str | None, sources: _Sources) -> Component | None:
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
    return _runtime_component(CPYTHON_KEY, sources.runtime[CPYTHON_KEY]) if claimed else None


def _claim_launcher_or_bootloader(path: str, absolute: Path, sources: _Sources) -> Component | None:
    """The top-level ``mux``: PyInstaller's bootloader, or a stand-in's sh launcher."""
    if path != "mux":
        return None
    if not _is_binary(absolute):
        with open(absolute, "rb") as stream:
            head = stream.read(len(LAUNCHER_HEADER.encode()))
        return _mux_component(sources) if head == LAUNCHER_HEADER.encode() else None
    if BOOTLOADER_KEY not in sources.runtime:
        return None
    return _runtime_component(BOOTLOADER_KEY, sources.runtime[BOOTLOADER_KEY])


def _claim_library(path: str, absolute: Path, sha256: str, sources: _Sources) -> Component | None:
    name = PurePosixPath(path).name
    if _SHARED_LIBRARY_RE.match(name) is None or not _is_binary(absolute):
        return None
    entry = next((e for e in sources.library_table.libraries if e.matches(name)), None)
    package = sources.system_lookup(name, sha256)
    if package is not None:
        texts = (package.licence_text,) if package.licence_text else ()
        if not texts and entry is not None:
            texts = (entry.licence_text,)
        if not texts:
            return None
        return Component(
            key=f"{package.manager}:{package.name}",
            kind=ComponentKind.LIBRARY,
            name=entry.name if entry is not None else package.source_name,
            version=package.version,
            licence=entry.licence if entry is not None else "see the licence text",
            role=f"a shared library from the {package.manager} package {package.name}",
            licence_texts=texts,
            purl=f"pkg:{package.manager}/{package.name}@{package.version}"
            + (f"?arch={package.arch}" if package.arch else ""),
            source=f"{package.manager} package {package.name} {package.version}",
            mapped_by=MAPPED_BY_BYTES,
        )
    if entry is None:
        return None
    return _library_component(entry, "a shared library, known by its file name only")


def _library_component(
    entry: LibraryEntry, role: str, mapped_by: str = MAPPED_BY_NAME
) -> Component:
    return Component(
        key=f"library:{entry.key}",
        kind=ComponentKind.LIBRARY,
        name=entry.name,
        version="unknown",
        licence=entry.licence,
        role=f"{role} (release/licenses/shared-libraries.toml: {entry.key})",
        licence_texts=(entry.licence_text,),
        purl=f"pkg:generic/{entry.key}",
        source="release/licenses/shared-libraries.toml",
        mapped_by=mapped_by,
    )


def _c_modules(
    sources: _Sources, files: Iterable[ShippedFile]
) -> tuple[list[Component], list[str]]:
    """The libraries the shipped C modules link without a file of their own (statically, as
    python-build-standalone does), and the modules nothing accounts for."""
    shipped = set(sources.builtin_modules)
    for shipped_file in files:
        parts = PurePosixPath(shipped_file.path).parts
        if shipped_file.component == CPYTHON_KEY and "lib-dynload" in parts:
            shipped.add(_module_name(parts[-1]))
    table = sources.library_table
    by_module: dict[str, list[LibraryEntry]] = {}
    for entry in table.libraries:
        for module in entry.modules:
            by_module.setdefault(module, []).append(entry)
    static: dict[str, LibraryEntry] = {}
    unknown = []
    for module in sorted(shipped):
        if module in table.cpython_modules:
            continue
        if module not in by_module:
            unknown.append(module)
            continue
        for entry in by_module[module]:
            static.setdefault(entry.key, entry)
    components = [
        _library_component(entry, "linked into CPython's C modules", MAPPED_BY_PATH)
        for entry in static.values()
    ]
    return components, unknown


def build_inventory(root: Path, sources: _Sources, *, standalone: bool) -> Inventory:
    """Map every file below ``root`` with ``sources`` (hashing is the only I/O here)."""
    entries = build_files(Path(root))
    contents = _contents_dir(entries)
    found: dict[str, Component] = {MUX_KEY: _mux_component(sources)}
    files: list[ShippedFile] = []
    unmapped: list[str] = []
    for entry in entries:
        if entry.path in BILL_DOCUMENTS:
            continue  # written from this inventory: the SBOM lists the notices it sits beside
        content = entry.content
        sha256 = sha256_file(content)
        rel = _relative_to(entry.path, contents)
        component = (
            _claim_mux(rel, sources)
            or _claim_pin(entry.path, sha256, sources)
            or _claim_distribution(entry.path, rel, sha256, sources)
            or _claim_cpython(entry.path, rel, sources)
            or _claim_launcher_or_bootloader(entry.path, content, sources)
            or _claim_library(entry.path, content, sha256, sources)
        )
        if component is None:
            unmapped.append(entry.path)
            continue
        found.setdefault(component.key, component)
        files.append(
            ShippedFile(entry.path, sha256, content.stat().st_size, component.key, entry.link)
        )
    unknown: list[str] = []
    if standalone:
        linked, unknown = _c_modules(sources, files)
        present = {c.name for c in found.values() if c.kind == ComponentKind.LIBRARY}
        for component in linked:
            if component.name not in present:
                found.setdefault(component.key, component)
        for dist in sources.distributions:  # frozen into the mux executable
            found.setdefault(f"python:{dist.name}", _distribution_component(dist))
        for key, runtime in sources.runtime.items():
            found.setdefault(key, _runtime_component(key, runtime))
    return Inventory(
        target=sources.target,
        version=sources.version,
        standalone=standalone,
        components=tuple(sorted(found.values(), key=lambda c: (c.kind.value, c.key))),
        files=tuple(files),
        unmapped=tuple(unmapped),
        unknown_modules=tuple(unknown),
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
        library_table=load_library_table(library_table)
        if standalone
        else LibraryTable((), frozenset()),
        system_lookup=system_lookup or find_system_package,
        dynload_names=dynload,
        builtin_modules=frozenset(sys.builtin_module_names) if standalone else frozenset(),
        mux_licence=mux_licence,
        standalone=standalone,
    )


def is_standalone(root: Path) -> bool:
    """A PyInstaller build (an executable ``mux``), not a stand-in (an ``sh`` launcher)."""
    return _is_binary(Path(root) / "mux")


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
