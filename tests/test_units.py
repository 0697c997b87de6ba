"""Unit-level checks of pure pieces: targets, package-manager trees, parsers' worst inputs,
the token policy across a redirect, and what the cached check imports."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import respx
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import run_mux
from updater.commands import cache
from updater.config import settings as mux_settings
from updater.config.targets import TARGETS, UnsupportedPlatform, detect_target, target_for
from updater.errors import UsageError
from updater.install.layout import package_manager_for
from updater.protocol import StatusLineError, parse_status_line


@pytest.mark.parametrize(
    ("system", "machine", "musl", "rosetta", "expected"),
    [
        ("Linux", "x86_64", False, False, "x86_64-unknown-linux-gnu"),
        ("Linux", "amd64", True, False, "x86_64-unknown-linux-musl"),
        ("Linux", "aarch64", False, False, "aarch64-unknown-linux-gnu"),
        ("Linux", "arm64", True, False, "aarch64-unknown-linux-musl"),
        ("Darwin", "arm64", False, False, "aarch64-apple-darwin"),
        ("Darwin", "x86_64", False, False, "x86_64-apple-darwin"),
        ("Darwin", "x86_64", False, True, "aarch64-apple-darwin"),  # Rosetta 2
    ],
)
def test_target_for(system: str, machine: str, musl: bool, rosetta: bool, expected: str) -> None:
    assert target_for(system, machine, musl=musl, rosetta=rosetta) == expected


@pytest.mark.parametrize(("system", "machine"), [("Linux", "riscv64"), ("FreeBSD", "x86_64")])
def test_unsupported_platform_lists_the_targets(system: str, machine: str) -> None:
    with pytest.raises(UnsupportedPlatform) as caught:
        target_for(system, machine)
    assert all(target in str(caught.value) for target in TARGETS)


def test_mux_target_overrides_and_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    # MUX_TARGET is read once, into the settings, and checked where the target is chosen.
    monkeypatch.setenv("MUX_TARGET", "aarch64-unknown-linux-musl")
    assert detect_target(mux_settings.load().target) == "aarch64-unknown-linux-musl"
    monkeypatch.setenv("MUX_TARGET", "sparc-sun-solaris")
    with pytest.raises(UnsupportedPlatform, match="not a published target"):
        detect_target(mux_settings.load().target)


def test_the_running_libc_is_asked_not_a_file() -> None:
    import os

    monkey_free = detect_target.__module__
    assert monkey_free == "updater.config.targets"
    if sys.platform.startswith("linux"):
        glibc = bool(os.confstr("CS_GNU_LIBC_VERSION"))
        assert detect_target().endswith("-gnu" if glibc else "-musl")


@pytest.mark.parametrize(
    ("path", "command"),
    [
        ("/opt/homebrew/Cellar/mux/0.1.0/bin/mux", "brew upgrade mux"),
        ("/nix/store/abc-mux-0.1.0/bin/mux", "nix profile upgrade mux"),
        ("/home/u/.local/share/pipx/venvs/mux/bin/mux", "pipx upgrade mux"),
        ("/home/u/.local/share/uv/tools/mux/bin/mux", "uv tool upgrade mux"),
        ("/usr/lib/python3/site-packages/updater/cli.py", "pip install --upgrade mux"),
        ("/home/u/.cargo/bin/mux", "cargo install mux"),
    ],
)
def test_package_manager_trees(path: str, command: str) -> None:
    found = package_manager_for(Path(path))
    assert found is not None and command in found[1]


def test_our_own_layout_is_not_a_package_manager() -> None:
    assert package_manager_for(Path("/home/u/.local/share/mux/versions/0.1.0/mux")) is None


def test_deeply_nested_json_is_garbage_not_a_crash(tmp_path: Path, monkeypatch) -> None:
    deep = b"[" * 100_000
    with pytest.raises(StatusLineError) as caught:
        parse_status_line(deep)
    assert caught.value.kind == "garbage"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache.check_cache_path().parent.mkdir(parents=True)
    cache.check_cache_path().write_bytes(deep)
    assert cache.load({"k": 1}, 3600) is None


@respx.mock
def test_the_token_never_follows_a_redirect_to_the_download_host() -> None:
    from updater.sources.github import GitHubSource

    download = "https://github.com/acme/mux/releases/download/v1.0.0/manifest.json"
    blob = "https://objects.githubusercontent.com/github-production-release-asset/1/manifest"
    first = respx.get(download).mock(return_value=httpx.Response(302, headers={"Location": blob}))
    second = respx.get(blob).mock(return_value=httpx.Response(200, content=b"{}"))
    source = GitHubSource(
        "acme/mux", web_url="https://github.com", api_url="https://api.github.com", token="secret"
    )
    try:
        assert source.fetch("v1.0.0", "manifest.json") == b"{}"
    finally:
        source.close()
    assert first.calls.last.request.headers["Authorization"] == "Bearer secret"
    assert "Authorization" not in second.calls.last.request.headers


def test_a_cached_check_imports_neither_typer_nor_httpx(tmp_path: Path, sandbox_env) -> None:
    from tests.test_check import trusting, write_feed, write_release

    feed = tmp_path / "feed"
    write_release(feed, "9.0.0")
    write_feed(feed, [("v9.0.0", False)])
    env = {**sandbox_env, "MUX_UPDATE_SOURCE": str(feed)}
    command = [
        sys.executable,
        "-X",
        "importtime",
        "-m",
        "updater",
        "update",
        "--check",
        "--max-age",
        "1h",
        "--json",
        *trusting(),
    ]
    first = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert first.returncode == 10
    assert json.loads(first.stdout)["cached"] is False
    second = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert json.loads(second.stdout)["cached"] is True
    imported = {line.split("|")[-1].strip() for line in second.stderr.splitlines()}
    assert not {"typer", "httpx", "rich", "click", "sigstore"} & imported
    version = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "updater", "version"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    imported = {line.split("|")[-1].strip() for line in version.stderr.splitlines()}
    assert not {"typer", "httpx", "rich", "packaging", "platformdirs"} & imported


def test_the_client_never_imports_the_release_tooling() -> None:
    """The installed mux is updater/ alone: nothing in it imports release/ or its tomlkit.

    Checked twice: no import statement names them, and importing every module of the
    package (as PyInstaller's --collect-submodules does) loads neither.
    """
    import ast

    package = Path(__file__).resolve().parent.parent / "updater"
    modules = sorted(path.stem for path in package.glob("*.py"))
    for name in modules:
        tree = ast.parse((package / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported = [node.module or ""]
            else:
                continue
            for module in imported:
                assert module.split(".")[0] not in {"release", "tomlkit"}, (name, module)
    script = (
        "import importlib, sys\n"
        f"for name in {[m for m in modules if m != '__main__']!r}:\n"
        "    importlib.import_module('updater.' + name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('release', 'tomlkit')))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "[]"


def test_the_release_tooling_without_its_extra_says_how_to_get_it() -> None:
    """mux-release with tomlkit missing (mux installed without [release]): one line, exit 1."""
    script = (
        "import sys\n"
        "sys.modules['tomlkit'] = None  # as if the release extra were not installed\n"
        "sys.argv = ['mux-release', 'pins', '--check']\n"
        "from release.cli import main\n"
        "main()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines() == [
        "mux-release: error: tomlkit is missing: the release tooling is the optional extra of "
        "mux (pip install 'mux[release]'; in a checkout, uv sync)"
    ]


def test_a_versions_protocol_is_read_where_the_contract_pins_its_build_info(tmp_path):
    """``<folder>/<code folder>/updater/_build_info.json``, one level below the top, exactly
    once: a build whose info is anywhere else, or in two places, has no known protocol."""
    from updater.config.buildfolder import build_info_in
    from updater.install.layout import Layout, installed_protocol

    layout = Layout(home=str(tmp_path), bin_dir=str(tmp_path / "bin"))

    def info(version: str, code_folder: str, protocol: object) -> None:
        path = Path(layout.version_dir(version)) / code_folder / "updater" / "_build_info.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"protocol_version": protocol}))

    info("1.0.0", "_internal", 3)
    info("1.1.0", "lib", 4)
    info("1.2.0", "_internal", 3)
    info("1.2.0", "lib", 4)  # two candidates: which one is the build's cannot be told
    info("1.3.0", "lib", True)  # not a protocol number
    deep = Path(layout.version_dir("1.4.0")) / "a" / "b" / "updater" / "_build_info.json"
    deep.parent.mkdir(parents=True)
    deep.write_text(json.dumps({"protocol_version": 5}))
    assert build_info_in(str(layout.version_dir("1.0.0"))) == str(
        Path(layout.version_dir("1.0.0")) / "_internal" / "updater" / "_build_info.json"
    )
    assert [installed_protocol(layout, v) for v in ("1.0.0", "1.1.0", "1.2.0", "1.3.0")] == [
        3,
        4,
        None,
        None,
    ]
    assert installed_protocol(layout, "1.4.0") is None
    assert installed_protocol(layout, "9.9.9") is None


# --- the layout's rules on path strings (updater.install.layout) against pathlib's ---------

_PATH_PARTS = st.sampled_from(["", ".", "..", "a", "versions", "mux", ".hidden", "x.partial-1"])


@given(
    st.lists(_PATH_PARTS, max_size=6),
    st.sampled_from(["", "/", "//", "///"]),
    st.sampled_from(["", "/", "//"]),
)
def test_path_strings_are_spelt_and_walked_as_pathlib_does(
    parts: list[str], head: str, tail: str
) -> None:
    from pathlib import PurePosixPath

    from updater.install import layout as _layout_paths

    path = head + "/".join(parts) + tail
    if not path:
        return  # (Path("") is ".", and no caller passes an empty path)
    assert _layout_paths.pure(path) == str(PurePosixPath(path))
    walked = _layout_paths._parents(_layout_paths.pure(path))
    assert walked == [str(p) for p in PurePosixPath(path).parents]
    assert _layout_paths.absolute(path) == str(Path(path).absolute())


def test_the_layout_reads_an_install_on_path_strings_as_pathlib_would(tmp_path: Path) -> None:
    """The one layout type, on strings: what it says of an install, through a symlinked home,
    a relative link, partial and hidden folders and a link to a folder (each expected value
    is what pathlib's reading gives)."""
    from updater.install.layout import Layout

    real = tmp_path / "real-home"
    versions = real / "versions"
    for name in ("1.0.0", "1.1.0", ".trash-1", "1.2.0.partial-x", "1.3.0"):
        (versions / name).mkdir(parents=True)
    (versions / "1.3.0").rmdir()
    (versions / "1.3.0").symlink_to(versions / "1.1.0")  # a link to a folder counts
    (versions / "notes.txt").write_text("a file, not a version")
    (tmp_path / "home").symlink_to(real)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    layout = Layout(home=str(tmp_path / "home"), bin_dir=str(bin_dir))
    assert layout.versions == str(Path(layout.home) / "versions")
    assert layout.link == str(bin_dir / "mux")
    pathlib_versions = sorted(
        p.name
        for p in (tmp_path / "home" / "versions").iterdir()
        if p.is_dir() and not p.name.startswith(".") and ".partial-" not in p.name
    )
    assert layout.installed_versions() == pathlib_versions == ["1.0.0", "1.1.0", "1.3.0"]
    assert layout.active_version() is None  # no link yet
    (bin_dir / "mux").symlink_to("../home/versions/1.1.0/mux")  # relative, through the link
    assert layout.active_version() == "1.1.0"
    (bin_dir / "mux").unlink()
    (bin_dir / "mux").symlink_to(versions / "1.0.0" / "mux" / "")  # a trailing slash
    assert layout.active_version() == "1.0.0"
    (bin_dir / "mux").unlink()
    (bin_dir / "mux").symlink_to(versions / "1.0.0" / "other")
    assert layout.active_version() is None  # not mux
    (bin_dir / "mux").unlink()
    (bin_dir / "mux").symlink_to(tmp_path / "elsewhere" / "1.0.0" / "mux")
    assert layout.active_version() is None  # not this install's
    for executable, expected in [
        (versions / "1.0.0" / "_internal" / "mux", "1.0.0"),
        (versions / "1.2.0.partial-x" / "mux", None),
        (versions / ".trash-1" / "mux", None),
        (versions, None),
        (tmp_path / "home" / "versions" / "1.0.0" / "mux", None),  # not resolved: not ours
        (Path("versions/1.0.0/mux"), None),
    ]:
        assert layout.version_of(executable) == expected
        assert layout.version_of(str(executable)) == expected


def test_the_running_install_and_version_are_found_from_a_module_file(tmp_path: Path) -> None:
    from updater.install import layout

    home = tmp_path / "home"
    module = home / "versions" / "2.0.0" / "_internal" / "updater" / "layout.pyc"
    module.parent.mkdir(parents=True)
    module.write_bytes(b"")
    assert layout.running_install_home(str(module)) is None  # no install.json: not an install
    (home / "install.json").write_text("{}")
    assert layout.running_install_home(str(module)) == str(home)
    here = layout.Layout(home=str(home), bin_dir=str(tmp_path / "bin"))
    assert layout.running_version(here, str(module)) == "2.0.0"
    elsewhere = layout.Layout(home=str(tmp_path / "other"), bin_dir=str(tmp_path / "bin"))
    assert layout.running_version(elsewhere, str(module)) is None


def test_resolve_layout_spells_paths_as_pathlib_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from updater.install.layout import resolve_layout

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "install.json").write_text(
        json.dumps({"versions": {}, "bin_dir": "/opt/b//in/"})
    )
    (tmp_path / "user" / "y").mkdir(parents=True)
    (tmp_path / "user" / "y" / "install.json").write_text(
        json.dumps({"versions": {}, "bin_dir": "/opt/y"})
    )
    cases: list[tuple[Path, Path | None, Path, Path]] = [
        (Path("h"), None, tmp_path / "h", Path("/opt/b/in")),  # the bin dir on record
        (Path("h/./"), Path("b"), tmp_path / "h", tmp_path / "b"),  # configured wins
        (Path("~/x"), None, tmp_path / "user" / "x", tmp_path / "user" / ".local" / "bin"),
        (Path("~/y"), None, tmp_path / "user" / "y", Path("/opt/y")),  # its record, ~ expanded
    ]
    for home, bin_dir, expected_home, expected_bin in cases:
        layout = resolve_layout(home, bin_dir, development=True)
        assert (layout.home, layout.bin_dir) == (str(expected_home), str(expected_bin))
        spelt = resolve_layout(
            str(home), None if bin_dir is None else str(bin_dir), development=True
        )
        assert (spelt.home, spelt.bin_dir) == (str(expected_home), str(expected_bin))


@pytest.mark.parametrize("variable", ["MUX_HOME", "MUX_INSTALL_DIR", "XDG_BIN_HOME"])
def test_a_path_variable_whose_home_cannot_be_expanded_is_one_usage_error(
    variable: str, sandbox_env: dict[str, str]
) -> None:
    """`~user` of a user with no home is refused, named, in one line and exit 2, before
    anything is read or written: read as a relative folder, the install or its link would
    land below the working directory."""
    env = {**sandbox_env, variable: "~no-such-user-of-mux/bin"}
    with pytest.raises(UsageError, match=f"{variable}=~no-such-user-of-mux/bin"):
        mux_settings.load(env)
    for args in (["update", "--check", "--max-age", "1h"], ["update"]):
        result = run_mux(args, env)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.count("\n") == 1 and variable in result.stderr, result.stderr
    assert not (Path.cwd() / "~no-such-user-of-mux").exists()


def test_a_plain_connection_reads_what_has_arrived_at_once_a_tls_one_as_httpcore_asks() -> None:
    """httpcore asks for 64 KiB; mux's plain streams take up to 1 MiB of what has arrived (a
    download passes fewer blocks through h11 and httpx), TLS streams keep httpcore's size."""
    import socket
    import tempfile

    import httpcore

    from updater.net import budget

    arrived = bytes(range(256)) * 600  # 150 KiB: more than httpcore asks for, less than 1 MiB
    with tempfile.TemporaryDirectory(prefix="mux-read-", dir="/tmp") as folder:
        path = os.path.join(folder, "s")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(path)
            listener.listen(2)
            for tls, expected in ((False, arrived), (True, arrived[: 64 * 1024])):
                plain = httpcore.SyncBackend().connect_unix_socket(path, timeout=5)
                peer, _ = listener.accept()
                with peer:
                    peer.sendall(arrived)  # queued at the reader before it reads
                    stream = budget.BudgetedStream(plain, budget.Budgets(), tls=tls)
                    assert stream.read(64 * 1024, timeout=5) == expected
                    stream.close()


def _archive(path: Path, top: str, files: dict[str, bytes]) -> None:
    import io
    import tarfile

    with tarfile.open(path, "w:gz") as archive:
        for name, data in {"mux": b"#!/bin/sh\n", **files}.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mode = len(data), 0o755
            archive.addfile(info, io.BytesIO(data))


def test_unpack_hashes_what_it_writes_and_the_list_trusts_only_untouched_files(
    tmp_path: Path,
) -> None:
    """The digests taken while unpacking make the same ``.mux-files`` as reading the files
    back; a file changed since (same size, its mtime put back) or added is read again."""
    from updater.install.layout import files_list
    from updater.trust.unpack import unpack

    files = {"lib/a.bin": bytes(range(256)) * 1000, "b.txt": b"b" * 70_000, "empty": b""}
    _archive(tmp_path / "a.tar.gz", "top", files)
    root = tmp_path / "out"
    root.mkdir()
    unpacked = unpack(tmp_path / "a.tar.gz", root, top="top")
    assert sorted(unpacked) == ["b.txt", "empty", "lib/a.bin", "mux"]
    from_disk = files_list(root)
    assert files_list(root, unpacked) == from_disk
    assert hashlib.sha256(files["lib/a.bin"]).hexdigest() == unpacked["lib/a.bin"].sha256

    # A digest is used only while the file is what was written: a stand-in digest shows which.
    stand_in = {k: v._replace(sha256="0" * 64) for k, v in unpacked.items()}
    assert files_list(root, stand_in).count(b"0" * 64) == 4
    victim = root / "b.txt"
    before = victim.stat()
    victim.write_bytes(b"c" * 70_000)
    os.utime(victim, ns=(before.st_atime_ns, before.st_mtime_ns))  # same size, same mtime
    (root / "added").write_bytes(b"new")
    listing = files_list(root, stand_in)
    assert listing.count(b"0" * 64) == 3
    assert f"{hashlib.sha256(b'c' * 70_000).hexdigest()}  ./b.txt".encode() in listing
    assert files_list(root, unpacked) == files_list(root) != from_disk


def test_a_truncated_archive_is_refused_while_it_is_hashed(tmp_path: Path) -> None:
    from updater.errors import VerificationError
    from updater.trust.unpack import unpack

    _archive(tmp_path / "a.tar.gz", "top", {"big": os.urandom(300_000)})
    whole = (tmp_path / "a.tar.gz").read_bytes()
    (tmp_path / "cut.tar.gz").write_bytes(whole[: len(whole) // 2])
    root = tmp_path / "out"
    root.mkdir()
    with pytest.raises(VerificationError, match="cannot unpack"):
        unpack(tmp_path / "cut.tar.gz", root, top="top")
