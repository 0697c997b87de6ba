"""Servers outlive any number of updates: no version a live server runs from is ever removed.

Everything here is real: installs in temporary HOMEs made by ``mux update`` from a loopback
feed, servers started by the installed mux (``mux server start``), updates, rollbacks and
prunes run by the installed mux in other processes. The builds are stand-ins that load their
code lazily from their version folder and run their own copy of the interpreter from it
(``tests.support.standins``), so the operating system places a server in its version folder
as it places a real one-folder build (``tests/test_retention_real.py`` uses the real build).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import stress
from tests.support.installs import Install, bootstrap
from tests.support.releases import (
    Feed,
    make_feed,
    serve_directory,
    serve_directory_recording,
)
from tests.support.servers import start_fake_server, start_mux_server, wait_until
from tests.support.standins import INTERPRETER, own_interpreter
from updater.install.layout import Layout, read_record, verify_files

VERSIONS = ["1.0.0", "1.1.0", "1.2.0", "1.3.0"]
PROTOCOLS = {
    "same-protocol": dict.fromkeys(VERSIONS, 2),
    "bumped-protocol": {"1.0.0": 2, "1.1.0": 3, "1.2.0": 4, "1.3.0": 5},
}


@pytest.fixture(scope="module")
def feeds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Feed]:
    return {
        mode: make_feed(
            tmp_path_factory.mktemp(mode),
            versions=VERSIONS,
            protocols=protocols,
            post_build=own_interpreter,
        )
        for mode, protocols in PROTOCOLS.items()
    }


@pytest.fixture
def served(feeds: dict[str, Feed]) -> Iterator[dict[str, str]]:
    with (
        serve_directory(feeds["same-protocol"].path) as same,
        serve_directory(feeds["bumped-protocol"].path) as bumped,
    ):
        yield {"same-protocol": same, "bumped-protocol": bumped}


def install(tmp_path: Path, env: dict[str, str], feeds, served, mode: str) -> Install:
    return bootstrap(
        tmp_path,
        env,
        source=served[mode],
        version="1.0.0",
        public_key=feeds[mode].keypair.public_key,
    )


# -- helpers ---------------------------------------------------------------------------------


def runtime(install: Install) -> Path:
    return Path(install.env["XDG_RUNTIME_DIR"]) / "mux"


def versions(install: Install) -> list[str]:
    return sorted(
        p.name for p in (install.home / "versions").iterdir() if not p.name.startswith(".")
    )


def run_json(install: Install, *args: str, code: int = 0) -> dict:
    result = install.run(*args, "--json")
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return json.loads(result.stdout)


def servers(install: Install) -> dict[str, dict]:
    return {s["address"]: s for s in run_json(install, "server", "status")["servers"]}


def start(install: Install, name: str = "default") -> tuple[int, str]:
    result = install.run("server", "start", "--name", name)
    assert result.returncode == 0, result.stderr
    address = str(runtime(install) / f"{name}.sock")
    return servers(install)[address]["pid"], address


def stop(install: Install, address: str) -> None:
    result = install.run("server", "stop", "--socket", address)
    assert result.returncode == 0 and "stopped" in result.stdout, result.stderr


def kept(doc: dict) -> dict[str, dict]:
    return {k["version"]: k for k in doc["kept_versions"]}


def executable_of(install: Install, version: str) -> str:
    return str((install.home / "versions" / version / "mux").resolve())


# -- one server, many updates ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(PROTOCOLS))
def test_a_server_outlives_any_number_of_updates(tmp_path, sandbox_env, feeds, served, mode):
    mux = install(tmp_path, sandbox_env, feeds, served, mode)
    pid, address = start(mux)
    assert servers(mux)[address]["executable"] == executable_of(mux, "1.0.0")

    for new in ("1.1.0", "1.2.0", "1.3.0"):
        bumped = mode == "bumped-protocol"
        # --exit-code: a pending restart is 20 (without it, a done update exits 0)
        doc = run_json(mux, "update", "--version", new, "--exit-code", code=20 if bumped else 0)
        assert doc["to_version"] == new
        assert (mux.home / "versions" / "1.0.0" / "mux").is_file()
        [server] = doc["servers"]
        assert (server["pid"], server["version"], server["state"]) == (pid, "1.0.0", "live")
        assert server["restart_command"] == f"mux server restart --socket {address}"
        # Same protocol: compatible, restart when convenient; another: a pending restart.
        assert (server["compatible"], server["restart_needed"]) == (not bumped, bumped)
        live = servers(mux)[address]
        assert (live["pid"], live["build_installed"]) == (pid, True)
        assert live["executable"] == executable_of(mux, "1.0.0")
        if new != "1.1.0":  # after 1.1.0, 1.0.0 is simply the previous version
            reason = kept(doc)["1.0.0"]
            assert reason["kind"] == "server"
            assert reason["reason"] == f"server {address} (pid {pid}) runs from it"
            assert reason["size_bytes"] > 0

    assert versions(mux) == ["1.0.0", "1.2.0", "1.3.0"]  # 1.1.0 went: nothing needs it
    check = run_json(mux, "update", "--check", code=20 if mode == "bumped-protocol" else 0)
    assert kept(check)["1.0.0"]["kind"] == "server"
    assert kept(check)["1.0.0"]["size_bytes"] > 0
    text = mux.run("update", "--prune")
    assert text.returncode == 0, text.stderr
    assert (
        "kept 1.0.0 (" in text.stdout
        and f"server {address} (pid {pid}) runs from it" in text.stdout
    )
    assert "nothing to remove" in text.stdout
    assert versions(mux) == ["1.0.0", "1.2.0", "1.3.0"]  # and only then

    # The printed command, run through the link by the new mux: a graceful stop of the old
    # server, and the new version in its place.
    restarted = mux.run(*shlex.split(server["restart_command"])[1:])
    assert restarted.returncode == 0, restarted.stderr
    new_server = servers(mux)[address]
    assert new_server["pid"] != pid
    assert (new_server["version"], new_server["executable"]) == (
        "1.3.0",
        executable_of(mux, "1.3.0"),
    )

    pruned = run_json(mux, "update", "--prune")
    assert pruned["removed_versions"] == ["1.0.0"]
    assert versions(mux) == ["1.2.0", "1.3.0"]
    assert set(kept(pruned)) == {"1.2.0", "1.3.0"}


@pytest.mark.slow
def test_two_servers_on_two_old_versions(tmp_path, sandbox_env, feeds, served):
    mux = install(tmp_path, sandbox_env, feeds, served, "same-protocol")
    pid_a, a = start(mux, "a")
    run_json(mux, "update", "--version", "1.1.0")
    pid_b, b = start(mux, "b")
    assert servers(mux)[b]["executable"] == executable_of(mux, "1.1.0")
    run_json(mux, "update", "--version", "1.2.0")
    doc = run_json(mux, "update", "--version", "1.3.0")
    assert versions(mux) == VERSIONS
    assert {v: k["kind"] for v, k in kept(doc).items()} == {
        "1.3.0": "active",
        "1.2.0": "previous",
        "1.0.0": "server",
        "1.1.0": "server",
    }
    assert f"(pid {pid_a})" in kept(doc)["1.0.0"]["reason"]
    assert f"(pid {pid_b})" in kept(doc)["1.1.0"]["reason"]
    assert {s["pid"] for s in servers(mux).values()} == {pid_a, pid_b}

    stop(mux, a)
    assert run_json(mux, "update", "--prune")["removed_versions"] == ["1.0.0"]
    assert versions(mux) == ["1.1.0", "1.2.0", "1.3.0"]
    # An update with nothing to install settles too: b's version goes once b is gone.
    stop(mux, b)
    again = run_json(mux, "update")
    assert (again["action"], again["removed_versions"]) == ("up-to-date", ["1.1.0"])
    assert versions(mux) == ["1.2.0", "1.3.0"]


@pytest.mark.slow
def test_a_hung_servers_version_is_kept_and_a_socket_nothing_is_known_of_holds_nothing(
    tmp_path, sandbox_env, feeds, served
):
    mux = install(tmp_path, sandbox_env, feeds, served, "same-protocol")
    pid, address = start(mux, "stuck")
    # Nothing can be learnt of these: a hung listener in this test process (whose program is
    # not in MUX_HOME) and the socket file of a server that died.
    start_fake_server("hung", runtime(mux) / "silent.sock")
    dead = runtime(mux) / "dead.sock"
    import socket as socket_module

    with socket_module.socket(socket_module.AF_UNIX) as sock:
        sock.bind(str(dead))
    os.kill(pid, signal.SIGSTOP)
    try:
        run_json(mux, "update", "--version", "1.1.0")
        doc = run_json(mux, "update", "--version", "1.2.0")
        assert versions(mux) == ["1.0.0", "1.1.0", "1.2.0"]
        reason = kept(doc)["1.0.0"]
        assert reason["kind"] == "server"
        assert reason["reason"] == f"server {address} (pid {pid}, not answering) runs from it"
        seen = servers(mux)
        stuck = seen[address]
        assert (stuck["state"], stuck["pid"], stuck["executable_source"]) == ("hung", pid, "os")
        # The OS names the program the process runs: the build's own interpreter.
        assert stuck["executable"] == str((mux.home / "versions" / "1.0.0" / INTERPRETER).resolve())
        assert seen[str(runtime(mux) / "silent.sock")]["state"] == "hung"
        assert seen[str(dead)]["state"] == "stale"
        status_text = mux.run("server", "status").stdout
        assert f"{address}: hung (" in status_text and "(the OS says)" in status_text
    finally:
        os.kill(pid, signal.SIGCONT)
    assert servers(mux)[address]["pid"] == pid  # it answers again, unharmed
    stop(mux, address)
    assert run_json(mux, "update", "--prune")["removed_versions"] == ["1.0.0"]


def test_rollback_with_a_server_on_the_previous_previous_version(
    tmp_path, sandbox_env, feeds, served
):
    mux = install(tmp_path, sandbox_env, feeds, served, "bumped-protocol")
    pid, address = start(mux)
    run_json(mux, "update", "--version", "1.1.0", "--exit-code", code=20)
    run_json(mux, "update", "--version", "1.2.0", code=0)  # a pending restart, not asked: 0
    assert versions(mux) == ["1.0.0", "1.1.0", "1.2.0"]

    back = run_json(mux, "update", "--rollback", "--exit-code", code=20)
    assert (back["action"], back["to_version"]) == ("rolled-back", "1.1.0")
    assert versions(mux) == ["1.0.0", "1.1.0", "1.2.0"]
    assert servers(mux)[address]["pid"] == pid
    forth = run_json(mux, "update", "--rollback", code=0)
    assert forth["to_version"] == "1.2.0"
    assert versions(mux) == ["1.0.0", "1.1.0", "1.2.0"]
    assert servers(mux)[address]["pid"] == pid
    # The kept version is whole: its files still match what was installed.
    record = read_record(Layout(str(mux.home), str(mux.bin_dir)))
    expected = record["versions"]["1.0.0"]["files_sha256"]
    assert verify_files(mux.home / "versions" / "1.0.0", expected) is None

    stop(mux, address)
    assert run_json(mux, "update", "--prune")["removed_versions"] == ["1.0.0"]


KILLS = 3  # prunes killed mid-run, two at least while deleting (bench/bench_stress.py: 20 runs)
MAX_KILL_RUNS = 8  # a run can finish before its kill on a loaded machine: more runs


def test_kill_9_during_a_prune_leaves_a_runnable_mux_and_the_servers_version_whole(
    tmp_path, sandbox_env, feeds, served
):
    """Prunes of old versions nothing needs, killed in turn while deleting (after a version
    was renamed to trash) and anywhere in the run, at moments spread over a reference prune
    (tests/support/stress.py, ``Moments``), until three landed mid-run, two at least while
    deleting (at most eight runs); after each, a runnable mux, and the server's version whole
    and serving."""
    mux = install(tmp_path, sandbox_env, feeds, served, "same-protocol")
    pid, address = start(mux)
    run_json(mux, "update", "--version", "1.1.0")
    run_json(mux, "update", "--version", "1.2.0")
    prunes = stress.Prunes(mux, pid, address)
    # While deleting: within 20 ms of the first rename to trash; else anywhere in the run
    # (start-up, lock, asking the servers, renaming, deleting: a reference prune's length).
    moments = {True: stress.Moments(0.02), False: stress.Moments(prunes.timed())}
    killed = mid_deletion = 0
    for run in range(MAX_KILL_RUNS):
        while_deleting = run % 2 == 0
        delay = moments[while_deleting].next()
        kind = "while deleting" if while_deleting else "anywhere"
        where = f"run {run} ({delay:.3f} s in, {kind})"
        kill, deleting = prunes.round(delay, while_deleting=while_deleting, where=where)
        killed += moments[while_deleting].saw(kill).landed
        mid_deletion += kill.landed and deleting
        if killed >= KILLS and mid_deletion >= 2:
            break
    assert killed >= KILLS, f"only {killed} of {MAX_KILL_RUNS} prunes were killed mid-way"
    assert mid_deletion >= 2, f"only {mid_deletion} prunes were killed while deleting"
    final = run_json(mux, "update", "--prune")
    assert set(final["removed_versions"]) <= set(stress.Prunes.JUNK)
    assert versions(mux) == ["1.0.0", "1.1.0", "1.2.0"]
    assert [p.name for p in mux.home.joinpath("versions").iterdir() if p.name.startswith(".")] == []


# -- a server's children ---------------------------------------------------------------------


def test_a_servers_children_run_from_its_versioned_path_when_the_link_moves(
    tmp_path, sandbox_env, feeds
):
    """The background check is a child of the server: after the link moved to 1.1.0, the
    1.0.0 server still runs its own 1.0.0 build for it (never the link)."""
    feed = feeds["same-protocol"]
    with serve_directory_recording(feed.path) as (url, _requests):
        mux = bootstrap(
            tmp_path, sandbox_env, source=url, version="1.0.0", public_key=feed.keypair.public_key
        )
        mux.env["MUX_UPDATE_CHECK_INTERVAL"] = "1"
        pid, address = start(mux)
        log = runtime(mux) / "default.log"
        mine = f"by mux 1.0.0 at {executable_of(mux, '1.0.0')}"
        wait_until(lambda: mine in log.read_text(), what="the server's first background check")
        run_json(mux, "update", "--version", "1.1.0")
        assert os.readlink(mux.mux) == str(mux.home / "versions" / "1.1.0" / "mux")
        wait_until(
            lambda: "the mux link now points at 1.1.0" in log.read_text(),
            what="the server to notice the link moving",
        )
        after_move = lambda: log.read_text().split("the mux link now points at 1.1.0", 1)[1]  # noqa: E731
        wait_until(
            lambda: after_move().count("background check") >= 2,
            what="two background checks after the link moved",
        )
        checks = [line for line in log.read_text().splitlines() if "background check" in line]
        assert checks and all(line.endswith(mine) for line in checks), checks
        assert servers(mux)[address]["pid"] == pid
        stop(mux, address)


# -- what status says about builds -----------------------------------------------------------


def test_a_server_whose_build_was_deleted_by_something_else(tmp_path, sandbox_env, feeds, served):
    mux = install(tmp_path, sandbox_env, feeds, served, "same-protocol")
    pid, address = start(mux)
    run_json(mux, "update", "--version", "1.1.0")
    run_json(mux, "update", "--version", "1.2.0")
    shutil.rmtree(mux.home / "versions" / "1.0.0")  # a manual rm, or an old mux

    entry = servers(mux)[address]
    assert (entry["build_installed"], entry["build_deleted"], entry["restart_needed"]) == (
        False,
        True,
        True,
    )
    assert entry["restart_command"] == f"mux server restart --socket {address}"
    text = mux.run("server", "status").stdout
    assert f"its build {executable_of(mux, '1.0.0')} was deleted" in text
    assert f"restart it with: mux server restart --socket {address}" in text
    check = run_json(mux, "update", "--check", "--version", "1.2.0", code=20)
    assert check["status"] == "restart-needed"
    assert [s["build_deleted"] for s in check["servers"]] == [True]
    restarted = mux.run(*shlex.split(entry["restart_command"])[1:])
    assert restarted.returncode == 0, restarted.stderr
    again = servers(mux)[address]
    assert (again["version"], again["build_installed"]) == ("1.2.0", True)
    assert again["pid"] != pid


def test_a_server_that_does_not_say_where_it_runs_from_is_placed_by_the_os(sandbox_env):
    """A protocol-1 server has no ``executable``: readers ask the OS (``/proc/<pid>/exe``)."""
    directory = Path(sandbox_env["XDG_RUNTIME_DIR"]) / "mux"
    directory.mkdir(mode=0o700)
    old = {**os.environ, **sandbox_env}
    pid, _path = start_mux_server(
        directory, "old", protocol_version=1, version="0.9.0", executable=None
    )
    result = subprocess.run(
        [sys.executable, "-m", "updater", "server", "status", "--json"],
        env=old,
        capture_output=True,
        text=True,
        check=False,
    )
    [entry] = json.loads(result.stdout)["servers"]
    assert entry["status"].get("executable") is None
    assert (entry["pid"], entry["executable_source"]) == (pid, "os")
    assert entry["executable"] == os.path.realpath(sys.executable)
    assert entry["build_installed"] is True


def test_reinstalling_a_version_a_server_runs_from_leaves_its_folder_alone(
    tmp_path, sandbox_env, feeds, served
):
    """Asking for the kept version again reuses its intact folder: never a swap under a server."""
    mux = install(tmp_path, sandbox_env, feeds, served, "same-protocol")
    pid, address = start(mux)
    run_json(mux, "update", "--version", "1.1.0")
    folder = mux.home / "versions" / "1.0.0"
    before = (folder.stat().st_ino, (folder / "mux").stat().st_ino)
    back = run_json(mux, "update", "--version", "1.0.0", "--allow-downgrade")
    assert (back["action"], back["to_version"]) == ("updated", "1.0.0")
    assert (folder.stat().st_ino, (folder / "mux").stat().st_ino) == before
    assert servers(mux)[address]["pid"] == pid


@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_install_sh_keeps_a_version_a_server_runs_from(tmp_path, sandbox_env, feeds, served, shell):
    """install.sh, run again over an install, leaves pruning to the new mux: a server's
    version stays until the server is gone."""
    from tests.support.installsh import make_toolbox, render_install_sh, run_install

    feed = feeds["same-protocol"]
    script = render_install_sh(tmp_path / "install.sh", keys=[feed.keypair.public_key])
    env = {
        **sandbox_env,
        "PATH": str(make_toolbox(tmp_path / "tools")),
        "MUX_DOWNLOAD_URL": served["same-protocol"],
        "MUX_NO_MODIFY_PATH": "1",
        "SHELL": "/bin/sh",
    }
    home = Path(env["HOME"]) / ".local" / "share" / "mux"
    mux = Install(home=home, bin_dir=Path(env["HOME"]) / ".local" / "bin", env=dict(sandbox_env))

    def install_sh(version: str) -> str:
        result = run_install(script, env={**env, "MUX_VERSION": version}, shell=shell)
        assert result.returncode == 0, result.stderr
        return result.stderr

    install_sh("1.0.0")
    pid, address = start(mux)
    install_sh("1.1.0")
    said = install_sh("1.2.0")
    assert versions(mux) == ["1.0.0", "1.1.0", "1.2.0"]
    assert servers(mux)[address]["pid"] == pid
    # The prune's report reaches the user, after the install's own lines.
    assert "  kept 1.0.0 (" in said and f"server {address} (pid {pid}) runs from it" in said
    assert said.index("Switched mux from 1.1.0 to 1.2.0") < said.index("  kept 1.0.0 (")
    stop(mux, address)
    said = install_sh("1.3.0")
    assert versions(mux) == ["1.2.0", "1.3.0"]
    assert "  removed 1.0.0: no running mux found using it" in said
    # Nothing was left unlocked: the feed's seq and the record were written before the prune.
    assert (mux.home / "install.json").is_file()


# -- holds that rest on the process, not on finding its socket (review-11 F1-F3) -------------


def pid_of(address: str) -> int:
    from updater.servers.status import query_server

    report = query_server(address, timeout=5.0)
    assert report.state == "live" and report.peer_pid is not None, report
    return report.peer_pid


def test_a_server_on_a_socket_elsewhere_keeps_its_version_whatever_runtime_dir_updates(
    tmp_path, sandbox_env, feeds, served
):
    """A server on ``--socket`` outside the runtime dir, and updates run with another
    ``XDG_RUNTIME_DIR`` (cron, sudo, another tmux): neither finds its socket, but the server
    holds its version's lock, so its build stays. Once it is gone, the next update removes
    the version and says so."""
    mux = install(tmp_path, sandbox_env, feeds, served, "same-protocol")
    elsewhere = tmp_path / "elsewhere" / "mine.sock"
    elsewhere.parent.mkdir(mode=0o700)
    started = mux.run("server", "start", "--socket", str(elsewhere))
    assert started.returncode == 0, started.stderr
    pid = pid_of(str(elsewhere))
    other = tmp_path / "other-runtime"
    other.mkdir(mode=0o700)
    cron = Install(mux.home, mux.bin_dir, {**mux.env, "XDG_RUNTIME_DIR": str(other)})

    run_json(cron, "update", "--version", "1.1.0")
    doc = run_json(cron, "update", "--version", "1.2.0")
    assert versions(mux) == ["1.0.0", "1.1.0", "1.2.0"]
    assert kept(doc)["1.0.0"]["kind"] == "in-use"
    assert kept(doc)["1.0.0"]["reason"] == f"in use by a running mux (pid {pid})"
    assert doc["removed_versions"] == []
    assert os.readlink(f"/proc/{pid}/exe") == str(
        (mux.home / "versions" / "1.0.0" / INTERPRETER).resolve()
    )
    text = cron.run("update", "--prune")
    assert text.returncode == 0, text.stderr
    assert "kept 1.0.0 (" in text.stdout and f"in use by a running mux (pid {pid})" in text.stdout
    check = run_json(mux, "update", "--check", code=10)  # the usual runtime dir: the same
    assert kept(check)["1.0.0"]["reason"] == f"in use by a running mux (pid {pid})"
    assert pid_of(str(elsewhere)) == pid

    # The version freed when the server stops is removed by the next update, and reported.
    stopped = mux.run("server", "stop", "--socket", str(elsewhere))
    assert stopped.returncode == 0, stopped.stderr
    done = run_json(cron, "update", "--version", "1.3.0")
    assert sorted(done["removed_versions"]) == ["1.0.0", "1.1.0"]
    assert versions(mux) == ["1.2.0", "1.3.0"]


def test_the_version_freed_when_the_last_server_stops_is_reported_in_text(
    tmp_path, sandbox_env, feeds, served
):
    mux = install(tmp_path, sandbox_env, feeds, served, "same-protocol")
    _pid, address = start(mux)
    run_json(mux, "update", "--version", "1.1.0")
    run_json(mux, "update", "--version", "1.2.0")
    assert versions(mux) == ["1.0.0", "1.1.0", "1.2.0"]
    stop(mux, address)
    result = mux.run("update", "--version", "1.3.0", "-v")  # -v: a line for each removed
    assert result.returncode == 0, result.stderr
    removed = sorted(line.strip() for line in result.stdout.splitlines() if "removed" in line)
    assert removed == [
        "removed 1.0.0: no running mux found using it, and it is not needed",
        "removed 1.1.0: no running mux found using it, and it is not needed",
    ]
    assert versions(mux) == ["1.2.0", "1.3.0"]


def fill_listen_queue(path: str) -> list:
    """Connect to ``path`` until the listener's queue is full (the kernel says EAGAIN)."""
    import socket as socket_module

    held = []
    for _ in range(10_000):
        sock = socket_module.socket(socket_module.AF_UNIX)
        sock.setblocking(False)
        try:
            sock.connect(path)
        except BlockingIOError:
            sock.close()
            return held
        held.append(sock)
    raise AssertionError("the listen queue never filled")


def test_a_hung_server_whose_listen_queue_filled_up_keeps_its_version(
    tmp_path, sandbox_env, feeds, served
):
    """A stopped server collects every status query in its listen queue. Ten queries (a
    sidebar's) leave it hung, with its pid; a queue full to the brim still reads as hung, the
    pid then from the lock beside its socket; and its version stays through updates."""
    from updater.servers.status import query_server

    mux = install(tmp_path, sandbox_env, feeds, served, "same-protocol")
    pid, address = start(mux, "stuck")
    os.kill(pid, signal.SIGSTOP)
    held: list = []
    try:
        for _ in range(10):
            report = query_server(address, timeout=0.05)
            assert (report.state, report.peer_pid) == ("hung", pid), report
        held = fill_listen_queue(address)
        assert len(held) >= 100  # the server's backlog, beyond socketserver's 5
        full = query_server(address, timeout=0.5)
        assert (full.state, full.peer_pid) == ("hung", pid), full
        assert "listen queue is full" in full.detail
        run_json(mux, "update", "--version", "1.1.0")
        doc = run_json(mux, "update", "--version", "1.2.0")
        assert versions(mux) == ["1.0.0", "1.1.0", "1.2.0"]
        assert f"pid {pid}" in kept(doc)["1.0.0"]["reason"]
    finally:
        for sock in held:
            sock.close()
        os.kill(pid, signal.SIGCONT)
    # Resumed, it first works through every connection its queue collected: live once done.
    wait_until(
        lambda: query_server(address, timeout=1.0).state == "live",
        timeout=60,
        what="the resumed server to answer",
    )
    assert pid_of(address) == pid
    stop(mux, address)


def test_prune_and_rollback_refuse_a_home_without_an_install(tmp_path, sandbox_env):
    typo = tmp_path / "no-such-home"
    for args in (["update", "--prune"], ["update", "--rollback"]):
        result = subprocess.run(
            [sys.executable, "-m", "updater", *args, "--home", str(typo)],
            env={**os.environ, **sandbox_env},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        assert result.stderr.startswith(f"mux: error: no mux install at {typo}"), result.stderr
        assert "Traceback" not in result.stderr
        assert not typo.exists()


def test_a_mux_starting_from_a_version_being_removed_stops_at_once(
    tmp_path, sandbox_env, feeds, served
):
    """The remover holds the version's exclusive lock while it renames the folder away. A mux
    that starts from that version meanwhile waits for its shared lock, then finds that its
    folder is gone, and stops with one line before it runs anything more from it."""
    import fcntl

    mux = install(tmp_path, sandbox_env, feeds, served, "same-protocol")
    run_json(mux, "update", "--version", "1.1.0")
    folder = mux.home / "versions" / "1.0.0"
    files = folder / ".mux-files"
    lock = os.open(files, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a remover does
        starting = subprocess.Popen(
            [str(folder / "mux"), "version"],
            env=mux.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

        def waiting_for_the_lock() -> bool:
            with contextlib.suppress(OSError):
                for fd in os.listdir(f"/proc/{starting.pid}/fd"):
                    with contextlib.suppress(OSError):
                        if os.readlink(f"/proc/{starting.pid}/fd/{fd}") == str(files):
                            return True
            assert starting.poll() is None, starting.communicate()
            return False

        wait_until(waiting_for_the_lock, what="the starting mux to open its version's file list")
        trash = mux.home / "versions" / ".trash-test"
        trash.mkdir()
        os.rename(folder, trash / "1.0.0")
    finally:
        os.close(lock)
    out, err = starting.communicate(timeout=60)
    assert (starting.returncode, out) == (1, ""), err
    assert (
        err
        == f"mux: error: {folder} was removed while this mux started (an update pruned it); run mux again\n"
    )


def test_a_damaged_copy_that_a_server_runs_from_is_not_swapped(
    tmp_path, sandbox_env, feeds, served
):
    """Asking again for a kept version whose files changed would replace its folder; while a
    server runs from it, the update stops instead (exit 1, one line), and nothing changes."""
    mux = install(tmp_path, sandbox_env, feeds, served, "same-protocol")
    pid, address = start(mux)
    run_json(mux, "update", "--version", "1.1.0")
    folder = mux.home / "versions" / "1.0.0"
    (folder / "extra-file").write_text("not part of the release\n")
    before = folder.stat().st_ino
    result = mux.run("update", "--version", "1.0.0", "--allow-downgrade")
    assert result.returncode == 1, (result.stdout, result.stderr)
    [said] = [line for line in result.stderr.splitlines() if line.startswith("mux:")]
    assert said == (
        f"mux: error: {folder} differs from the release and cannot be replaced: "
        f"in use by a running mux (pid {pid}) (stop what runs from it and retry; "
        "mux server status lists the servers)"
    )
    assert "Traceback" not in result.stderr
    assert folder.stat().st_ino == before and mux.active() == "1.1.0"
    assert [p.name for p in (mux.home / "versions").iterdir() if p.name.startswith(".")] == []
    assert servers(mux)[address]["pid"] == pid
