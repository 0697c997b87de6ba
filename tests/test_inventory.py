"""release.bill.inventory and release.folder.walk: what a build folder ships, mapped by evidence.

A folder is read by one walker with one rule for links (every tool agrees on what it holds);
a file is mux's only where mux puts files; a library known by its name alone is an ELF file
and is marked so in the SBOM; a system library is the system package's only when it has that
package's very bytes; every C module the interpreter ships is accounted for.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from release.bill.bill import UnmappedFilesError, _unmapped_error, write_build_bill
from release.bill.components import LicenceText
from release.bill.inventory import (
    LibraryTable,
    _Sources,
    apk_file_owner,
    build_inventory,
    dpkg_lookup,
    load_library_table,
)
from release.bill.sbom import folder_files, render_sbom
from release.bill.third_party_notices import Distribution, RuntimeComponent
from release.build.reproduce import compare_builds
from release.build.standin import build_standin
from release.build.steps import write_build_info
from release.folder.archive import write_archive
from release.folder.walk import BuildFolderError, build_files
from tests.support.releases import KeyPair, make_keypair
from updater.config.buildinfo import BuildInfo, TrustSettings
from updater.config.targets import detect_target
from updater.files import sha256_file

HOST = detect_target()
SYSTEM_ZLIB = Path("/lib/x86_64-linux-gnu/libz.so.1")
TEXT = LicenceText("LICENSE", "licence text\n")


@pytest.fixture(scope="module")
def keypair(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_keypair(tmp_path_factory.mktemp("keys"))


def standin(tmp_path: Path, keypair: KeyPair) -> Path:
    return build_standin(
        tmp_path / "build",
        version="1.0.0",
        protocol_version=1,
        repo="o/r",
        minisign_keys=[keypair.public_key],
    )


# --- one walker, one rule for links ---------------------------------------------------------


def test_every_tool_reads_a_build_folder_by_one_rule_for_links(
    tmp_path: Path, keypair: KeyPair
) -> None:
    folder = standin(tmp_path, keypair)
    # A link to a file of the folder: the inventory maps it, the SBOM lists it by its target's
    # bytes, the archive holds it as a link, the comparison sees it.
    (folder / "lib" / "updater" / "again.py").symlink_to("__main__.py")
    write_build_bill(folder, pins_path=None)
    main = sha256_file(folder / "lib" / "updater" / "__main__.py")
    assert folder_files(folder)["lib/updater/again.py"] == main
    entry = next(e for e in build_files(folder) if e.path == "lib/updater/again.py")
    assert (entry.kind, entry.link, entry.target) == (
        "link",
        "__main__.py",
        "lib/updater/__main__.py",
    )
    write_archive(folder, HOST, tmp_path / "ok.tar.gz")

    # A link to a folder (inside, no '..'): named and refused by every tool alike, never
    # "unmapped" to one, invisible to another and archived by a third.
    (folder / "lib" / "vendorlink").symlink_to("updater")
    checks = {
        "bill": lambda: write_build_bill(folder, pins_path=None),
        "sbom": lambda: folder_files(folder),
        "archive": lambda: write_archive(folder, HOST, tmp_path / "no.tar.gz"),
        "compare": lambda: compare_builds(folder, folder),
        "walk": lambda: build_files(folder),
    }
    for name, check in checks.items():
        with pytest.raises(BuildFolderError, match=r"lib/vendorlink is a link to updater, which "):
            check()
        assert name  # (which tool, for the failure report)
    (folder / "lib" / "vendorlink").unlink()
    (folder / "lib" / "up").symlink_to("../../etc")
    with pytest.raises(BuildFolderError, match="which leaves the build folder"):
        build_files(folder)


def test_entries_come_depth_first_each_level_bytewise(tmp_path: Path) -> None:
    for name in ("b", "a/z", "a.txt", "a/b/c", "B"):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
    listed = [e.path for e in build_files(tmp_path, directories=True)]
    assert listed == ["B", "a", "a/b", "a/b/c", "a/z", "a.txt", "b"]


# --- what maps to what, and how ---------------------------------------------------------------


def standalone_folder(tmp_path: Path) -> Path:
    """A folder shaped like a PyInstaller build: an ELF ``mux``, the build info, libraries."""
    folder = tmp_path / f"mux-{HOST}"
    internal = folder / "_internal"
    (internal / "updater").mkdir(parents=True)
    elf = Path(sys.executable).resolve().read_bytes()
    (folder / "mux").write_bytes(elf)
    (folder / "mux").chmod(0o755)
    info = BuildInfo(
        version="1.0.0",
        protocol_version=1,
        target=HOST,
        repo="o/r",
        development=False,
        trust=TrustSettings(minisign_keys=()),
    )
    write_build_info(internal / "updater", info)
    return folder


def sources(*, lookup=lambda name, sha: None, builtins: frozenset[str] = frozenset()) -> _Sources:  # type: ignore[no-untyped-def]
    runtime = RuntimeComponent("CPython", "3.11", "PSF-2.0", "the interpreter", TEXT)
    return _Sources(
        target=HOST,
        version="1.0.0",
        pins=(),
        pins_dir=Path("."),
        distributions=(Distribution("zz-dep", "1.0", "MIT", (TEXT,)),),
        records={"zz-dep": (set(), set())},
        runtime={"cpython": runtime, "pyinstaller-bootloader": runtime},
        library_table=load_library_table(),
        system_lookup=lookup,
        dynload_names=frozenset(),
        builtin_modules=builtins,
        mux_licence=TEXT,
        standalone=True,
    )


def test_a_library_known_by_name_only_must_be_one_and_says_so(tmp_path: Path) -> None:
    folder = standalone_folder(tmp_path)
    internal = folder / "_internal"
    # Random bytes under a library's name are no library: before, "zlib unknown" claimed them.
    (internal / "libz.so.1").write_bytes(b"random bytes, not an ELF file" * 10)
    # A real ELF file under a table name, with no package owning those bytes: by name, marked.
    shutil.copy(folder / "mux", internal / "libffi.so.8")
    # mux claims its build info only: a payload below updater/ is not mux's.
    shutil.copy(folder / "mux", internal / "updater" / "evil_payload.so")
    (internal / "updater" / "extra.py").write_text("print('not in a standalone build')\n")
    inventory = build_inventory(folder, sources(), standalone=True)
    assert inventory.unmapped == (
        "_internal/libz.so.1",
        "_internal/updater/evil_payload.so",
        "_internal/updater/extra.py",
    )
    libffi = inventory.component("library:libffi")
    assert (libffi.mapped_by, libffi.version) == ("name", "unknown")
    assert [f.path for f in inventory.files_of("library:libffi")] == ["_internal/libffi.so.8"]
    assert inventory.component("mux").mapped_by == "path"
    sbom = json.loads(render_sbom(inventory))
    (entry,) = [c for c in sbom["components"] if c["bom-ref"] == "library:libffi"]
    assert {"name": "mux:mapped-by", "value": "name"} in entry["properties"]


@pytest.mark.skipif(not SYSTEM_ZLIB.exists() or not shutil.which("dpkg"), reason="Debian only")
def test_a_system_library_is_the_packages_only_with_its_very_bytes(tmp_path: Path) -> None:
    folder = standalone_folder(tmp_path)
    shipped = folder / "_internal" / "libz.so.1"
    shutil.copy(SYSTEM_ZLIB.resolve(), shipped)
    package = dpkg_lookup("libz.so.1", sha256_file(shipped))
    assert package is not None and package.manager == "deb" and package.name.startswith("zlib")
    inventory = build_inventory(folder, sources(lookup=dpkg_lookup), standalone=True)
    (component,) = [c for c in inventory.components if c.key.startswith("deb:")]
    assert component.mapped_by == "bytes" and component.version == package.version
    # One byte changed: not the package's file, so only its name is left to go by.
    data = bytearray(shipped.read_bytes())
    data[-1] ^= 0xFF
    shipped.write_bytes(bytes(data))
    assert dpkg_lookup("libz.so.1", sha256_file(shipped)) is None
    inventory = build_inventory(folder, sources(lookup=dpkg_lookup), standalone=True)
    assert inventory.component("library:zlib").mapped_by == "name"


def test_the_apk_database_gives_a_files_package_and_checksum() -> None:
    data = b"\x7fELF libcrypto"
    checksum = "Q1" + base64.b64encode(hashlib.sha1(data).digest()).decode()
    database = (
        "C:Q1aaaa=\nP:musl\nV:1.2.5-r10\nF:lib\nR:ld-musl-x86_64.so.1\nZ:Q1bbbb=\n\n"
        f"C:Q1cccc=\nP:libcrypto3\nV:3.5.1-r0\nA:x86_64\nF:usr/lib\nR:libcrypto.so.3\nZ:{checksum}\n"
        "F:usr/lib/engines-3\nR:afalg.so\nZ:Q1dddd=\n"
    )
    assert apk_file_owner(database, "/usr/lib/libcrypto.so.3") == (
        "libcrypto3",
        "3.5.1-r0",
        checksum,
    )
    assert apk_file_owner(database, "/lib/ld-musl-x86_64.so.1") == ("musl", "1.2.5-r10", "Q1bbbb=")
    assert apk_file_owner(database, "/usr/lib/libssl.so.3") is None
    assert apk_file_owner(database, "/usr/lib/engines-3/libcrypto.so.3") is None


# --- the interpreter's C modules ---------------------------------------------------------------


def test_every_c_module_the_interpreter_ships_is_accounted_for(tmp_path: Path) -> None:
    folder = standalone_folder(tmp_path)
    # python-build-standalone style: modules built into libpython with their libraries.
    builtins = frozenset({"posix", "_io", "_sqlite3", "_ssl", "_tkinter", "_dbm"})
    inventory = build_inventory(folder, sources(builtins=builtins), standalone=True)
    assert inventory.unknown_modules == ("_dbm",)  # which library it links is not known
    names = {c.name for c in inventory.components if c.kind == "shared-library"}
    assert {"SQLite", "OpenSSL", "Tcl", "Tk", "libX11", "libxcb", "libXau"} <= names
    sqlite = inventory.component("library:sqlite")
    assert sqlite.role.startswith("linked into CPython's C modules")
    error = _unmapped_error(folder, inventory)
    assert isinstance(error, UnmappedFilesError)
    assert error.message.endswith("neither CPython's own code nor linked to a listed library: _dbm")


def test_the_table_classifies_what_this_interpreter_has() -> None:
    table = load_library_table()
    assert isinstance(table, LibraryTable)
    linked = {m for entry in table.libraries for m in entry.modules}
    assert not linked & table.cpython_modules  # each module in one place
    unknown = set(sys.builtin_module_names) - table.cpython_modules - linked
    assert not unknown, f"builtin modules of this interpreter not in the table: {unknown}"
