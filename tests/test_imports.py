"""What mux imports, measured on real processes.

* The fast paths (``mux version``, ``mux version --json``, a cached
  ``mux update --check --max-age``) import nothing outside their allow-lists: a module added
  to one of them by a later feature fails here, with its name, before it slows down every
  sidebar refresh. They run as a released build runs them: a build folder with its build info
  baked in (the stand-in's copy of ``updater``), with ``-X importtime``.
* The modules the standalone build leaves out (``release.build.standalone.NEVER_IMPORTED``) are
  imported by no path of the installed mux: version, the check (uncached and cached), ``mux update``
  with all five layers and its progress bar on a terminal, ``--rollback``, the server
  commands and the daemon, help and usage errors. Every Python process of those runs records
  its ``sys.modules`` at exit. The real build running the same paths is the last guard
  (tests/test_release_build.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from release.build.standalone import DEV_ONLY_MODULES, NEVER_IMPORTED
from release.build.standin import build_standin
from release.rehearsal.fake_sigstore import FakeSigstore
from tests.support.imports import (
    CACHED_CHECK_ALLOWED,
    VERSION_ALLOWED,
    matching,
    outside,
    recorded_modules,
    recording_env,
    run_released,
)
from tests.support.releases import (
    KeyPair,
    make_keypair,
    make_release,
    serve_directory,
    sign_release_dir,
)
from tests.support.servers import start_mux_server
from tests.support.terminal import on_a_terminal
from updater.protocol import PROTOCOL_VERSION

REPO = "acme/mux"


# With a live server, the cached check reads its status line over a plain Unix socket, from
# _socket (socket's import alone cost as much as the exchange), imported only then: a machine
# without a server never pays for it.
SERVER_QUERY_ALLOWED = {
    "updater.protocol",
    "_socket",
    "shlex",  # the restart command, quoted, for a server that needs one
    "struct",  # the kernel's word on the process behind a Unix socket (SO_PEERCRED)
    "_struct",
}

# With a config.toml (and only then), the cached check reads it: tomllib and what it imports,
# and the one reader of it (the rules it shares with the machine policy).
WITH_CONFIG_ALLOWED = {
    "updater.config.userconfig",
    "updater.config.strict",
    "tomllib",
    "string",
    "_string",
    "datetime",
    "_datetime",
    # tomllib's own imports (typing, and what typing and datetime bring): the price of a
    # config file, paid only by a user who wrote one
    "typing",
    "_typing",
    "contextlib",
    "warnings",
    "math",
}

# Never on a fast path, whatever the allow-lists above become: the libraries of the other
# paths, and what the first builds' fast paths were found paying for (docs/build.md).
HEAVY = (
    "httpx",
    "httpcore",
    "typer",
    "click",
    "rich",
    "sigstore",
    "cryptography",
    "pydantic",
    "packaging",
    "subprocess",
    "platformdirs",
    "dataclasses",
    "inspect",
    "typing",
    "tempfile",
    "socket",
    "http",
    "email",
    "ssl",
    "threading",
    "pathlib",
    "urllib",
    "ipaddress",
)


@pytest.fixture(scope="module")
def keypair(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_keypair(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def released_entry(tmp_path_factory: pytest.TempPathFactory, keypair: KeyPair) -> Path:
    """The entry script of a build with its build info baked in, as a release has it."""
    folder = build_standin(
        tmp_path_factory.mktemp("build"),
        version="0.1.0",
        protocol_version=1,
        repo=REPO,
        minisign_keys=[keypair.public_key],
    )
    return folder / "lib" / "mux_entry.py"


@pytest.mark.parametrize("args", [["version"], ["version", "--json"], ["--version"], ["-V"]])
def test_mux_version_imports_only_its_allow_list(
    released_entry: Path, sandbox_env: dict[str, str], args: list[str]
) -> None:
    result, imported = run_released(released_entry, args, sandbox_env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "0.1.0" in result.stdout
    assert "updater.config.buildinfo" in imported  # the measurement sees mux's own imports
    assert outside(imported, VERSION_ALLOWED) == []
    # No dataclasses (inspect, ast, dis), pathlib or typing: half of the start-up of a build.
    assert not matching(imported, ["dataclasses", "inspect", "pathlib", "typing", *HEAVY])


def test_cached_check_imports_only_its_allow_list(
    released_entry: Path, sandbox_env: dict[str, str], keypair: KeyPair, tmp_path: Path
) -> None:
    feed = tmp_path / "feed"
    for version in ("0.1.0", "0.2.0"):
        make_release(feed, version, protocol_version=1, keypair=keypair, repo=REPO)
    env = {**sandbox_env, "MUX_UPDATE_SOURCE": str(feed)}
    filled = subprocess.run(
        [sys.executable, "-E", "-B", str(released_entry), "update", "--check", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert filled.returncode == 10, filled.stderr

    def cached_check(args: list[str], allowed: set[str]) -> str:
        result, imported = run_released(released_entry, ["update", "--check", *args], env)
        assert result.returncode == 10, result.stderr[-2000:]
        assert "from the check at" in result.stdout or '"cached": true' in result.stdout
        assert "updater.commands.cache" in imported
        assert outside(imported, allowed) == [], (args, outside(imported, allowed))
        assert not matching(imported, HEAVY), args
        return result.stdout

    for args in (["--max-age", "1h"], ["--max-age", "1h", "--json"]):
        cached_check(args, CACHED_CHECK_ALLOWED)
    # A live server: the cached check still asks every server for its status line.
    start_mux_server(Path(env["XDG_RUNTIME_DIR"]) / "mux", "main")
    for args in (["--max-age", "1h"], ["--max-age", "1h", "--json"]):
        output = cached_check(args, CACHED_CHECK_ALLOWED | SERVER_QUERY_ALLOWED)
        assert "1 live server" in output or "main.sock" in output, output


def test_a_config_file_adds_only_its_reader_to_the_cached_check(
    released_entry: Path, sandbox_env: dict[str, str], keypair: KeyPair, tmp_path: Path
) -> None:
    feed = tmp_path / "feed"
    make_release(feed, "0.2.0", protocol_version=1, keypair=keypair, repo=REPO)
    env = {**sandbox_env, "MUX_UPDATE_SOURCE": str(feed)}
    filled, _ = run_released(released_entry, ["update", "--check", "--json"], env)
    assert filled.returncode == 10, filled.stderr[-2000:]
    args = ["update", "--check", "--max-age", "1h", "--json"]
    result, without = run_released(released_entry, args, env)
    assert result.returncode == 10 and not matching(without, ["tomllib", "updater.config.strict"])
    config = Path(env["XDG_CONFIG_HOME"]) / "mux" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('auto_install = "compatible"\n')
    result, imported = run_released(released_entry, args, env)
    assert result.returncode == 10, result.stderr[-2000:]
    assert json.loads(result.stdout)["auto_install"]["mode"] == "compatible"
    assert "tomllib" in imported
    extra = outside(imported, CACHED_CHECK_ALLOWED | WITH_CONFIG_ALLOWED)
    assert extra == [], extra
    assert not matching(imported, [h for h in HEAVY if h != "typing"])


def test_the_cached_check_reads_an_installed_layout_without_pathlib(
    released_entry: Path, sandbox_env: dict[str, str], keypair: KeyPair, tmp_path: Path
) -> None:
    """Run from an install (as the sidebar runs it: no MUX_HOME), the cached check reports the
    versions the install keeps, read on path strings: still its allow-list, still no pathlib."""
    home = tmp_path / "mux-home"
    for version in ("0.0.9", "0.1.0"):
        shutil.copytree(released_entry.parent.parent, home / "versions" / version, symlinks=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mux").symlink_to(home / "versions" / "0.1.0" / "mux")
    record = {"schema": 1, "active": "0.1.0", "previous": "0.0.9", "bin_dir": str(bin_dir)}
    (home / "install.json").write_text(json.dumps({**record, "versions": {}}))
    entry = home / "versions" / "0.1.0" / "lib" / released_entry.name
    feed = tmp_path / "feed"
    make_release(feed, "0.2.0", protocol_version=1, keypair=keypair, repo=REPO)
    env = {**sandbox_env, "MUX_UPDATE_SOURCE": str(feed)}
    filled, _ = run_released(entry, ["update", "--check", "--json"], env)
    assert filled.returncode == 10, filled.stderr[-2000:]

    result, imported = run_released(entry, ["update", "--check", "--max-age", "1h", "--json"], env)
    assert result.returncode == 10, result.stderr[-2000:]
    doc = json.loads(result.stdout)
    assert doc["cached"] is True
    kept = {k["version"]: k for k in doc["kept_versions"]}
    assert set(kept) == {"0.0.9", "0.1.0"}, doc["kept_versions"]
    assert kept["0.1.0"]["size_bytes"] > 0  # the sizes were read from this install
    assert "updater.install.layout" in imported
    assert outside(imported, CACHED_CHECK_ALLOWED) == []
    assert not matching(imported, HEAVY)


def test_the_cached_check_keeps_path_settings_as_strings(
    released_entry: Path, sandbox_env: dict[str, str], keypair: KeyPair, tmp_path: Path
) -> None:
    """A sidebar on a machine that sets mux's path variables and reads a mirror on loopback:
    the settings keep those paths as strings, so still its allow-list, still no pathlib (with
    the urllib.parse and ipaddress it imports, a tenth of such a check in the build)."""
    feed = tmp_path / "feed"
    make_release(feed, "0.2.0", protocol_version=1, keypair=keypair, repo=REPO)
    home = ["--home", str(tmp_path / "mux-home")]
    with serve_directory(feed) as url:
        env = {
            **sandbox_env,
            "MUX_UPDATE_SOURCE": url,
            "MUX_INSTALL_DIR": str(tmp_path / "bin"),
            "XDG_BIN_HOME": str(tmp_path / "xdg-bin"),
            "MUX_SIGSTORE_TRUSTED_ROOT": str(tmp_path / "trusted_root.json"),
        }
        filled, _ = run_released(released_entry, ["update", "--check", "--json", *home], env)
        assert filled.returncode == 10, filled.stderr[-2000:]
    args = ["update", "--check", "--max-age", "1h", "--json", *home]
    result, imported = run_released(released_entry, args, env)
    assert result.returncode == 10, result.stderr[-2000:]
    assert json.loads(result.stdout)["cached"] is True
    assert outside(imported, CACHED_CHECK_ALLOWED) == []
    assert not matching(imported, HEAVY)


def test_the_uncached_check_is_seen_importing_the_http_stack(
    released_entry: Path, sandbox_env: dict[str, str], keypair: KeyPair, tmp_path: Path
) -> None:
    """The measurement can fail: the uncached check is outside the cached check's list."""
    feed = tmp_path / "feed"
    make_release(feed, "0.2.0", protocol_version=1, keypair=keypair, repo=REPO)
    env = {**sandbox_env, "MUX_UPDATE_SOURCE": str(feed)}
    result, imported = run_released(released_entry, ["update", "--check"], env)
    assert result.returncode == 10, result.stderr[-2000:]
    assert "httpx" in outside(imported, CACHED_CHECK_ALLOWED)


# --- the modules the standalone build leaves out --------------------------------------------


def attested_feed(tmp: Path, keypair: KeyPair, sigstore: FakeSigstore) -> Path:
    feed = tmp / "feed"
    # 0.1.0 speaks this checkout's protocol, the protocol of the servers it starts; 0.2.0 the next.
    for version, protocol in (("0.1.0", PROTOCOL_VERSION), ("0.2.0", PROTOCOL_VERSION + 1)):
        release = make_release(feed, version, protocol_version=protocol, keypair=keypair, repo=REPO)
        sigstore.attest_release(release, version, repository=REPO)
        sign_release_dir(release, keypair)
    return feed


@pytest.fixture
def every_path(
    tmp_path: Path, sandbox_env: dict[str, str], keypair: KeyPair
) -> Iterator[dict[str, set[str]]]:
    """Run every path of the installed mux (development entry point); what each imported."""
    sigstore = FakeSigstore.create(tmp_path / "sigstore")
    feed = attested_feed(tmp_path, keypair, sigstore)
    home = tmp_path / "mux-home"
    record = tmp_path / "imports"
    with serve_directory(feed) as url:
        env = recording_env(
            {
                **sandbox_env,
                "MUX_UPDATE_SOURCE": url,
                "MUX_INSTALL_DIR": str(tmp_path / "bin"),
                "MUX_REPO": REPO,  # the development build has no repository baked in
                "MUX_SIGSTORE_TRUSTED_ROOT": str(sigstore.trusted_root_path),
            },
            record,
        )
        mux = [sys.executable, "-c", "from updater.__main__ import main; main()"]
        # What the interpreter imports before mux runs (site, .pth files): not mux's doing.
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
        trust = ["--home", str(home), "--trust-key", keypair.public_key]
        expected: list[tuple[list[str], int]] = [
            (["version"], 0),
            (["version", "--json"], 0),
            (["--version"], 0),
            (["update", "--check", "--json", "--trust-key", keypair.public_key], 10),
            (["update", "--check", "--max-age", "1h", "--trust-key", keypair.public_key], 10),
            (["update", "--version", "0.1.0", *trust], 0),
            (["server", "start"], 0),
            (["server", "status", "--json"], 0),
            (["update", "--rollback", "--home", str(home)], 1),  # nothing to roll back to
            (["--help"], 0),
            (["update", "--help"], 0),
            (["server", "--help"], 0),
            (["frobnicate"], 2),
        ]
        for args, code in expected:
            result = subprocess.run(
                [*mux, *args], env=env, capture_output=True, text=True, timeout=120, check=False
            )
            assert result.returncode == code, (args, result.stdout, result.stderr)
        # The update with every layer, its progress bar drawn on a terminal.
        terminal = {k: v for k, v in env.items() if k != "NO_COLOR"} | {"TERM": "xterm"}
        updated = on_a_terminal([*mux, "update", "--exit-code", "-v", *trust], terminal)
        assert updated.returncode == 20, (
            updated.stdout,
            updated.stderr,
        )  # asked for with --exit-code
        assert b"attestation: ok" in updated.stdout, updated.stdout
        for args, code in (
            (["update", "--rollback", "--home", str(home)], 0),  # the server speaks 0.1.0's
            (["server", "restart"], 0),
            (["server", "stop"], 0),
        ):
            result = subprocess.run(
                [*mux, *args], env=env, capture_output=True, text=True, timeout=120, check=False
            )
            assert result.returncode == code, (args, result.stdout, result.stderr)
    yield recorded_modules(record)


def test_no_path_imports_a_module_the_build_leaves_out(every_path: dict[str, set[str]]) -> None:
    everything = set().union(*every_path.values())
    # The recording saw the paths it is meant to see.
    assert any("server" in argv and "--socket" in argv for argv in every_path), every_path.keys()
    for seen in ("sigstore", "rich.progress", "typer", "httpx", "updater.daemon.server"):
        assert seen in everything, seen
    (startup,) = (mods for argv, mods in every_path.items() if argv.endswith(": -c"))
    left_out = [*NEVER_IMPORTED, *DEV_ONLY_MODULES]
    offenders = {
        argv: sorted(matching(mods - startup, left_out)) for argv, mods in every_path.items()
    }
    assert {argv: found for argv, found in offenders.items() if found} == {}


def test_the_attestation_child_starts_before_what_talking_to_it_needs() -> None:
    """`mux update` starts the child from updater.trust.attestation_start before it imports
    anything else of its own (updater/__main__.py): each module that one imports puts off
    the child, whose import of sigstore is the longest step of a delta update."""
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; import updater.trust.attestation_start; print(' '.join(sys.modules))",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    imported = set(result.stdout.split())
    assert "updater.trust.attestation_start" in imported
    late = ["base64", "dataclasses", "pathlib", "typing", "updater.childio"]
    late += ["httpx", "typer", "rich", "cryptography", "sigstore"]
    assert not matching(imported, late)
    assert not {m for m in imported if m.startswith("updater.trust.")} - {
        "updater.trust",
        "updater.trust.attestation_start",
    }


def test_a_cached_check_imports_neither_typer_nor_httpx(tmp_path: Path, sandbox_env) -> None:
    from tests.support.feeds import trusting, write_feed, write_release

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
