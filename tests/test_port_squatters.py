"""Another user of the machine on the port of a user's loopback server.

Any user may bind a loopback port that is free, and answer there as they like. These tests
act as that user (uid 1501, through ``setpriv`` as root; skipped with the reason elsewhere)
against real servers and the real ``mux`` command: a squatter that answers as a mux server
and names its own program as the build to run again, one that takes the port in the instant
of a restart, and one on the port ``MUX_SERVER_URL`` names while a check looks for servers.
docs/threat-model.md ("Another user on the port of your server") lists each with its test.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.servers import mux_runtime_dir, wait_until
from tests.support.squatters import SQUATTER, STATUS_SERVER
from tests.support.users import OTHER_UID, as_user, other_users, private_dir
from updater.commands.restart import _fell_back
from updater.config import buildinfo
from updater.config.settings import load_for
from updater.errors import EXIT_NOT_YOURS
from updater.servers import owner
from updater.servers.control import StartFailed, _crowded_by
from updater.servers.status import parse_server_address, query_server

__all__ = ["mux_runtime_dir", "other_users"]  # fixtures, imported for pytest

pytestmark = pytest.mark.skipif(
    not Path("/proc/net/tcp").exists(), reason="asks the kernel who owns a port (/proc/net/tcp)"
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def mux(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "updater", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=env,
        check=False,
    )


def as_other_user(script: str, *args: str) -> subprocess.Popen[str]:
    """``script`` run by Python as the other user; it is stopped when its stdin closes."""
    process = subprocess.Popen(
        [*as_user(OTHER_UID), "--", sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    assert process.stdout is not None
    return process


def stop(process: subprocess.Popen[str]) -> str:
    out, _ = process.communicate(timeout=30)
    return out


def listener_uids(port: int) -> set[int]:
    return {holder.uid for holder in owner.listeners("127.0.0.1", port) or []}


@pytest.fixture
def squatter_program() -> Path:
    """A program of the other user's beside a build-info file, as a kept build looks; if it
    ever runs, it writes the uid it ran as into ``ran-as`` beside it."""
    folder = private_dir(OTHER_UID, "mux-squat-")
    folder.chmod(0o755)
    (folder / "lib" / "updater").mkdir(parents=True)
    (folder / "lib" / "updater" / "_build_info.json").write_text('{"version": "0.0.1"}')
    program = folder / "mux"
    program.write_text(f"#!/bin/sh\nid -u > {folder}/ran-as\nsleep 30\n")
    program.chmod(0o755)
    for path in (folder / "lib", folder / "lib" / "updater", program):
        os.chown(path, OTHER_UID, OTHER_UID)
    return program


def test_a_squatter_naming_its_program_is_not_yours_and_nothing_of_it_runs(
    other_users: None, mux_runtime_dir: Path, squatter_program: Path
) -> None:
    """Finding 1: the other user answers on the port as a mux server naming its program;
    restart, status, stop and the update check all see a listener that is not yours, send
    it nothing, print no restart command for it, and never run its program."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    impostor = as_other_user(STATUS_SERVER, str(port), "1", str(squatter_program), "hold")
    try:
        assert impostor.stdout is not None and impostor.stdout.readline() == "listening\n"
        restart = mux("server", "restart", "--url", url)
        assert restart.returncode == EXIT_NOT_YOURS, (restart.stdout, restart.stderr)
        line = restart.stderr.strip()
        assert f"not your server: the port is held by uid {OTHER_UID}" in line, line
        assert "nothing was stopped" in line and len(line.splitlines()) <= 2, line
        status = mux("server", "status", "--json", env={**os.environ, "MUX_SERVER_URL": url})
        (server,) = json.loads(status.stdout)["servers"]
        assert server["state"] == "not-yours" and server["status"] is None, server
        assert server["restart_command"] is None and server["executable"] == "unknown", server
        check = mux("update", "--check", env={**os.environ, "MUX_SERVER_URL": url})
        assert "mux server restart" not in check.stdout + check.stderr
        stopped = mux("server", "stop", "--url", url)
        assert stopped.returncode == EXIT_NOT_YOURS, stopped.stderr
        assert query_server(url).state == "not-yours"  # it got no shutdown request
    finally:
        impostor.kill()
        impostor.wait()
    assert not (squatter_program.parent / "ran-as").exists()


def test_restarts_leave_the_port_no_moment_free_for_another_user(
    other_users: None, mux_runtime_dir: Path
) -> None:
    """Finding 2: the other user tries to bind the port in a tight loop, in every way a
    socket can, while the user restarts a server this mux started: it never gets the port,
    and every restart ends with a new server of the user's answering there. Three restarts
    here (``MUX_TEST_SQUAT_ROUNDS``); ``bench/bench_restart.py --squatter`` runs a hundred."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    started = mux("server", "start", "--url", url)
    assert started.returncode == 0, started.stderr
    squatter = as_other_user(SQUATTER, str(port))
    try:
        assert squatter.stdout is not None and squatter.stdout.readline() == "trying\n"
        pids = {query_server(url).pid}
        for _ in range(int(os.environ.get("MUX_TEST_SQUAT_ROUNDS", "3"))):
            restart = mux("server", "restart", "--url", url)
            assert restart.returncode == 0, (restart.stdout, restart.stderr)
            report = query_server(url)
            assert report.state == "live" and report.pid not in pids, report
            pids.add(report.pid)
            assert listener_uids(port) == {os.geteuid()}
    finally:
        got = stop(squatter)
        mux("server", "stop", "--url", url)
    assert got.strip() == "0", got


def test_another_user_taking_the_port_of_an_older_server_is_no_failed_start(
    other_users: None, mux_runtime_dir: Path, tmp_path: Path
) -> None:
    """A server an older mux started shares its port with no one, so its restart stops it
    first: the other user takes the port in that gap. That is said in one line naming
    them (exit 6), and is not a failed start of the new version: nothing is recorded."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    older = subprocess.Popen(
        [sys.executable, "-c", STATUS_SERVER, str(port), "1", "", "exit"],
        stdout=subprocess.PIPE,
        text=True,
    )
    squatter = None
    try:
        assert older.stdout is not None and older.stdout.readline() == "listening\n"
        squatter = as_other_user(SQUATTER, str(port))
        assert squatter.stdout is not None and squatter.stdout.readline() == "trying\n"
        restart = mux("server", "restart", "--url", url, env=env)
        older.wait(timeout=10)
        wait_until(lambda: listener_uids(port) == {OTHER_UID}, what="the other user's listener")
        assert restart.returncode == EXIT_NOT_YOURS, (restart.stdout, restart.stderr)
        assert f"held by uid {OTHER_UID}" in restart.stderr, restart.stderr
        assert "not offered again" not in restart.stderr
        check = mux("update", "--check", "--json", env=env)
        assert json.loads(check.stdout or "{}").get("failed_versions", []) == [], check.stdout
    finally:
        older.kill()
        older.wait()
        if squatter is not None:
            stop(squatter)


# Opens argv[2] connections to the port argv[1] and keeps them until standard input closes.
CROWD = r"""
import socket, sys
held = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(int(sys.argv[2]))]
print("connected", flush=True)
sys.stdin.read()
"""


def test_another_users_crowd_is_counted_and_a_silence_in_it_is_no_failed_start(
    other_users: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flood of another user's connections can keep a new server from answering a
    restart's status queries in time: the kernel counts them by uid, and such a silence is
    not recorded as a failed start of the version (their traffic, not the build)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        port = listener.getsockname()[1]
        crowd = as_other_user(CROWD, str(port), "20")
        try:
            assert crowd.stdout is not None and crowd.stdout.readline() == "connected\n"
            assert owner.crowd("127.0.0.1", port) == {OTHER_UID: 20}
            target = parse_server_address(f"http://127.0.0.1:{port}")
            crowded_by = _crowded_by(target)  # type: ignore[arg-type]
        finally:
            stop(crowd)
    assert crowded_by == f"uid {OTHER_UID}: 20 connections"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    failed = StartFailed("", reason="it did not answer within 7s", log_path=tmp_path / "log")
    failed.crowded_by = crowded_by
    build = buildinfo.current()
    error = _fell_back(load_for(build), build, "http://x", failed, None, None, None)
    assert "not recorded as a failed start" in error.message, error.message
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").rglob("*.json"))


def test_two_servers_on_one_port_number_are_refused_as_they_would_share_a_secret(
    mux_runtime_dir: Path,
) -> None:
    """A server on 127.0.0.1:P and another on [::1]:P would share tcp-P.secret (the second
    made the first refuse every request): the second does not start."""
    port = free_port()
    first = mux("server", "start", "--url", f"http://127.0.0.1:{port}")
    assert first.returncode == 0, first.stderr
    try:
        second = mux("server", "start", "--url", f"http://[::1]:{port}")
        assert second.returncode == 1, (second.stdout, second.stderr)
        assert "would share one secret file" in second.stderr, second.stderr
        assert query_server(f"http://127.0.0.1:{port}").state == "live"
    finally:
        mux("server", "stop", "--url", f"http://127.0.0.1:{port}")
