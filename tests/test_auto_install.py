"""Automatic installs (``auto_install`` in the user's config.toml): real servers, real feeds.

An installed mux (stand-in release builds), a server of it checking a loopback feed every
second (``MUX_UPDATE_CHECK_INTERVAL=1``), a watcher process, and releases published into the
feed while all of that runs. The install is the server's own ``server auto-install`` child,
through ``mux update``'s pipeline; the tests watch the link, the server, the watch stream
and the server's log, and kill the install child with SIGKILL in the middle of a download.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import re
import signal
import socket as socket_module
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from release.rehearsal.serve import serving, url_of
from tests.support import stress
from tests.support.installs import Install, bootstrap, keep_pristine
from tests.support.releases import KeyPair, make_keypair, make_release
from tests.support.servers import wait_until
from tests.support.squatters import STATUS_SERVER
from tests.support.users import other_user_prefix
from tests.support.watching import Lines, event, processes_of, spawn, watch_start
from updater.servers.status import query_server

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="a release build's machine policy must be owned by root"
)


class Feed:
    """A feed folder on 127.0.0.1 whose archives can be served slowly (``slow``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.slow = threading.Event()
        self._stack = contextlib.ExitStack()
        self.url = ""

    def __enter__(self) -> Feed:
        slow = self.slow

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def copyfile(self, source: Any, outputfile: Any) -> None:
                if not (slow.is_set() and self.path.endswith(".tar.gz")):
                    return super().copyfile(source, outputfile)
                while block := source.read(2048):  # a slow link, not test synchronisation
                    outputfile.write(block)
                    outputfile.flush()
                    time.sleep(0.05)

        handler = functools.partial(Handler, directory=str(self.path))
        self.url = url_of(self._stack.enter_context(serving(handler)))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()


@pytest.fixture
def keypair(tmp_path: Path) -> KeyPair:
    return make_keypair(tmp_path / "keys")


def publish(feed: Path, version: str, protocol: int, keypair: KeyPair, **build: Any) -> None:
    make_release(feed, version, protocol_version=protocol, keypair=keypair, build=build or None)


def write_config(env: dict[str, str], text: str) -> Path:
    path = Path(env["XDG_CONFIG_HOME"]) / "mux" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def serve_and_watch(mux: Install) -> tuple[Path, int, subprocess.Popen[str], Lines]:
    socket = Path(mux.env["XDG_RUNTIME_DIR"]) / "mux" / "s.sock"
    started = mux.run("server", "start", "--socket", str(socket))
    assert started.returncode == 0, started.stderr
    status = query_server(str(socket)).status
    assert status is not None
    watcher, lines = spawn(mux, "server", "watch", "--socket", str(socket))
    assert watch_start(lines)[0]["version"] == status.version
    return socket, status.pid, watcher, lines


def log_of(socket: Path) -> str:
    return socket.with_suffix(".log").read_text(errors="replace")


def wait_for_log(socket: Path, text: str, timeout: float = 30.0) -> None:
    """Wait until the server's log says ``text``; on a timeout, show the log."""
    try:
        wait_until(lambda: text in log_of(socket), timeout, f"{text!r} in the server's log")
    except AssertionError as failed:
        raise AssertionError(f"{failed}\n{log_of(socket)[-4000:]}") from None


def next_event(lines: Lines, timeout: float = 60.0) -> tuple[str, dict[str, Any]]:
    return event(lines.next(timeout))


@pytest.fixture
def feed(tmp_path: Path) -> Iterator[Feed]:
    with Feed(tmp_path / "feed") as served:
        yield served


def installed(tmp_path: Path, env: dict[str, str], feed: Feed, keypair: KeyPair, **build: Any):
    publish(feed.path, "1.0.0", 2, keypair, **build)
    env = {**env, "MUX_UPDATE_CHECK_INTERVAL": "1"}
    return bootstrap(tmp_path, env, source=feed.url, version="1.0.0", public_key=keypair.public_key)


def test_compatible_installs_a_compatible_release_on_its_own_and_never_an_incompatible_one(
    tmp_path: Path, sandbox_env: dict[str, str], feed: Feed, keypair: KeyPair
) -> None:
    write_config(sandbox_env, 'auto_install = "compatible"\n')
    mux = installed(tmp_path, sandbox_env, feed, keypair)
    socket, pid, watcher, lines = serve_and_watch(mux)
    first = query_server(str(socket)).status
    publish(feed.path, "1.1.0", 2, keypair)  # the same protocol as the server

    kind, data = next_event(lines)  # no update-available first: it is being installed
    assert kind == "update-installed", (kind, data)
    assert (data["version"], data["compatible"], data["server_version"]) == ("1.1.0", True, "1.0.0")
    assert mux.active() == "1.1.0"
    log = log_of(socket)
    # At the first check that saw it (within one check interval of its publication).
    seen = log.index("latest v1.1.0")
    assert "installing mux 1.1.0 on its own" in log[seen : log.index("\n", seen) + 200], log
    wait_for_log(socket, "installed mux 1.1.0 on its own (from 1.0.0)", 30)
    # The server was never touched: same process, same build, same start.
    assert query_server(str(socket)).status == first and first is not None and first.pid == pid

    publish(feed.path, "1.2.0", 3, keypair)  # another protocol: never on its own
    kind, data = next_event(lines)
    assert (kind, data["version"]) == ("update-available", "1.2.0"), (kind, data)
    assert data["install_command"] == "mux update"
    wait_for_log(socket, "not installing mux 1.2.0 on its own", 30)
    assert f"the server on {socket} speaks 2: it would need a restart" in log_of(socket)
    assert mux.active() == "1.1.0"
    assert query_server(str(socket)).status == first
    watcher.terminate()
    watcher.wait(10)


def test_all_installs_a_new_protocol_and_announces_the_restart_without_restarting(
    tmp_path: Path, sandbox_env: dict[str, str], feed: Feed, keypair: KeyPair
) -> None:
    write_config(sandbox_env, 'auto_install = "all"\n')
    mux = installed(tmp_path, sandbox_env, feed, keypair)
    socket, pid, watcher, lines = serve_and_watch(mux)
    publish(feed.path, "2.0.0", 3, keypair)
    kinds = dict([next_event(lines), next_event(lines)])
    assert set(kinds) == {"update-installed", "restart-needed"}, kinds
    assert kinds["update-installed"]["compatible"] is False
    restart = kinds["restart-needed"]
    assert (restart["protocol_version"], restart["server_protocol_version"]) == (3, 2)
    assert restart["restart_command"] == f"mux server restart --socket {socket}"
    assert mux.active() == "2.0.0"
    status = query_server(str(socket)).status
    assert status is not None and (status.pid, status.version) == (pid, "1.0.0")
    watcher.terminate()
    watcher.wait(10)


def test_off_by_default_and_skip_and_hold_are_honoured(
    tmp_path: Path, sandbox_env: dict[str, str], feed: Feed, keypair: KeyPair
) -> None:
    mux = installed(tmp_path, sandbox_env, feed, keypair)  # no config file: off
    socket, _pid, watcher, lines = serve_and_watch(mux)
    publish(feed.path, "1.1.0", 2, keypair)
    kind, data = next_event(lines)
    assert (kind, data["version"]) == ("update-available", "1.1.0")
    assert mux.active() == "1.0.0"
    # Skipping it withdraws the announcement in force: a watcher that connects gets none.
    skipped = mux.run("update", "--skip", "1.1.0")
    assert skipped.returncode == 0 and "mux 1.1.0 will not be offered" in skipped.stdout
    kind, data = next_event(lines)  # and the watcher that was told of it is told so
    assert (kind, data["version"]) == ("update-retracted", "1.1.0"), (kind, data)
    assert data["reason"] == "no longer offered to this machine"
    write_config(mux.env, 'auto_install = "compatible"\n')  # and it is not installed either
    wait_for_log(socket, "not installing mux 1.1.0 on its own: mux 1.1.0 is skipped")
    late, late_lines = spawn(mux, "server", "watch", "--socket", str(socket))
    watch_start(late_lines)
    assert mux.run("server", "stop", "--socket", str(socket)).returncode == 0
    assert [event(line)[0] for line in late_lines.rest()] == ["server-stopping"]
    assert mux.active() == "1.0.0"
    # A hold: no offers, no automatic installs, even of a newer release.
    assert mux.run("update", "--hold", "7d").returncode == 0
    publish(feed.path, "1.2.0", 2, keypair)
    socket, _pid, watcher2, lines2 = serve_and_watch(mux)
    wait_for_log(socket, "not installing mux 1.2.0 on its own: updates are held until")
    check = json.loads(mux.run("update", "--check", "--json").stdout)
    assert (check["update_available"], check["withheld"]["reason"]) == (False, "held")
    assert mux.active() == "1.0.0"
    assert mux.run("update", "--unhold").returncode == 0
    kind, data = next_event(lines2)
    assert kind == "update-installed" and data["version"] == "1.2.0"
    for process in (watcher, watcher2, late):
        process.terminate()
        process.wait(10)


def test_kill_9_during_an_automatic_install_leaves_a_runnable_mux_and_the_next_check_finishes(
    tmp_path: Path, sandbox_env: dict[str, str], feed: Feed, keypair: KeyPair
) -> None:
    write_config(sandbox_env, 'auto_install = "compatible"\n')
    mux = installed(tmp_path, sandbox_env, feed, keypair)
    socket, pid, watcher, _lines = serve_and_watch(mux)
    feed.slow.set()
    publish(feed.path, "1.1.0", 2, keypair)

    def downloading() -> list[Path]:
        return list(mux.home.glob(".download-*"))

    wait_until(lambda: downloading(), 60, "the automatic install's download")
    [child] = [
        p for p, argv in processes_of(mux.home / "versions" / "1.0.0") if "auto-install" in argv
    ]
    os.kill(child, signal.SIGKILL)
    wait_for_log(socket, "automatic install of mux 1.1.0 not done", 30)
    # What the killed child started (its attestation worker) does not outlive it.
    wait_until(
        lambda: not [a for _, a in processes_of(mux.home / "versions") if "__verify" in a],
        20,
        "no process of the killed install",
    )
    # A runnable mux: the link never moved, and it runs.
    assert mux.active() == "1.0.0"
    assert mux.reported_version()["version"] == "1.0.0"
    feed.slow.clear()
    wait_until(lambda: mux.active() == "1.1.0", 60, "the next check to install it")
    assert mux.reported_version()["version"] == "1.1.0"
    wait_for_log(socket, "installed mux 1.1.0 on its own", 30)
    assert downloading() == [] and list((mux.home / "versions").glob("*.partial-*")) == []
    status = query_server(str(socket)).status
    assert status is not None and status.pid == pid
    watcher.terminate()
    watcher.wait(10)


KILLS = 3  # kills of the child that must land mid-run (bench/bench_stress.py: 10 runs)
MAX_KILL_RUNS = 6  # a run can finish before its kill on a loaded machine: more runs


def test_kill_9_at_any_moment_of_the_automatic_install_child_leaves_a_runnable_mux(
    tmp_path: Path, sandbox_env: dict[str, str], feed: Feed, keypair: KeyPair
) -> None:
    """The child a server runs (`<its build> server auto-install`), killed with its process
    group at moments spread over its run (a half, a quarter, three quarters, ...:
    tests/support/stress.py, ``Moments``) until three landed mid-run (at most six runs):
    each time mux runs at 1.0.0 or 1.1.0, and the next run finishes the install and leaves
    nothing behind."""
    write_config(sandbox_env, 'auto_install = "compatible"\n')
    mux = installed(tmp_path, sandbox_env, feed, keypair)
    publish(feed.path, "1.1.0", 2, keypair)
    reset = keep_pristine(mux, tmp_path / "pristine")
    started = time.monotonic()
    assert stress.run_auto_install_child(mux)["to"] == "1.1.0"
    moments = stress.Moments(time.monotonic() - started)
    killed = stress.kills_landed(
        moments,
        lambda delay, where: stress.auto_install_round(mux, delay, where),
        wanted=KILLS,
        runs=MAX_KILL_RUNS,
        reset=reset,
    )
    assert killed >= KILLS, f"only {killed} of {MAX_KILL_RUNS} runs were killed mid-way"


@needs_root
@pytest.mark.parametrize("updates", ["check-only", "disabled"])
def test_under_a_check_only_or_disabled_policy_nothing_is_installed(
    updates: str, tmp_path: Path, sandbox_env: dict[str, str], feed: Feed, keypair: KeyPair
) -> None:
    policy = tmp_path / "root" / "etc" / "mux" / "policy.toml"
    policy.parent.mkdir(parents=True)
    for folder in (tmp_path / "root", policy.parent.parent, policy.parent):
        folder.chmod(0o755)
    policy.write_text(f'updates = "{updates}"\n')
    policy.chmod(0o644)
    write_config(sandbox_env, 'auto_install = "all"\n')
    mux = installed(tmp_path, sandbox_env, feed, keypair, policy_file=str(policy))
    socket, _pid, watcher, lines = serve_and_watch(mux)
    publish(feed.path, "1.1.0", 2, keypair, policy_file=str(policy))
    if updates == "check-only":
        kind, data = next_event(lines)
        assert (kind, data["version"], data["install_command"]) == (
            "update-available",
            "1.1.0",
            None,
        )
        reason = (
            f'not installing mux 1.1.0 on its own: the machine policy sets updates = "{updates}"'
        )
        wait_for_log(socket, reason, 30)
    else:
        wait_for_log(socket, "background update checks are off", 30)
        assert "latest v" not in log_of(socket)  # no check ran, so none can install
    assert mux.active() == "1.0.0"
    watcher.terminate()
    watcher.wait(10)


def test_a_metered_connection_defers_the_download_unless_allowed(
    tmp_path: Path, sandbox_env: dict[str, str], feed: Feed, keypair: KeyPair
) -> None:
    """NetworkManager says "metered" (a busctl on PATH that answers as it would)."""
    tools = tmp_path / "tools"
    tools.mkdir()
    busctl = tools / "busctl"
    busctl.write_text("#!/bin/sh\nprintf 'u 1\\n'\n")  # NM_METERED_YES
    busctl.chmod(0o755)
    env = {**sandbox_env, "PATH": f"{tools}:{sandbox_env['PATH']}"}
    write_config(env, 'auto_install = "compatible"\n')
    mux = installed(tmp_path, env, feed, keypair)
    socket, _pid, watcher, lines = serve_and_watch(mux)
    publish(feed.path, "1.1.0", 2, keypair)
    kind, data = next_event(lines)
    assert (kind, data["version"]) == ("update-available", "1.1.0")
    wait_for_log(socket, "not installing mux 1.1.0 on its own: the connection is metered")
    assert mux.active() == "1.0.0"
    write_config(env, 'auto_install = "compatible"\ndownload_on_metered = true\n')
    wait_until(
        lambda: mux.active() == "1.1.0", 60, "the install once metered downloads are allowed"
    )
    watcher.terminate()
    watcher.wait(10)


def test_a_broken_config_file_is_one_error_for_the_background_check_too(
    tmp_path: Path, sandbox_env: dict[str, str], feed: Feed, keypair: KeyPair
) -> None:
    """Broken when the server starts: the server still starts and watches its link, every
    check says what is wrong, and once the file is fixed the checks follow it."""
    mux = installed(tmp_path, sandbox_env, feed, keypair)
    path = write_config(mux.env, 'auto_install = "sometimes"\n')
    socket, _pid, watcher, lines = serve_and_watch(mux)
    wait_for_log(socket, "background check failed: the config file", 30)
    assert re.search(
        rf'{re.escape(str(path))} cannot be used: auto_install = "sometimes" is not',
        log_of(socket),
    )
    result = mux.run("update", "--check")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f'mux: error: the config file {path} cannot be used: auto_install = "sometimes" is not "off" or '
        '"download" or "compatible" or "all" (fix it or remove it (README: Keeping mux up to date))'
    ]
    write_config(mux.env, 'auto_install = "compatible"\n')
    publish(feed.path, "1.1.0", 2, keypair)
    kind, data = next_event(lines)
    assert (kind, data["version"]) == ("update-installed", "1.1.0"), (kind, data)
    assert mux.active() == "1.1.0"
    watcher.terminate()
    watcher.wait(10)


def test_another_user_on_the_port_mux_server_url_names_decides_no_automatic_install(
    tmp_path: Path, sandbox_env: dict[str, str], feed: Feed, keypair: KeyPair
) -> None:
    """``MUX_SERVER_URL`` names a port no server of the user's listens on, and another user
    takes it, answering as a server of the new protocol. The user's own server (on its
    socket) speaks the old one: "compatible" must not install the new protocol on its own.
    The squatter is not counted (another uid's listener is sent nothing), and the servers
    asked are every server of the user's, not only the one the variable names."""
    prefix = other_user_prefix()
    with socket_module.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    squatter = subprocess.Popen(
        [*prefix, sys.executable, "-c", STATUS_SERVER, str(port), "3", "", "exit"],
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    try:
        assert squatter.stdout is not None and squatter.stdout.readline() == "listening\n"
        env = {**sandbox_env, "MUX_SERVER_URL": f"http://127.0.0.1:{port}"}
        write_config(env, 'auto_install = "compatible"\n')
        mux = installed(tmp_path, env, feed, keypair)
        socket, _pid, watcher, lines = serve_and_watch(mux)
        publish(feed.path, "1.1.0", 3, keypair)  # the squatter's claimed protocol
        kind, data = next_event(lines)
        assert (kind, data["version"]) == ("update-available", "1.1.0"), (kind, data)
        wait_for_log(socket, "not installing mux 1.1.0 on its own", 30)
        log = log_of(socket)
        assert f"the server on {socket} speaks 2" in log, log
        assert f"127.0.0.1:{port} speaks" not in log, log
        assert mux.active() == "1.0.0"
        watcher.terminate()
        watcher.wait(10)
    finally:
        squatter.kill()
        squatter.wait()


def test_download_stages_a_new_release_within_one_check_and_watchers_hear_update_staged(
    tmp_path: Path, sandbox_env: dict[str, str], feed: Feed, keypair: KeyPair
) -> None:
    write_config(sandbox_env, 'auto_install = "download"\n')
    mux = installed(tmp_path, sandbox_env, feed, keypair)
    socket, pid, watcher, lines = serve_and_watch(mux)
    publish(feed.path, "1.1.0", 3, keypair)  # another protocol: staging restarts nothing

    kind, data = next_event(lines)  # announced: the user installs it
    assert (kind, data["version"]) == ("update-available", "1.1.0"), (kind, data)
    kind, staged = next_event(lines)
    assert kind == "update-staged", (kind, staged)
    assert (staged["version"], staged["install_command"]) == ("1.1.0", "mux update")
    assert staged["size_bytes"] > 0 and staged["staged_at"].endswith("Z")
    assert mux.active() == "1.0.0"  # nothing installed
    log = log_of(socket)
    seen = log.index("latest v1.1.0")  # at the first check that saw it
    assert "staging mux 1.1.0 on its own" in log[seen : log.index("\n", seen) + 200], log
    wait_for_log(socket, "not staging mux 1.1.0 on its own: mux 1.1.0 is staged")  # once
    check = mux.run("update", "--check", "--json")
    assert check.returncode == 10, check.stderr
    doc = json.loads(check.stdout)
    assert doc["staged"]["version"] == "1.1.0"
    assert doc["staged"]["size_bytes"] == staged["size_bytes"]
    assert "ready to install: mux update applies it" in mux.run("update", "--check").stdout
    status = query_server(str(socket)).status
    assert status is not None and status.pid == pid
    watcher.terminate()
    watcher.wait(10)


def test_under_ci_no_background_check_stages_or_installs_anything(
    tmp_path: Path, sandbox_env: dict[str, str], feed: Feed, keypair: KeyPair
) -> None:
    write_config(sandbox_env, 'auto_install = "all"\n')
    mux = installed(tmp_path, {**sandbox_env, "CI": "true"}, feed, keypair)
    publish(feed.path, "1.1.0", 2, keypair)  # on offer before the server's first check
    socket, _pid, watcher, _lines = serve_and_watch(mux)
    wait_for_log(socket, "background check skipped: the CI environment variable is set")
    assert "latest v1.1.0" not in log_of(socket)
    # The install child, run by hand under CI, refuses too.
    child = [
        str(mux.home / "versions" / "1.0.0" / "mux"),
        *("server", "auto-install", "--version", "1.1.0", "--protocol", "2"),
    ]
    done = subprocess.run(child, env=mux.env, capture_output=True, text=True, check=False)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert (answer["action"], answer["reason"]) == (
        "skipped",
        "the CI environment variable is set: nothing runs in the background",
    )
    assert mux.active() == "1.0.0" and not (mux.home / "versions" / "1.1.0").exists()
    # The check says why (a foreground command: it still checks).
    check = json.loads(mux.run("update", "--check", "--json").stdout)
    assert check["auto_install"]["ci_set_by"] == "CI"
    assert check["auto_install"]["refused"] == "CI is set: nothing runs in the background"
    assert 'auto_install = "all" waits: CI is set' in mux.run("update", "--check").stdout
    watcher.terminate()
    watcher.wait(10)
