"""release.build: stand-in and PyInstaller builds report exactly the build info baked in."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from release.build import standin
from release.build.standalone import build_standalone
from release.build.standin import build_standin
from release.build.steps import BuildError, make_build_info, write_bill, write_build_info
from release.publish.package import package_release, sign_release
from tests.support.processes import mux_release, run_mux
from tests.support.realbuild import RealBuild
from tests.support.releases import KeyPair, make_feed, make_keypair
from updater.config.buildinfo import BuildInfo
from updater.config.targets import TARGETS, detect_target
from updater.errors import ParseError, UsageError
from updater.install.layout import files_list

HOST = detect_target()
OTHER = next(t for t in TARGETS if t != HOST)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[KeyPair, KeyPair]:
    base = tmp_path_factory.mktemp("keys")
    return make_keypair(base, name="current"), make_keypair(base, name="next")


def expected_info(
    version: str, protocol: int, target: str, repo: str, keys: list[str]
) -> dict[str, object]:
    return {
        "schema": 2,  # mux version --json: the build info, with the schema of mux's documents
        "version": version,
        "protocol_version": protocol,
        "target": target,
        "repo": repo,
        "development": False,
        "trust": {
            "minisign_keys": keys,
            "oidc_issuer": "https://token.actions.githubusercontent.com",
            "signer_workflow": ".github/workflows/release.yml",
        },
        "policy_file": "/etc/mux/policy.toml",
    }


def bare_env(home: Path) -> dict[str, str]:
    """Only PATH and HOME: what a build finds in a plain login's environment."""
    return {"PATH": os.environ["PATH"], "HOME": str(home)}


def install_by_hand(archive: Path, home: Path, version: str) -> Path:
    """Unpack like install.sh: versions/<version>/ holds the top folder's content; bin/mux links it."""
    version_dir = home / "versions" / version
    version_dir.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        top = tar.getnames()[0]
        for member in tar.getmembers():
            if member.name == top:
                continue
            member.name = member.name.removeprefix(f"{top}/")
            tar.extract(member, version_dir, filter="data")
    bin_dir = home / "bin"
    bin_dir.mkdir()
    (bin_dir / "mux").symlink_to(version_dir / "mux")
    return bin_dir / "mux"


def test_standin_layout(tmp_path: Path, keys: tuple[KeyPair, KeyPair]) -> None:
    current, _ = keys
    folder = build_standin(
        tmp_path,
        version="0.2.0",
        protocol_version=4,
        repo="o/r",
        minisign_keys=[current.public_key],
        target=HOST,
    )
    assert folder == tmp_path / f"mux-{HOST}"
    launcher = folder / "mux"
    assert os.access(launcher, os.X_OK)
    assert launcher.read_text().startswith("#!/bin/sh\n")
    assert (folder / "lib" / "mux_entry.py").is_file()
    package = folder / "lib" / "updater"
    assert (package / "__main__.py").is_file() and (package / "config" / "buildinfo.py").is_file()
    # Its modules compiled, as a real build ships them: one hash-checked .pyc per source,
    # in the source's own __pycache__, and nothing else.
    compiled = sorted(folder.rglob("*.pyc"))
    assert {p.parent.parent / (p.name.split(".")[0] + ".py") for p in compiled} == set(
        package.rglob("*.py")
    )
    assert all(p.parent.name == "__pycache__" for p in compiled)
    assert all(int.from_bytes(p.read_bytes()[4:8], "little") == 0b11 for p in compiled)
    baked = json.loads((package / "_build_info.json").read_text())
    # The file the build bakes: what mux version --json prints, but for the documents' schema.
    expected = expected_info("0.2.0", 4, HOST, "o/r", [current.public_key])
    assert baked == {k: v for k, v in expected.items() if k != "schema"}
    check = subprocess.run(["sh", "-n", str(launcher)], capture_output=True)
    assert check.returncode == 0


def test_write_build_info_round_trips(tmp_path: Path, keys: tuple[KeyPair, KeyPair]) -> None:
    info = make_build_info(
        version="1.0.0rc1",
        protocol_version=9,
        target=OTHER,
        repo="owner/name",
        minisign_keys=[k.public_key for k in keys],
    )
    path = write_build_info(tmp_path, info)
    assert path == tmp_path / "_build_info.json"
    assert BuildInfo.from_json(json.loads(path.read_text())) == info
    assert path.read_text().endswith("}\n")


def test_build_settings_are_validated_before_anything_is_written(
    tmp_path: Path, keys: tuple[KeyPair, KeyPair]
) -> None:
    good: dict[str, Any] = {"version": "0.2.0", "protocol_version": 1, "repo": "", "target": HOST}
    current, following = keys
    with pytest.raises(UsageError, match="not a published target"):
        build_standin(
            tmp_path, **{**good, "target": "sparc-sun-solaris"}, minisign_keys=[current.public_key]
        )
    with pytest.raises(ParseError, match="not a valid version"):
        build_standin(tmp_path, **{**good, "version": "banana"}, minisign_keys=[current.public_key])
    with pytest.raises(ParseError, match="not a minisign public key"):
        build_standin(tmp_path, **good, minisign_keys=["RWnotakey"])
    with pytest.raises(UsageError, match="at most 2"):
        build_standin(
            tmp_path,
            **good,
            minisign_keys=[current.public_key, following.public_key, current.public_key],
        )
    assert list(tmp_path.iterdir()) == []

    build_standin(tmp_path, **good, minisign_keys=[current.public_key])
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(BuildError, match="already exists"):
        build_standin(tmp_path, **good, minisign_keys=[current.public_key])
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_public_key_files_are_accepted_and_stored_as_their_base64_line(
    tmp_path: Path, keys: tuple[KeyPair, KeyPair]
) -> None:
    current, _ = keys
    folder = build_standin(
        tmp_path,
        version="0.2.0",
        protocol_version=1,
        repo="",
        minisign_keys=[current.public_key_path.read_text()],
        target=HOST,
    )
    baked = json.loads((folder / "lib" / "updater" / "_build_info.json").read_text())
    assert baked["trust"]["minisign_keys"] == [current.public_key]


def test_standins_of_one_process_copy_one_compile_and_compile_again_when_a_source_changes(
    tmp_path: Path, keys: tuple[KeyPair, KeyPair], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The package is compiled once per process and its sources: a second stand-in is a
    copy, byte for byte what a compile writes; a changed source compiles it again."""
    current, _ = keys

    def build(name: str) -> dict[str, bytes]:
        folder = build_standin(
            tmp_path / name, version="0.2.0", protocol_version=4, repo="o/r",
            minisign_keys=[current.public_key], target=HOST,
        )  # fmt: skip
        package = folder / "lib" / "updater"
        return {str(p.relative_to(package)): p.read_bytes() for p in package.rglob("*.pyc")}

    first = build("first")
    compiles = len(standin._COMPILED)
    assert build("second") == first and len(standin._COMPILED) == compiles
    changed = (*standin._source_fingerprint(), ("a source edited since", 1, 1))
    monkeypatch.setattr(standin, "_source_fingerprint", lambda: changed)
    assert build("third") == first and len(standin._COMPILED) == compiles + 1


def test_packaged_standin_installed_by_hand_reports_its_build_info(
    tmp_path: Path, keys: tuple[KeyPair, KeyPair]
) -> None:
    current, following = keys
    folder = build_standin(
        tmp_path / "build",
        version="0.3.1",
        protocol_version=6,
        repo="owner/mux",
        minisign_keys=[current.public_key, following.public_key],
    )
    package_release([folder], tmp_path / "rel", released_at="2024-01-01T00:00:00Z")
    mux = install_by_hand(tmp_path / "rel" / f"mux-{HOST}.tar.gz", tmp_path / "home", "0.3.1")
    installed_folder = tmp_path / "home" / "versions" / "0.3.1"
    listed_before = files_list(installed_folder)

    expected = expected_info(
        "0.3.1", 6, HOST, "owner/mux", [current.public_key, following.public_key]
    )
    # Through the bin symlink, from an unrelated working directory, in a minimal environment.
    result = run_mux(
        ["version", "--json"], bare_env(tmp_path), executable=[str(mux)], cwd=tmp_path, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == expected
    # Through PATH, under busybox sh and dash too (the launcher is plain POSIX sh).
    for shell in ("dash", "busybox sh"):
        by_path = subprocess.run(
            [*shell.split(), "-c", "mux version --json"],
            capture_output=True,
            text=True,
            env={"PATH": f"{mux.parent}:/usr/bin:/bin"},
            cwd=tmp_path,
            timeout=60,
        )
        assert by_path.returncode == 0, (shell, by_path.stderr)
        assert json.loads(by_path.stdout) == expected
    # Running it wrote nothing into the installed folder (its file list is re-checked later):
    # every file there is one the archive holds, with its bytes.
    assert files_list(installed_folder) == listed_before


def test_launcher_without_readlink_f_follows_relative_links(
    tmp_path: Path, keys: tuple[KeyPair, KeyPair]
) -> None:
    current, _ = keys
    folder = build_standin(
        tmp_path / "build",
        version="0.2.0",
        protocol_version=1,
        repo="",
        minisign_keys=[current.public_key],
    )
    # A readlink without -f (old macOS): the fallback walks the chain of links itself.
    tools = tmp_path / "tools"
    tools.mkdir()
    real_readlink = shutil.which("readlink")
    assert real_readlink
    (tools / "readlink").write_text(
        f'#!/bin/sh\ncase "$1" in -f) exit 1 ;; esac\nexec {real_readlink} "$@"\n'
    )
    (tools / "readlink").chmod(0o755)
    chain = tmp_path / "chain"
    chain.mkdir()
    (chain / "hop").symlink_to(os.path.relpath(folder / "mux", chain))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mux").symlink_to("../chain/hop")
    env = {"PATH": f"{bin_dir}:{tools}:/usr/bin:/bin"}
    result = run_mux(
        ["version", "--json"], env, executable=[str(bin_dir / "mux")], cwd=tmp_path, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["version"] == "0.2.0"


def test_lying_standin_reports_what_it_was_told(
    tmp_path: Path, keys: tuple[KeyPair, KeyPair]
) -> None:
    current, _ = keys
    folder = build_standin(
        tmp_path,
        version="0.2.0",
        protocol_version=1,
        repo="",
        minisign_keys=[current.public_key],
        target=HOST,
        report_version="9.9.9",
        report_target=OTHER,
    )
    assert folder.name == f"mux-{HOST}"
    result = run_mux(
        ["version", "--json"],
        bare_env(tmp_path),
        executable=[str(folder / "mux")],
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    reported = json.loads(result.stdout)
    assert (reported["version"], reported["target"]) == ("9.9.9", OTHER)


def test_standalone_refuses_cross_builds(tmp_path: Path, keys: tuple[KeyPair, KeyPair]) -> None:
    with pytest.raises(UsageError, match="no cross-compiling"):
        build_standalone(
            tmp_path,
            version="0.2.0",
            protocol_version=1,
            repo="",
            minisign_keys=[keys[0].public_key],
            target=OTHER,
        )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.timeout(1200)  # ~1.5 min of CPU; much longer on a busy 2-core machine
def test_real_standalone_build_reports_its_build_info(
    tmp_path: Path, real_build: RealBuild, capsys: pytest.CaptureFixture[str]
) -> None:
    current, following = real_build.keys
    folder = real_build.folder
    assert os.access(folder / "mux", os.X_OK)
    assert not list(folder.rglob("*.py")), "a standalone build ships no Python sources to run"
    shipped = {p.name for p in (folder / "_internal").iterdir()}
    assert not shipped & {"mypy", "hypothesis", "pytest", "_pytest", "PyInstaller", "setuptools"}

    # Every file maps to a notice entry; a copy with one more library does not.

    checked = mux_release("notices", "--check-build", str(folder))
    assert checked.returncode == 0, checked.stderr
    assert (folder / "THIRD_PARTY_NOTICES.md").read_text().count("### CPython ") == 1
    copy = tmp_path / "copy" / folder.name
    shutil.copytree(folder, copy, symlinks=True)
    shutil.copy(folder / "mux", copy / "_internal" / "libmystery.so.1")
    unmapped = mux_release("notices", "--check-build", str(copy))
    assert unmapped.returncode == 1
    assert "1 file(s) map to no notice entry: _internal/libmystery.so.1" in unmapped.stderr
    if HOST.endswith("-linux-gnu") and shutil.which("objdump"):
        # The system's libgcc_s, not this machine's copy, whose glibc need is not the floor's
        # (release/build/glibc.py); what is left needs this machine's interpreter's glibc.
        assert not list(folder.rglob("libgcc_s.so*"))
        glibc = mux_release("glibc", str(folder), "--max", "9.99")
        assert glibc.returncode == 0 and " needs glibc 2." in glibc.stdout, glibc.stderr
        assert "libgcc_s" not in glibc.stdout

    # Packaged and installed like a release, run with no Python anywhere on PATH.
    package_release([folder], tmp_path / "rel", released_at="2024-01-01T00:00:00Z")
    sign_release(tmp_path / "rel", current.secret_key())
    verified = mux_release(
        "verify",
        str(tmp_path / "rel"),
        "--public-key",
        current.public_key,
        "--insecure-skip-attestation",
    )
    assert verified.returncode == 0, verified.stderr
    assert "sbom: ok" in verified.stdout and "smoke-test: ok" in verified.stdout
    mux = install_by_hand(tmp_path / "rel" / f"mux-{HOST}.tar.gz", tmp_path / "home", "0.4.0")
    env = {"PATH": "/nonexistent", "HOME": str(tmp_path)}
    result = run_mux(["version", "--json"], env, executable=[str(mux)], cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == expected_info(
        "0.4.0", 5, HOST, "owner/mux", [current.public_key, following.public_key]
    )
    # Verifying a signed release loads cryptography's Rust binding, which needs libgcc_s.so.1:
    # on Linux the system's, since a gnu build does not ship one.
    feed = make_feed(tmp_path / "updates", ("0.5.0",), keypair=current)
    update_env = {
        **env,
        "PATH": "/usr/bin:/bin",  # the stand-in it installs is a sh script
        "MUX_UPDATE_SOURCE": str(feed.path),
        "MUX_INSTALL_DIR": str(tmp_path / "bin-updated"),
    }
    home = str(tmp_path / "home-updated")
    # This build knows its repository, so it wants the release's attestation; this feed's
    # releases have none (what is tested here is the native library, not the attestation).
    updated = run_mux(
        ["update", "--home", home, "--version", "0.5.0", "--insecure-skip-attestation"],
        update_env,
        executable=[str(mux)],
        timeout=120,
    )
    assert updated.returncode == 0, updated.stdout + updated.stderr

    def best_of(command: list[str], runs: int = 5) -> float:
        times = []
        for _ in range(runs):
            begin = time.monotonic()
            subprocess.run(command, capture_output=True, env=env, check=True, timeout=60)
            times.append(time.monotonic() - begin)
        return min(times)

    mux_seconds = best_of([str(mux), "version", "--json"])
    python_seconds = best_of([sys.executable, "-c", "pass"])
    with capsys.disabled():
        print(
            f"\nstandalone build: {real_build.seconds:.1f} s; `mux version --json`: {mux_seconds * 1000:.0f} ms;"
            f" `python -c pass`: {python_seconds * 1000:.0f} ms"
        )


def elf_sections(path: Path) -> set[str]:
    listing = subprocess.run(
        ["readelf", "-S", "-W", str(path)], capture_output=True, text=True, check=True
    ).stdout
    return {word for word in listing.split() if word.startswith(".")}


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_real_build_ships_only_what_it_uses_and_runs_every_path(
    tmp_path: Path, real_build: RealBuild, sandbox_env: dict[str, str]
) -> None:
    """The guard of release.build.standalone's exclusions: the real build on every path of mux."""
    from PyInstaller.archive.readers import CArchiveReader, ZlibArchiveReader

    from release.build.standalone import (
        ARCHIVE_COMPRESSION_LEVEL,
        NEVER_IMPORTED,
        OPTIONAL_NEVER_NEEDED,
        UNNEEDED_RUNTIME_HOOKS,
    )
    from release.build.steps import make_build_info
    from release.publish.feed import sign_feed_index
    from release.publish.package import rehash_sums, sign_release
    from release.rehearsal.fake_sigstore import FakeSigstore
    from tests.support.imports import matching
    from tests.support.releases import serve_directory
    from tests.support.terminal import on_a_terminal
    from updater.formats import models

    folder = real_build.folder
    current, _ = real_build.keys
    # What ships: no left-out module, no unneeded runtime hook, no symbol tables. Modules are
    # in the executable's module archive (PYZ), or .pyc files below _internal/ without one
    # (release.build.standalone.MODULE_ARCHIVE), and extension modules.
    executable = CArchiveReader(str(folder / "mux"))
    assert not set(executable.toc) & set(UNNEEDED_RUNTIME_HOOKS)
    pyz = tmp_path / "PYZ.pyz"
    pyz.write_bytes(executable.extract("PYZ.pyz"))
    internal = folder / "_internal"
    modules = set(ZlibArchiveReader(str(pyz)).toc)
    modules |= {
        ".".join(path.relative_to(internal).with_suffix("").parts).removesuffix(".__init__")
        for path in internal.rglob("*.pyc")
    }
    modules |= {path.name.split(".")[0] for path in internal.rglob("*.so*")}
    assert {"updater.commands.update", "sigstore", "updater.__main__"} <= modules
    assert matching(modules, [*NEVER_IMPORTED, *OPTIONAL_NEVER_NEEDED]) == set()
    # The archive's modules are stored (ARCHIVE_COMPRESSION_LEVEL): a constant of
    # updater.__main__ reads as it is, which it would not from a deflated entry.
    assert ARCHIVE_COMPRESSION_LEVEL == 0
    assert b"__verify-attestation" in pyz.read_bytes()
    if shutil.which("readelf"):
        for library in folder.rglob("*.so*"):
            assert not elf_sections(library) & {".symtab", ".debug_info"}, library

    # A feed of the real build (0.4.0) and the same build as 0.5.0 (protocol 6), both signed
    # and attested, as the release workflow would publish them.
    newer = tmp_path / "builds" / "0.5.0" / folder.name
    shutil.copytree(folder, newer, symlinks=True)
    (info_dir,) = {p.parent for p in newer.rglob("_build_info.json")}
    write_build_info(
        info_dir,
        make_build_info(
            version="0.5.0",
            protocol_version=6,
            target=HOST,
            repo="owner/mux",
            minisign_keys=[k.public_key for k in real_build.keys],
        ),
    )
    write_bill(newer, None)  # its notices and SBOM describe the rebadged build
    sigstore = FakeSigstore.create(tmp_path / "sigstore")
    feed = tmp_path / "feed"
    for version, build in (("0.4.0", folder), ("0.5.0", newer)):
        release = feed / f"v{version}"
        package_release([build], release, released_at="2024-01-01T00:00:00Z")
        archive = release / models.archive_name(HOST)
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        bundle = sigstore.attest(
            {archive.name: digest}, repository="owner/mux", ref=f"refs/tags/v{version}"
        )
        (release / models.attestation_name(version)).write_bytes(bundle)
        rehash_sums(release)
        sign_release(release, current.secret_key())
    sign_feed_index(feed, current.secret_key(), new_feed=True)

    home, bin_dir = tmp_path / "mux-home", tmp_path / "bin"
    with serve_directory(feed) as url:
        env = {
            **sandbox_env,
            "PATH": "/usr/bin:/bin",
            "MUX_UPDATE_SOURCE": url,
            "MUX_INSTALL_DIR": str(bin_dir),
            "MUX_SIGSTORE_TRUSTED_ROOT": str(sigstore.trusted_root_path),
        }

        def mux(executable: Path, *args: str, code: int) -> str:
            result = run_mux(
                list(args), env, executable=[str(executable)], cwd=tmp_path, timeout=120
            )
            assert result.returncode == code, (args, result.stdout, result.stderr)
            return result.stdout

        # The real build installs itself: every layer, its own smoke test.
        installed = mux(
            folder / "mux", "update", "-v", "--home", str(home), "--version", "0.4.0", code=0
        )
        assert "attestation: ok" in installed and "smoke-test: ok" in installed
        installed_mux = bin_dir / "mux"
        mux(installed_mux, "update", "--check", "--json", code=10)
        assert "from the check at" in mux(
            installed_mux, "update", "--check", "--max-age", "1h", code=10
        )
        mux(installed_mux, "server", "start", code=0)
        mux(installed_mux, "server", "status", "--json", code=0)
        # With its progress bar on a terminal (rich), to 0.5.0: the server needs a restart.
        terminal = {k: v for k, v in env.items() if k != "NO_COLOR"} | {"TERM": "xterm"}
        updated = on_a_terminal([str(installed_mux), "update", "--exit-code", "-v"], terminal)
        assert updated.returncode == 20, (updated.stdout, updated.stderr)  # asked: --exit-code
        assert b"attestation: ok" in updated.stdout and b"smoke-test: ok" in updated.stdout
        assert b"Traceback" not in updated.stderr, updated.stderr
        mux(installed_mux, "update", "--rollback", code=0)
        # Its servers run in the build's world (no ctypes: the link watch polls); what they
        # log says nothing broke, through the update, the rollback, a restart and a stop.
        log = Path(sandbox_env["XDG_RUNTIME_DIR"]) / "mux" / "default.log"
        assert "Traceback" not in log.read_text(), log.read_text()
        mux(installed_mux, "server", "restart", code=0)
        mux(installed_mux, "server", "stop", code=0)
        assert "Traceback" not in log.read_text(), log.read_text()
        assert "Usage" in mux(installed_mux, "--help", code=0)
        notices = Path(mux(installed_mux, "version", "--notices", code=0).strip())
        assert notices.name == "THIRD_PARTY_NOTICES.md" and notices.is_file(), notices
        mux(installed_mux, "frobnicate", code=2)
