"""The release checks that run outside mux update: glibc floor, publish flags, build
comparison (reproducible builds), the SBOM in a packaged release, per-target artifact fetches,
``mux version --notices`` and the pre-publish install script."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from release.bill.sbom import sbom_asset_name
from release.build.glibc import (
    GLIBC_FLOOR,
    GlibcError,
    check_glibc_floor,
    glibc_versions,
    leave_out_system_libraries,
    required_glibc,
)
from release.build.reproduce import NotReproducible, compare_builds
from release.build.standin import build_standin
from release.build.steps import write_bill
from release.publish.flags import plan_publish
from release.publish.install_script import write_install_script
from release.publish.package import rehash_sums, sign_release
from release.rehearsal.fake_sigstore import FakeSigstore
from tests.support.processes import mux_release
from tests.support.releases import KeyPair, make_keypair, make_release
from updater.config.targets import detect_target
from updater.errors import UsageError

REPO_ROOT = Path(__file__).resolve().parent.parent
HOST = detect_target()


@pytest.fixture(scope="module")
def keypair(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_keypair(tmp_path_factory.mktemp("keys"))


# --- glibc floor ------------------------------------------------------------------------------


def test_glibc_versions_are_read_from_objdump_output() -> None:
    output = (
        "0000 DF *UND* 0000 (GLIBC_2.2.5) free\n"
        "0000 DF *UND* 0000 (GLIBC_2.34) pthread_create\n"
        "0000 DF *UND* 0000 (GLIBCXX_3.4.30) _ZNSt\n"
    )
    assert sorted(str(v) for v in glibc_versions(output)) == ["2.2.5", "2.34"]


@pytest.mark.skipif(
    not (shutil.which("gcc") and shutil.which("objdump")), reason="needs gcc and objdump"
)
def test_the_floor_names_the_file_that_needs_a_newer_glibc(tmp_path: Path) -> None:
    if not sys.platform.startswith("linux") or not os.confstr("CS_GNU_LIBC_VERSION"):
        pytest.skip("needs a glibc system")
    source = tmp_path / "src"
    source.mkdir()
    # A shared library calling puts: GLIBC_2.2.5 only (an executable would also ask for
    # __libc_start_main, versioned at the glibc it was linked against).
    (source / "old.c").write_text('#include <stdio.h>\nint say(void) { return puts("x"); }\n')
    (source / "new.c").write_text(
        "#include <pthread.h>\nstatic void *run(void *a) { return a; }\n"
        "int main(void) { pthread_t t; return pthread_create(&t, 0, run, 0); }\n"
    )
    build = tmp_path / "build"
    (build / "_internal").mkdir(parents=True)
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-o",
            str(build / "_internal" / "libold.so"),
            str(source / "old.c"),
        ],
        check=True,
        timeout=120,
    )
    subprocess.run(
        ["gcc", "-o", str(build / "_internal" / "helper"), str(source / "new.c")],
        check=True,
        timeout=120,
    )
    (build / "_internal" / "data.txt").write_text("not an ELF file")
    requirement = required_glibc(build)
    # Independently: what objdump says about the newer binary.
    listing = subprocess.run(
        ["objdump", "-T", str(build / "_internal" / "helper")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert requirement.version == max(glibc_versions(listing))
    assert requirement.files == ("_internal/helper",)
    assert requirement.elf_files == 2
    assert str(requirement.version) >= "2.34"  # pthread_create moved into libc in 2.34
    with pytest.raises(GlibcError, match=r"_internal/helper.*above the floor glibc 2.17"):
        check_glibc_floor(build, "2.17")
    assert check_glibc_floor(build, str(requirement.version)).version == requirement.version
    refused = mux_release("glibc", str(build), "--max", "2.17")
    assert refused.returncode == 1
    assert (
        refused.stderr.startswith("mux-release: error: ") and "_internal/helper" in refused.stderr
    )
    assert len(refused.stderr.strip().splitlines()) == 1
    with pytest.raises(UsageError):
        check_glibc_floor(build, "two")


def test_libgcc_s_is_left_to_the_system_with_every_link_to_it(tmp_path: Path) -> None:
    build = tmp_path / "mux-x86_64-unknown-linux-gnu"
    (build / "_internal").mkdir(parents=True)
    (build / "mux").write_bytes(b"\x7fELF executable")
    (build / "_internal" / "libgcc_s.so.1").write_bytes(b"\x7fELF the runner's libgcc_s")
    (build / "_internal" / "libz.so.1").write_bytes(b"\x7fELF zlib")
    (build / "_internal" / "libgcc_s.so").symlink_to("libgcc_s.so.1")
    (build / "_internal" / "libz.so").symlink_to("libz.so.1")
    removed = leave_out_system_libraries(build)
    assert removed == ["_internal/libgcc_s.so", "_internal/libgcc_s.so.1"]
    left = sorted(p.relative_to(build).as_posix() for p in build.rglob("*") if not p.is_dir())
    assert left == ["_internal/libz.so", "_internal/libz.so.1", "mux"]
    assert leave_out_system_libraries(build) == []


def test_the_wheel_platform_of_the_floor_needs_only_the_standard_library() -> None:
    # What the build job runs with the runner's python3, before anything is installed:
    # no site-packages (-S), so no packaging, no typer.
    command = [sys.executable, "-S", "-E", "-m", "release.build.glibc", "wheel-platform"]
    floor = GLIBC_FLOOR.replace(".", "_")
    for target, expected in (
        ("aarch64-unknown-linux-gnu", (0, f"aarch64-manylinux_{floor}\n", "")),
        ("x86_64-unknown-linux-musl", (2, "", "not a Linux gnu target")),
    ):
        done = subprocess.run(
            [*command, target], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
        )
        assert (done.returncode, done.stdout) == expected[:2] and expected[2] in done.stderr


@pytest.mark.skipif(
    not (shutil.which("gcc") and shutil.which("objdump")), reason="needs gcc and objdump"
)
def test_a_build_asking_the_systems_libgcc_s_for_too_much_is_named(tmp_path: Path) -> None:
    if not sys.platform.startswith("linux") or not os.confstr("CS_GNU_LIBC_VERSION"):
        pytest.skip("needs a glibc system")
    source = tmp_path / "wide.c"
    # __divmodti4 is GCC_7.0.0 in libgcc_s: newer than the floor's GCC 4.8.
    source.write_text(
        "extern __int128 __divmodti4(__int128, __int128, __int128 *);\n"
        "__int128 f(__int128 a, __int128 b) { __int128 r; return __divmodti4(a, b, &r) + r; }\n"
    )
    build = tmp_path / "build"
    (build / "_internal").mkdir(parents=True)
    library = build / "_internal" / "libwide.so"
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-o",
            str(library),
            str(source),
            "-Wl,--no-as-needed",
            "-lgcc_s",
        ],
        check=True,
        timeout=120,
    )
    requirement = required_glibc(build)
    assert [(name, str(v)) for name, v in requirement.libgcc] == [("_internal/libwide.so", "7.0.0")]
    with pytest.raises(
        GlibcError,
        match=r"libgcc_s\.so\.1 for more than GCC_4\.8\.0: "
        r"_internal/libwide\.so \(GCC_7\.0\.0\)",
    ):
        check_glibc_floor(build, "9.99")


def test_the_floor_users_read_is_the_one_the_release_checks() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert f"glibc {GLIBC_FLOOR} or newer" in readme and "libgcc_s.so.1" in readme
    release_doc = (REPO_ROOT / "docs" / "release.md").read_text(encoding="utf-8")
    assert f"## The glibc floor: {GLIBC_FLOOR}\n" in release_doc


# --- publish flags ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tag", "published", "flags"),
    [
        ("v1.6.0", ["v1.5.0", "v1.4.2"], ["--latest=true"]),
        ("v1.4.3", ["v1.5.0", "v1.4.2"], ["--latest=false"]),  # a fix on an older line
        ("v2.0.0rc1", ["v1.5.0"], ["--latest=false", "--prerelease"]),
        ("v1.5.1", ["v2.0.0rc1", "v1.5.0", "nightly", "libfoo-v9.0.0"], ["--latest=true"]),
        ("v1.0.0", [], ["--latest=true"]),  # the first release
        ("v1.5.0", ["v1.5.0"], ["--latest=true"]),  # a re-run finds its own draft or release
    ],
)
def test_only_the_highest_stable_version_becomes_latest(
    tag: str, published: list[str], flags: list[str]
) -> None:
    assert plan_publish(tag, published).gh_flags() == flags


def test_publish_flags_read_what_gh_lists_and_refuse_an_empty_answer(tmp_path: Path) -> None:
    listed = tmp_path / "published.json"
    listed.write_text('[{"tagName": "v1.5.0"}, {"tagName": "v1.4.2"}]\n')
    done = mux_release("publish-flags", "--tag", "v1.4.3", "--published", str(listed))
    assert (done.returncode, done.stdout) == (0, "--latest=false\n")
    listed.write_text("[]\n")  # gh's answer when nothing is published yet: the first release
    first = mux_release("publish-flags", "--tag", "v1.0.0", "--published", "-", stdin="[]")
    assert (first.returncode, first.stdout) == (0, "--latest=true\n")
    # What a failed `gh release list` leaves: nothing. Never "latest" by default.
    for broken, message in (
        ("", "is empty: did `gh release list` fail?"),
        ("v1.5.0\n", "is not JSON"),
        ('{"tagName": "v1.5.0"}', "is not a list of releases"),
    ):
        listed.write_text(broken)
        refused = mux_release("publish-flags", "--tag", "v1.4.3", "--published", str(listed))
        assert refused.returncode == 1 and message in refused.stderr, refused.stderr
        assert refused.stdout == ""
    bad = mux_release("publish-flags", "--tag", "latest", "--published", "-", stdin="[]")
    assert bad.returncode == 2 and "release tag" in bad.stderr


@pytest.fixture
def github(
    tmp_path: Path,
) -> Iterator[Callable[..., tuple[subprocess.CompletedProcess[str], dict[str, Any]]]]:
    """release/publish.sh against a stand-in gh (tests/support/fake_gh.py) over a state file."""
    tools = tmp_path / "tools"
    tools.mkdir()
    shim = tools / "gh"
    shim.write_text(
        f'#!/bin/sh\nexec {sys.executable} {REPO_ROOT / "tests" / "support" / "fake_gh.py"} "$@"\n'
    )
    shim.chmod(0o755)
    state_path = tmp_path / "gh-state.json"
    release_dir = tmp_path / "release-files"
    release_dir.mkdir()
    (release_dir / "SHA256SUMS").write_text("abc  mux-x.tar.gz\n")
    (release_dir / "mux-x.tar.gz").write_bytes(b"archive")

    def publish(
        tag: str, releases: dict[str, Any], fail: tuple[str, ...] = ()
    ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
        state_path.write_text(json.dumps({"releases": releases, "calls": [], "fail": list(fail)}))
        done = subprocess.run(
            ["sh", str(REPO_ROOT / "release" / "publish.sh"), tag, str(release_dir)],
            env={
                **os.environ,
                "PATH": f"{tools}:{os.environ['PATH']}",
                "FAKE_GH_STATE": str(state_path),
                "MUX_RELEASE": f"{sys.executable} -m release",
            },
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return done, json.loads(state_path.read_text())

    yield publish


def published(*tags: str, latest: str = "") -> dict[str, Any]:
    return {
        tag: {"draft": False, "latest": tag == latest, "prerelease": False, "files": {}}
        for tag in tags
    }


def test_publishing_a_fix_on_an_older_line_keeps_latest_where_it_is(github: Any) -> None:
    done, state = github("v1.4.3", published("v1.5.0", "v1.4.2", latest="v1.5.0"))
    assert done.returncode == 0, done.stderr
    release = state["releases"]["v1.4.3"]
    assert not release["draft"] and set(release["files"]) == {"SHA256SUMS", "mux-x.tar.gz"}
    assert state["releases"]["v1.5.0"]["latest"] and not release["latest"]
    commands = [call[1] for call in state["calls"]]
    assert commands == ["list", "view", "create", "upload", "edit"]
    create = state["calls"][2]
    assert "--draft" in create and "--latest=false" in create


def test_a_failing_release_list_publishes_nothing(github: Any) -> None:
    # A 502 from `gh release list` used to read as "nothing published": --latest=true.
    done, state = github("v1.4.3", published("v1.5.0", latest="v1.5.0"), fail=("list",))
    assert done.returncode != 0
    assert [call[1] for call in state["calls"]] == ["list"]
    assert set(state["releases"]) == {"v1.5.0"} and state["releases"]["v1.5.0"]["latest"]


def test_the_first_release_becomes_latest(github: Any) -> None:
    done, state = github("v1.0.0", {})
    assert done.returncode == 0, done.stderr
    assert state["releases"]["v1.0.0"]["latest"] and not state["releases"]["v1.0.0"]["draft"]


def test_a_rerun_reuses_the_draft_or_finds_the_release_done(github: Any, tmp_path: Path) -> None:
    draft = {"v1.6.0": {"draft": True, "latest": False, "prerelease": False, "files": {}}}
    done, state = github("v1.6.0", {**published("v1.5.0", latest="v1.5.0"), **draft})
    assert done.returncode == 0, done.stderr
    assert [call[1] for call in state["calls"]] == ["list", "view", "upload", "edit"]
    assert state["releases"]["v1.6.0"]["latest"] and not state["releases"]["v1.5.0"]["latest"]

    sums = (tmp_path / "release-files" / "SHA256SUMS").read_text()
    done_before = published("v1.6.0", latest="v1.6.0")
    done_before["v1.6.0"]["contents"] = {"SHA256SUMS": sums}
    again, state = github("v1.6.0", done_before)
    assert again.returncode == 0 and "already published with these files" in again.stdout
    assert [call[1] for call in state["calls"]] == ["list", "view", "download"]

    done_before["v1.6.0"]["contents"] = {"SHA256SUMS": "other  mux-x.tar.gz\n"}
    other, state = github("v1.6.0", done_before)
    assert other.returncode == 1 and "already published with other files" in other.stderr
    assert "upload" not in [call[1] for call in state["calls"]]


# --- reproducible builds --------------------------------------------------------------------------


def two_builds(tmp_path: Path, keypair: KeyPair, **changed: str) -> tuple[Path, ...]:
    """Two stand-in builds of mux 1.0.0, and a third of ``changed`` settings."""
    settings = {
        "version": "1.0.0",
        "protocol_version": 1,
        "repo": "o/r",
        "minisign_keys": [keypair.public_key],
    }
    return tuple(
        build_standin(tmp_path / name, **{**settings, **(changed if name == "three" else {})})
        for name in ("one", "two", "three")
    )


def change_a_file(build: Path) -> None:
    (build / "lib" / "updater" / "layout.py").write_text("# changed\n")
    write_bill(build, None)


def test_two_builds_that_differ_are_named(tmp_path: Path, keypair: KeyPair) -> None:
    first, second, other = two_builds(tmp_path, keypair, version="1.0.1")
    assert compare_builds(first, second).files > 10
    ok = mux_release("compare-builds", str(first), str(second))
    assert ok.returncode == 0 and "identical" in ok.stdout

    change_a_file(second)
    with pytest.raises(NotReproducible) as caught:
        compare_builds(first, second)
    message = caught.value.message
    assert "lib/updater/layout.py" in message and "sbom.cdx.json" in message
    with pytest.raises(Exception, match="compare two builds of one version"):
        compare_builds(first, other)


def test_check_build_does_not_depend_on_the_checkers_source_date_epoch(
    tmp_path: Path, keypair: KeyPair
) -> None:
    """A build made with SOURCE_DATE_EPOCH (as the release jobs make it) and checked later
    without it, or with another one, is the same build: no false tamper alarm."""
    base = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
    out = tmp_path / "out"
    built = mux_release(
        *(
            "build",
            "--standin",
            "--out",
            str(out),
            "--repo",
            "o/r",
            "--public-key",
            keypair.public_key,
        ),
        env={**base, "SOURCE_DATE_EPOCH": "1700000000"},
    )
    assert built.returncode == 0, built.stderr
    folder = out / f"mux-{HOST}"
    sbom = json.loads((folder / "sbom.cdx.json").read_text())
    assert sbom["metadata"]["timestamp"] == "2023-11-14T22:13:20+00:00"
    for env in (base, {**base, "SOURCE_DATE_EPOCH": "1800000000"}):
        checked = mux_release("notices", "--check-build", str(folder), env=env)
        assert checked.returncode == 0, checked.stderr
    # A changed file is still caught, whatever the checker's SOURCE_DATE_EPOCH.
    (folder / "lib" / "updater" / "layout.py").write_text("# changed\n")
    changed = mux_release("notices", "--check-build", str(folder), env=base)
    assert changed.returncode == 1 and "sbom.cdx.json is not what the folder" in changed.stderr


def test_builds_from_two_runner_images_that_differ_are_not_comparable(
    tmp_path: Path, keypair: KeyPair
) -> None:
    """An image rollout between the build and the rebuild job changes what is not fixed by
    the recipe (docs/release.md): reported with the files, not failed; the same image fails."""
    first, second, third = two_builds(tmp_path, keypair)
    change_a_file(second)
    image = {"image_os": "ubuntu24", "image_version": "20250105.1", "arch": "X64"}
    environments = []
    for name, version in (("a", "20250105.1"), ("b", "20250112.1"), ("c", "20250105.1")):
        path = tmp_path / f"{name}.environment.json"
        path.write_text(json.dumps({**image, "image_version": version}))
        environments.append(str(path))

    rolled = mux_release(
        "compare-builds", str(first), str(second), "--environments", *environments[:2]
    )
    assert rolled.returncode == 0, rolled.stderr
    assert rolled.stdout.startswith(
        "not comparable: the builds ran on different machines "
        "(image_version: 20250105.1 != 20250112.1); they differ in "
    )
    assert "lib/updater/layout.py" in rolled.stdout
    same = mux_release(
        "compare-builds",
        str(first),
        str(second),
        "--environments",
        environments[0],
        environments[2],
    )
    assert same.returncode == 1 and "lib/updater/layout.py" in same.stderr
    # Identical builds are identical whatever the machines.
    ok = mux_release("compare-builds", str(first), str(third), "--environments", *environments[:2])
    assert ok.returncode == 0 and ok.stdout.startswith("the builds are identical: ")
    (tmp_path / "a.environment.json").write_text("[]")
    bad = mux_release("compare-builds", str(first), str(third), "--environments", *environments[:2])
    assert bad.returncode == 1 and "is not a build environment" in bad.stderr


# --- the SBOM in a packaged release -------------------------------------------------------------


def verify(folder: Path, keypair: KeyPair) -> subprocess.CompletedProcess[str]:
    return mux_release(
        "verify", str(folder), "--public-key", keypair.public_key, "--insecure-skip-attestation"
    )


def test_mux_release_verify_checks_each_archives_sbom(tmp_path: Path, keypair: KeyPair) -> None:
    release = make_release(tmp_path / "feed", "0.5.0", protocol_version=1, keypair=keypair)
    sbom = release / sbom_asset_name(HOST)
    assert sbom.is_file()
    ok = verify(release, keypair)
    assert ok.returncode == 0, ok.stderr
    assert f"sbom: ok: {sbom.name} lists the" in ok.stdout

    # An SBOM that leaves out a file of the archive, consistently re-listed and re-signed.
    doc = json.loads(sbom.read_text())
    mux_component = next(c for c in doc["components"] if c["bom-ref"] == "mux")
    mux_component["components"] = [
        c for c in mux_component["components"] if not c["name"].endswith("layout.py")
    ]
    sbom.write_text(json.dumps(doc))
    rehash_sums(release)
    sign_release(release, keypair.secret_key())
    dropped = verify(release, keypair)
    assert dropped.returncode == 3
    assert "verification failed (sbom)" in dropped.stderr
    assert "lib/updater/install/layout.py is not in the SBOM" in dropped.stderr

    # No SBOM at all: the release is incomplete.
    sbom.unlink()
    rehash_sums(release)
    sign_release(release, keypair.secret_key())
    missing = verify(release, keypair)
    assert missing.returncode == 3
    assert f"SHA256SUMS does not list {sbom.name}" in missing.stderr


def test_packaging_refuses_a_build_changed_after_its_sbom(tmp_path: Path, keypair: KeyPair) -> None:
    folder = build_standin(
        tmp_path / "b",
        version="0.5.0",
        protocol_version=1,
        repo="",
        minisign_keys=[keypair.public_key],
    )
    (folder / "lib" / "updater" / "extra.py").write_text("x = 1\n")
    done = mux_release("package", str(folder), "--out", str(tmp_path / "rel"))
    assert done.returncode == 1
    assert "lib/updater/extra.py is not in the SBOM" in done.stderr
    assert not (tmp_path / "rel").exists()


# --- mux version --notices -----------------------------------------------------------------------


def test_mux_version_notices_prints_the_shipped_file(tmp_path: Path, keypair: KeyPair) -> None:
    folder = build_standin(
        tmp_path, version="0.5.0", protocol_version=1, repo="", minisign_keys=[keypair.public_key]
    )
    done = subprocess.run(
        [str(folder / "mux"), "version", "--notices"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip())
    assert path == folder / "THIRD_PARTY_NOTICES.md"
    assert path.read_text().startswith(f"# Third-party notices: mux 0.5.0 ({HOST})")
    as_json = subprocess.run(
        [str(folder / "mux"), "version", "--notices", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == {"schema": 2, "notices": str(path)}
    (folder / "THIRD_PARTY_NOTICES.md").unlink()
    gone = subprocess.run(
        [str(folder / "mux"), "version", "--notices"], capture_output=True, text=True, timeout=60
    )
    assert gone.returncode == 1 and "ships no THIRD_PARTY_NOTICES.md" in gone.stderr


# --- the pre-publish install script -----------------------------------------------------------------


@pytest.mark.skipif(shutil.which("minisign") is None, reason="install.sh checks with minisign")
def test_preflight_installs_and_verifies_a_release_folder(
    tmp_path: Path, keypair: KeyPair, sandbox_env: dict[str, str]
) -> None:
    repo = "acme/mux"
    release = make_release(
        tmp_path / "feed", "0.6.0", protocol_version=1, keypair=keypair, repo=repo
    )
    sigstore = FakeSigstore.create(tmp_path / "sigstore")
    subjects = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in release.iterdir()
        if p.name.endswith((".tar.gz", ".cdx.json")) or p.name == "manifest.json"
    }
    (release / "mux-0.6.0.sigstore.json").write_bytes(
        sigstore.attest(subjects, repository=repo, ref="refs/tags/v0.6.0")
    )
    write_install_script(release / "install.sh", keys=[keypair.public_key], repo=repo)
    rehash_sums(release)
    sign_release(release, keypair.secret_key())
    env = {
        **sandbox_env,
        "MUX_REPO": repo,
        "MUX_MINISIGN_PUBLIC_KEY": keypair.public_key,
        "MUX_SIGSTORE_TRUSTED_ROOT": str(sigstore.trusted_root_path),
        "MUX_RELEASE": f"{sys.executable} -m release",
        "PYTHON": sys.executable,
    }
    script = REPO_ROOT / "release" / "preflight.sh"
    done = subprocess.run(
        ["sh", str(script), str(release), "v0.6.0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "attestation: ok" in done.stdout and "sbom: ok" in done.stdout
    assert "preflight: v0.6.0 installs and verifies on this machine" in done.stdout

    # The same release with a broken archive never reaches publishing.
    archive = release / f"mux-{HOST}.tar.gz"
    data = bytearray(archive.read_bytes())
    data[-40] ^= 0xFF
    archive.write_bytes(bytes(data))
    broken = subprocess.run(
        ["sh", str(script), str(release), "v0.6.0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert broken.returncode != 0
