"""release.publish.package and `mux-release package/sign/keygen`: deterministic, checkable releases."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from release.build.standin import build_standin
from release.build.steps import write_bill
from release.folder.layout import PackageError, read_build_info
from release.publish.feed import write_feed_index
from release.publish.package import package_release, rehash_sums, sign_release
from tests.support.processes import mux_release
from tests.support.releases import (
    KeyPair,
    flip_byte,
    make_feed,
    make_keypair,
    make_release,
    serve_directory,
)
from updater.config.targets import TARGETS, detect_target
from updater.errors import EXIT_USAGE, ParseError, UsageError
from updater.formats.minisign import PublicKey, verify
from updater.formats.models import parse_manifest, parse_releases_json, parse_sha256sums

HOST = detect_target()
OTHER = next(t for t in TARGETS if t != HOST)
RELEASED_AT = "2024-05-01T12:00:00Z"


@pytest.fixture
def keypair(tmp_path: Path) -> KeyPair:
    return make_keypair(tmp_path / "keys")


def standin(
    out: Path, keypair: KeyPair, target: str = HOST, version: str = "0.2.0", **extra: object
) -> Path:
    return build_standin(
        out,
        version=version,
        protocol_version=3,
        repo="owner/mux",
        minisign_keys=[keypair.public_key],
        target=target,
        **extra,  # type: ignore[arg-type]
    )


@pytest.fixture
def builds(tmp_path: Path, keypair: KeyPair) -> list[Path]:
    return [
        standin(tmp_path / "builds", keypair, HOST),
        standin(tmp_path / "builds", keypair, OTHER),
    ]


def listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_packaging_twice_gives_identical_bytes(tmp_path: Path, builds: list[Path]) -> None:
    first = package_release(builds, tmp_path / "one", released_at=RELEASED_AT)
    # Same content, different metadata: mtimes, permissions beyond the exec bit, order given.
    copies = []
    for build in builds:
        copy = tmp_path / "copies" / build.name
        shutil.copytree(build, copy)
        for path in copy.rglob("*"):
            os.utime(path, (1_700_000_000, 1_700_000_000), follow_symlinks=False)
            if path.is_file():
                path.chmod(0o700 if os.access(path, os.X_OK) else 0o600)
        copies.append(copy)
    second = package_release(list(reversed(copies)), tmp_path / "two", released_at=RELEASED_AT)
    assert first == second
    assert listing(tmp_path / "one") == listing(tmp_path / "two")
    assert sorted(listing(tmp_path / "one")) == sorted(
        [
            "SHA256SUMS",
            "manifest.json",
            f"mux-{OTHER}.cdx.json",
            f"mux-{OTHER}.tar.gz",
            f"mux-{HOST}.cdx.json",
            f"mux-{HOST}.tar.gz",
        ]
    )


def test_archive_metadata_is_normalised(tmp_path: Path, builds: list[Path]) -> None:
    package_release(builds[:1], tmp_path / "rel", released_at=RELEASED_AT)
    raw = (tmp_path / "rel" / f"mux-{HOST}.tar.gz").read_bytes()
    # gzip header: magic, deflate, flags (no FNAME), mtime 0.
    assert raw[:3] == b"\x1f\x8b\x08"
    assert raw[3] & 0x08 == 0
    assert raw[4:8] == b"\x00\x00\x00\x00"
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names[0] == f"mux-{HOST}"
    assert all(n == f"mux-{HOST}" or n.startswith(f"mux-{HOST}/") for n in names)
    assert f"mux-{HOST}/mux" in names
    assert f"mux-{HOST}/lib/updater/_build_info.json" in names
    # No bytecode but the stand-in's own: each module it ships compiled once, checked
    # against its source by hash (release.build.standin), never one from a run of the build.
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as tar:
        compiled = {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if "/__pycache__/" in m.name and m.isfile()
        }
    sources = {n for n in names if n.endswith(".py")}
    assert compiled, "a stand-in ships its modules compiled"
    for name, data in compiled.items():
        folder, _, leaf = name.rpartition("/__pycache__/")
        assert leaf.endswith(".pyc") and f"{folder}/{leaf.split('.')[0]}.py" in sources, name
        assert int.from_bytes(data[4:8], "little") == 0b11, name  # hash-based and checked
    for member in members:
        assert (member.uid, member.gid, member.uname, member.gname, member.mtime) == (
            0,
            0,
            "",
            "",
            0,
        )
        assert member.mode in (0o755, 0o644)
    modes = {m.name: m.mode for m in members}
    assert modes[f"mux-{HOST}/mux"] == 0o755
    assert modes[f"mux-{HOST}/lib/mux_entry.py"] == 0o644


def test_members_are_sorted_bytewise_depth_first(tmp_path: Path, builds: list[Path]) -> None:
    build = builds[0]
    package = build / "lib" / "updater"
    # Python sources: what a stand-in's package holds (anything else there maps to nothing).
    (package / "Zeta.py").write_text("z")
    (package / "alpha").mkdir()
    (package / "alpha" / "b.py").write_text("b")
    (package / "alpha.py").write_text("a")
    write_bill(build, None)  # the build's SBOM describes what it ships
    package_release([build], tmp_path / "rel", released_at=RELEASED_AT)
    with tarfile.open(tmp_path / "rel" / f"mux-{HOST}.tar.gz") as tar:
        names = tar.getnames()
    prefix = f"mux-{HOST}/lib/updater/"
    lib = [n.removeprefix(prefix) for n in names if n.startswith(prefix)]
    top = [n for n in lib if "/" not in n]
    assert top[:5] == ["Zeta.py", "__init__.py", "__main__.py", "__pycache__", "_build_info.json"]
    compiled = lib.index("__pycache__")  # depth first: the folder's entries right after it
    assert all(
        n.startswith("__pycache__/") for n in lib[compiled + 1 : lib.index("_build_info.json")]
    )
    assert lib.index("alpha") + 1 == lib.index("alpha/b.py")
    assert lib.index("alpha/b.py") + 1 == lib.index("alpha.py")


def test_source_date_epoch_sets_member_times(
    tmp_path: Path, builds: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    manifest = package_release(builds[:1], tmp_path / "rel")
    assert manifest.released_at == "2023-11-14T22:13:20Z"
    with tarfile.open(tmp_path / "rel" / f"mux-{HOST}.tar.gz") as tar:
        assert {m.mtime for m in tar.getmembers()} == {1700000000}
    raw = (tmp_path / "rel" / f"mux-{HOST}.tar.gz").read_bytes()
    assert raw[4:8] == b"\x00\x00\x00\x00"  # the gzip header stays timeless


def test_real_tools_accept_the_release(
    tmp_path: Path, builds: list[Path], keypair: KeyPair
) -> None:
    release = tmp_path / "rel"
    manifest = package_release(builds, release, released_at=RELEASED_AT)
    sign_release(release, keypair.secret_key())

    sums = subprocess.run(
        ["sha256sum", "-c", "SHA256SUMS"], cwd=release, capture_output=True, text=True
    )
    assert sums.returncode == 0, sums.stdout + sums.stderr
    assert sums.stdout.count(": OK") == 5  # two archives, their SBOMs and the manifest
    signed = subprocess.run(
        ["minisign", "-Vm", "SHA256SUMS", "-p", str(keypair.public_key_path)],
        cwd=release,
        capture_output=True,
        text=True,
    )
    assert signed.returncode == 0, signed.stderr
    assert "version:0.2.0" in signed.stdout
    for asset in manifest.assets:
        listed = subprocess.run(
            ["tar", "-tzf", asset.name], cwd=release, capture_output=True, text=True, check=True
        ).stdout.split()
        assert listed and all(n.startswith(f"mux-{asset.target}/") for n in listed)


def test_manifest_and_sums_describe_the_files(tmp_path: Path, builds: list[Path]) -> None:
    release = tmp_path / "rel"
    returned = package_release(builds, release, released_at=RELEASED_AT)
    raw_manifest = (release / "manifest.json").read_bytes()
    assert raw_manifest.endswith(b"}\n")
    assert (
        raw_manifest
        == (json.dumps(json.loads(raw_manifest), indent=2, sort_keys=True) + "\n").encode()
    )
    manifest = parse_manifest(raw_manifest)
    assert manifest == returned
    assert (manifest.name, manifest.version, manifest.protocol_version) == ("mux", "0.2.0", 3)
    assert manifest.released_at == RELEASED_AT
    assert sorted(manifest.targets) == sorted([HOST, OTHER])
    for asset in manifest.assets:
        data = (release / asset.name).read_bytes()
        assert asset.size == len(data)
        assert asset.sha256 == hashlib.sha256(data).hexdigest()
    sums = parse_sha256sums((release / "SHA256SUMS").read_bytes())
    files = {p.name for p in release.iterdir()} - {"SHA256SUMS"}
    assert set(sums) == files
    for name, digest in sums.items():
        assert digest == hashlib.sha256((release / name).read_bytes()).hexdigest()


def test_extra_files_are_copied_and_summed(tmp_path: Path, builds: list[Path]) -> None:
    bundle = tmp_path / "mux-0.2.0.sigstore.json"
    bundle.write_text("{}\n")
    package_release(builds[:1], tmp_path / "rel", released_at=RELEASED_AT, extra_files=[bundle])
    sums = parse_sha256sums((tmp_path / "rel" / "SHA256SUMS").read_bytes())
    assert sums["mux-0.2.0.sigstore.json"] == hashlib.sha256(b"{}\n").hexdigest()


def test_rehash_after_adding_a_file_drops_the_stale_signature(
    tmp_path: Path, builds: list[Path], keypair: KeyPair
) -> None:
    release = tmp_path / "rel"
    package_release(builds[:1], release, released_at=RELEASED_AT)
    sign_release(release, keypair.secret_key())
    (release / "mux-0.2.0.sigstore.json").write_text('{"late": true}\n')
    rehash_sums(release)
    assert not (release / "SHA256SUMS.minisig").exists()
    sums = parse_sha256sums((release / "SHA256SUMS").read_bytes())
    assert "mux-0.2.0.sigstore.json" in sums
    assert subprocess.run(["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=release).returncode == 0
    sign_release(release, keypair.secret_key())
    verify(
        (release / "SHA256SUMS").read_bytes(),
        (release / "SHA256SUMS.minisig").read_bytes(),
        [PublicKey.parse(keypair.public_key)],
    )


def test_builds_that_disagree_are_refused_and_nothing_is_written(
    tmp_path: Path, keypair: KeyPair
) -> None:
    one = standin(tmp_path / "a", keypair, HOST, version="0.2.0")
    two = standin(tmp_path / "b", keypair, OTHER, version="0.2.1")
    with pytest.raises(PackageError, match=r"0\.2\.1"):
        package_release([one, two], tmp_path / "rel")
    assert not (tmp_path / "rel").exists()

    same = standin(tmp_path / "c", keypair, HOST)
    with pytest.raises(PackageError, match=f"more than one build for {HOST}"):
        package_release([one, same], tmp_path / "rel")
    assert not (tmp_path / "rel").exists()


def test_non_empty_output_folder_is_left_alone(tmp_path: Path, builds: list[Path]) -> None:
    out = tmp_path / "rel"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="not an empty folder"):
        package_release(builds, out)
    assert listing(out) == {"keep.txt": b"mine"}


def test_build_info_must_be_present_once_and_valid(tmp_path: Path, builds: list[Path]) -> None:
    build = builds[0]
    info = build / "lib" / "updater" / "_build_info.json"
    assert read_build_info(build).version == "0.2.0"

    extra = build / "lib" / "vendored" / "updater"
    extra.mkdir(parents=True)
    shutil.copy(info, extra / "_build_info.json")
    with pytest.raises(PackageError, match=r"2 updater/_build_info\.json"):
        package_release([build], tmp_path / "rel")
    shutil.rmtree(build / "lib" / "vendored")

    info.write_text("{not json")
    with pytest.raises(ParseError, match="not valid build info"):
        package_release([build], tmp_path / "rel")
    info.write_text(json.dumps({"version": "0.2.0", "protocol_version": 1, "development": True}))
    with pytest.raises(PackageError, match="development build"):
        package_release([build], tmp_path / "rel")
    info.unlink()
    with pytest.raises(PackageError, match=r"0 updater/_build_info\.json"):
        package_release([build], tmp_path / "rel")
    assert not (tmp_path / "rel").exists()


def test_escaping_symlink_fails_and_leaves_no_partial_release(
    tmp_path: Path, builds: list[Path]
) -> None:
    build = builds[0]
    (build / "lib" / "updater" / "inside.py").symlink_to("__main__.py")
    write_bill(build, None)
    package_release([build], tmp_path / "ok", released_at=RELEASED_AT)
    with tarfile.open(tmp_path / "ok" / f"mux-{HOST}.tar.gz") as tar:
        link = tar.getmember(f"mux-{HOST}/lib/updater/inside.py")
        assert link.issym() and link.linkname == "__main__.py"

    (build / "lib" / "outside").symlink_to("../../../etc")
    with pytest.raises(PackageError, match="leaves the build folder"):
        package_release([build], tmp_path / "rel")
    assert not (tmp_path / "rel").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PackageError):
        package_release([build], empty)
    assert list(empty.iterdir()) == []


def test_extra_file_cannot_replace_release_files(tmp_path: Path, builds: list[Path]) -> None:
    fake = tmp_path / "manifest.json"
    fake.write_text("{}")
    with pytest.raises(UsageError, match="overwrite"):
        package_release(builds, tmp_path / "rel", extra_files=[fake])
    assert not (tmp_path / "rel").exists()


def test_feed_index_lists_tags_newest_first_and_keeps_flags(
    tmp_path: Path, keypair: KeyPair
) -> None:
    feed = tmp_path / "feed"
    make_release(feed, "0.1.0", protocol_version=1, keypair=keypair)
    make_release(feed, "0.10.0", protocol_version=2, keypair=keypair, prerelease=True)
    make_release(feed, "0.2.0", protocol_version=1, keypair=keypair)
    (feed / "notes").mkdir()
    (feed / "v9.9.9").mkdir()  # no manifest: not a release
    releases = parse_releases_json((feed / "releases.json").read_bytes())
    assert [(r.tag, r.prerelease) for r in releases] == [
        ("v0.10.0", True),
        ("v0.2.0", False),
        ("v0.1.0", False),
    ]
    write_feed_index(feed)  # re-indexing keeps the flags it had
    assert parse_releases_json((feed / "releases.json").read_bytes()) == releases


def test_make_feed_signs_every_release(tmp_path: Path) -> None:
    feed = make_feed(tmp_path, versions=["0.1.0", "0.2.0"], protocols={"0.2.0": 2})
    key = PublicKey.parse(feed.keypair.public_key)
    for version, release in feed.releases.items():
        manifest = parse_manifest((release / "manifest.json").read_bytes())
        assert manifest.version == version
        assert manifest.protocol_version == (2 if version == "0.2.0" else 1)
        checked = verify(
            (release / "SHA256SUMS").read_bytes(),
            (release / "SHA256SUMS.minisig").read_bytes(),
            [key],
        )
        assert f"version:{version}" in checked.trusted_comment


def test_lying_build_is_packaged_as_declared_by_its_build_info(
    tmp_path: Path, keypair: KeyPair
) -> None:
    release = make_release(
        tmp_path / "feed",
        "0.2.0",
        protocol_version=1,
        keypair=keypair,
        sign=False,
        build={"report_version": "0.3.0", "report_target": OTHER},
    )
    # The manifest follows the baked build info: this is what a consumer must cross-check.
    manifest = parse_manifest((release / "manifest.json").read_bytes())
    assert manifest.version == "0.3.0"
    assert manifest.targets == (OTHER,)
    with tarfile.open(release / f"mux-{OTHER}.tar.gz") as tar:
        assert all(n.startswith(f"mux-{OTHER}") for n in tar.getnames())
    assert not (release / "SHA256SUMS.minisig").exists()


def test_serve_directory_serves_the_feed_over_loopback(tmp_path: Path) -> None:
    feed = make_feed(tmp_path, versions=["0.1.0"])
    with serve_directory(feed.path) as base_url:
        assert base_url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{base_url}/releases.json", timeout=10) as response:
            assert response.read() == (feed.path / "releases.json").read_bytes()
        with urllib.request.urlopen(f"{base_url}/v0.1.0/SHA256SUMS", timeout=10) as response:
            assert response.read() == (feed.path / "v0.1.0" / "SHA256SUMS").read_bytes()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{base_url}/v0.1.0/nope", timeout=10)
        assert missing.value.code == 404
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{base_url}/releases.json", timeout=5)


# --- the command line ---------------------------------------------------------------------


def test_cli_builds_packages_and_signs_with_a_key_from_the_environment(
    tmp_path: Path, keypair: KeyPair
) -> None:
    built = mux_release(
        "build", "--standin", "--out", tmp_path / "b", "--version", "1.2.3",
        "--protocol-version", "7", "--public-key", keypair.public_key, "--target", HOST,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    build_dir = Path(built.stdout.strip())
    assert build_dir == tmp_path / "b" / f"mux-{HOST}"
    packaged = mux_release(
        "package", build_dir, "--out", tmp_path / "rel", "--released-at", RELEASED_AT
    )
    assert packaged.returncode == 0, packaged.stderr
    assert "mux 1.2.3 (protocol 7)" in packaged.stdout

    env = {
        **os.environ,
        "RELEASE_KEY": keypair.secret_key_path.read_text(),
        "MY_PASSWORD": keypair.password or "",
    }
    signed = mux_release(
        "sign",
        tmp_path / "rel",
        "--private-key-env",
        "RELEASE_KEY",
        "--password-env",
        "MY_PASSWORD",
        env=env,
    )
    assert signed.returncode == 0, signed.stderr
    assert keypair.key_id in signed.stdout
    check = subprocess.run(
        ["minisign", "-Vm", tmp_path / "rel" / "SHA256SUMS", "-p", keypair.public_key_path],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr


def test_cli_sign_errors_are_one_line_and_write_nothing(tmp_path: Path, keypair: KeyPair) -> None:
    make_release(tmp_path / "feed", "0.2.0", protocol_version=1, keypair=keypair, sign=False)
    release = tmp_path / "feed" / "v0.2.0"
    before = listing(release)
    cases: list[tuple[list[str | Path], dict[str, str], str, int]] = [
        (
            ["--private-key-file", keypair.secret_key_path],
            {"MINISIGN_PASSWORD": "wrong"},
            "wrong password",
            1,
        ),
        (
            ["--private-key-file", keypair.secret_key_path],
            {"MINISIGN_PASSWORD": ""},
            "no password",
            1,
        ),
        (["--private-key-file", tmp_path / "missing.key"], {}, "cannot read", EXIT_USAGE),
        (["--private-key-env", "NOT_SET_ANYWHERE"], {}, "is not set", EXIT_USAGE),
        ([], {}, "exactly one of", EXIT_USAGE),
    ]
    for args, env, message, code in cases:
        result = mux_release("sign", release, *args, env={**os.environ, **env})
        assert result.returncode == code, (args, result.stderr)
        assert message in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "Traceback" not in result.stderr
        assert listing(release) == before
    not_release = mux_release("sign", tmp_path, "--private-key-file", keypair.secret_key_path,
                              env={**os.environ, "MINISIGN_PASSWORD": keypair.password or ""})  # fmt: skip
    assert not_release.returncode == EXIT_USAGE
    assert "not a packaged release" in not_release.stderr


def test_cli_package_errors_are_one_line(tmp_path: Path, builds: list[Path]) -> None:
    out = tmp_path / "rel"
    # A real process: the one-line error and the exit code are what the process gives.
    result = mux_release("package", builds[0], builds[0], "--out", out, process=True)
    assert result.returncode == 1
    assert result.stderr.startswith("mux-release: error: more than one build")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_cli_keygen_without_password_then_sign(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    made = mux_release("keygen", "--out", keys, "--no-password")
    assert made.returncode == 0, made.stderr
    public_line = (keys / "minisign.pub").read_text().splitlines()[1]
    assert f"mux-release build --public-key {public_line}" in made.stdout
    assert "install.sh" in made.stdout
    assert (keys / "minisign.key").stat().st_mode & 0o777 == 0o600

    again = mux_release("keygen", "--out", keys, "--no-password")
    assert again.returncode == EXIT_USAGE
    assert "already exists" in again.stderr

    built = mux_release("build", "--standin", "--out", tmp_path / "b", "--public-key", public_line)
    assert built.returncode == 0, built.stderr
    assert mux_release("package", built.stdout.strip(), "--out", tmp_path / "rel").returncode == 0
    assert (
        mux_release(
            "sign", tmp_path / "rel", "--private-key-file", keys / "minisign.key"
        ).returncode
        == 0
    )
    check = subprocess.run(
        ["minisign", "-Vm", tmp_path / "rel" / "SHA256SUMS", "-p", keys / "minisign.pub"]
    )
    assert check.returncode == 0


def test_cli_keygen_needs_a_password_or_an_explicit_no(tmp_path: Path) -> None:
    env = {**os.environ, "MINISIGN_PASSWORD": ""}
    result = mux_release("keygen", "--out", tmp_path / "keys", env=env)
    assert result.returncode == EXIT_USAGE
    assert "--no-password" in result.stderr
    assert not (tmp_path / "keys").exists()


@pytest.mark.slow  # two scrypt runs at minisign's real cost (1 GiB each, ~10 s apiece)
def test_cli_keygen_with_password_makes_a_key_minisign_can_use(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    made = mux_release(
        "keygen",
        "--out",
        keys,
        "--password-env",
        "RELEASE_PW",
        env={**os.environ, "RELEASE_PW": "hunter2"},
    )
    assert made.returncode == 0, made.stderr
    message = tmp_path / "file"
    message.write_text("hello\n")
    signed = subprocess.run(
        ["minisign", "-S", "-s", keys / "minisign.key", "-m", message],
        input="hunter2\n",
        capture_output=True,
        text=True,
    )
    assert signed.returncode == 0, signed.stderr
    check = subprocess.run(
        ["minisign", "-Vm", message, "-p", keys / "minisign.pub"], capture_output=True
    )
    assert check.returncode == 0


@pytest.mark.parametrize("victim", ["archive", "SHA256SUMS", "SHA256SUMS.minisig"])
def test_real_tools_refuse_a_flipped_byte(tmp_path: Path, keypair: KeyPair, victim: str) -> None:
    release = make_release(tmp_path / "feed", "0.2.0", protocol_version=1, keypair=keypair)
    name = f"mux-{HOST}.tar.gz" if victim == "archive" else victim
    flip_byte(release / name, position=-3 if victim == "SHA256SUMS.minisig" else -1)
    sums = subprocess.run(
        ["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=release, capture_output=True
    )
    signature = subprocess.run(
        ["minisign", "-Vm", "SHA256SUMS", "-p", str(keypair.public_key_path)],
        cwd=release,
        capture_output=True,
    )
    if victim == "archive":
        assert sums.returncode != 0 and signature.returncode == 0
    else:
        assert signature.returncode != 0


def test_cli_filesystem_errors_are_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "keys"
    blocker.write_text("a file where the key folder should be")
    result = mux_release("keygen", "--out", blocker, "--no-password")
    assert result.returncode == 1
    assert result.stderr.startswith("mux-release: error: ")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert blocker.read_text() == "a file where the key folder should be"
