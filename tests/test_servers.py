"""The server status contract: discovery, status queries, and the server control surface.

Servers here are real: real processes (or, for the misbehaving fakes, threads) on real Unix
sockets and a real loopback TCP port.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shlex
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import warnings
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.support.servers import (
    make_stale_socket,
    mux_runtime_dir,
    server_log,
    start_fake_server,
    start_mux_server,
    start_mux_server_url,
    tcp_secret,
    write_fake_mux,
)
from updater.cli.server import server_app
from updater.config import buildinfo
from updater.core.verdicts import ServerReport, restart_command_for
from updater.daemon import server as server_daemon
from updater.errors import EXIT_USAGE, MuxError, UsageError
from updater.protocol import StatusLine, StatusLineError, parse_status_line
from updater.servers import control
from updater.servers.addresses import (
    TcpAddress,
    UnixAddress,
    discover_server_addresses,
    parse_server_address,
)
from updater.servers.runtime import runtime_dir
from updater.servers.status import query_all, query_server
from updater.servers.wire import http_request

__all__ = ["mux_runtime_dir"]  # the fixture, imported for pytest

PROTOCOL = buildinfo.current().protocol_version


def wait_until(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def mux(*args: str, env: dict[str, str] | None = None, timeout: float = 60):
    return subprocess.run(
        [sys.executable, "-m", "updater", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env=env,
        check=False,
    )


def live_pid(path: Path) -> int | None:
    status = query_server(str(path)).status
    return status.pid if status else None


def process_gone(pid: int) -> bool:
    """The process no longer runs (a zombie of ours counts as gone: it serves nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return True


# -- addresses and discovery ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("unix:///run/user/1/mux/a.sock", UnixAddress("/run/user/1/mux/a.sock")),
        ("unix:///tmp/with%20space.sock", UnixAddress("/tmp/with space.sock")),
        ("/tmp/plain.sock", UnixAddress("/tmp/plain.sock")),
        ("http://127.0.0.1:8123", TcpAddress("127.0.0.1", 8123)),
        ("http://127.0.0.1:8123/", TcpAddress("127.0.0.1", 8123)),
        ("http://localhost:9", TcpAddress("localhost", 9)),
        ("http://[::1]:9", TcpAddress("::1", 9)),
    ],
)
def test_parse_server_address_accepts_sockets_and_loopback_urls(text, expected):
    assert parse_server_address(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "http://example.com:80",
        "http://10.1.2.3:8000",
        "https://127.0.0.1:8000",
        "http://127.0.0.1",
        "http://127.0.0.1:8000/prefix",
        "http://127.0.0.1:99999",
        "unix://relative.sock",
        "unix://host/abs.sock",
        "ftp://127.0.0.1:21",
    ],
)
def test_parse_server_address_refuses_everything_else(text):
    with pytest.raises(UsageError):
        parse_server_address(text)


def test_display_round_trips_through_the_parser():
    for address in (TcpAddress("127.0.0.1", 80), TcpAddress("::1", 81), UnixAddress("/a b")):
        assert parse_server_address(address.display) == address


def test_runtime_dir_follows_xdg_runtime_dir(mux_runtime_dir):
    assert runtime_dir() == Path(os.environ["XDG_RUNTIME_DIR"]) / "mux"
    assert mux_runtime_dir == runtime_dir()


def test_runtime_dir_falls_back_quietly_from_an_unsafe_xdg_runtime_dir(tmp_path, monkeypatch):
    import platformdirs

    # platformdirs' last fallback is runtime-<uid> in the temp dir: keep it in tmp_path.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)  # XDG requires 0700: platformdirs must not use it
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(shared))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = runtime_dir()
    assert caught == []
    assert found != shared / "mux"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert found == Path(platformdirs.user_runtime_dir("mux"))


def test_discovery_lists_every_socket_in_the_runtime_dir_sorted(mux_runtime_dir):
    for name in ("zeta.sock", "alpha.sock", "notes.log", "alpha.sock.lock", "beta.sockx"):
        (mux_runtime_dir / name).touch()
    assert discover_server_addresses({}) == [
        str(mux_runtime_dir / "alpha.sock"),
        str(mux_runtime_dir / "zeta.sock"),
    ]


def test_discovery_without_a_runtime_dir_finds_nothing(mux_runtime_dir):
    mux_runtime_dir.rmdir()
    assert discover_server_addresses({}) == []
    assert query_all() == []


def test_mux_server_url_names_one_server(mux_runtime_dir):
    (mux_runtime_dir / "ignored.sock").touch()
    env = {"MUX_SERVER_URL": "unix:///tmp/one.sock"}
    assert discover_server_addresses(env) == ["/tmp/one.sock"]
    assert discover_server_addresses({"MUX_SERVER_URL": "http://127.0.0.1:7070"}) == [
        "http://127.0.0.1:7070"
    ]
    with pytest.raises(UsageError, match="not on this machine"):
        discover_server_addresses({"MUX_SERVER_URL": "http://example.com:80"})
    with pytest.raises(UsageError, match="MUX_SERVER_URL must be a URL"):
        discover_server_addresses({"MUX_SERVER_URL": "/tmp/one.sock"})


def test_restart_command_quotes_the_socket_path():
    report = ServerReport("/tmp/my dir/it's.sock", "live", None, "")
    command = restart_command_for(report.address)
    assert command.startswith("mux server restart --socket ")
    assert shlex.split(command) == ["mux", "server", "restart", "--socket", "/tmp/my dir/it's.sock"]
    url = ServerReport("http://127.0.0.1:7070", "live", None, "")
    assert restart_command_for(url.address) == "mux server restart --url http://127.0.0.1:7070"


# -- status queries against real servers ------------------------------------------------


def test_two_live_servers_at_different_protocols(mux_runtime_dir):
    pid_a, sock_a = start_mux_server(mux_runtime_dir, "a", protocol_version=PROTOCOL)
    pid_b, sock_b = start_mux_server(mux_runtime_dir, "b", protocol_version=PROTOCOL + 6)
    reports = query_all()
    assert [r.address for r in reports] == [str(sock_a), str(sock_b)]
    assert [r.state for r in reports] == ["live", "live"]
    a, b = (r.status for r in reports)
    assert a is not None and b is not None
    assert (a.pid, a.protocol_version) == (pid_a, PROTOCOL)
    assert (b.pid, b.protocol_version) == (pid_b, PROTOCOL + 6)
    assert a.service == "mux" and a.version == buildinfo.current().version
    assert a.started_at is not None
    started = datetime.fromisoformat(a.started_at)
    assert started.tzinfo is not None
    assert abs(time.time() - started.timestamp()) < 120
    doc = json.loads(json.dumps([r.to_json() for r in reports]))
    assert doc[1]["status"]["protocol_version"] == PROTOCOL + 6
    assert doc[1]["state"] == "live"


def test_hung_servers_cost_one_timeout_not_one_each(mux_runtime_dir):
    start_mux_server(mux_runtime_dir, "live")
    for name in ("hung1", "hung2", "hung3"):
        start_fake_server("hung", mux_runtime_dir / f"{name}.sock")
    start_fake_server("drip", mux_runtime_dir / "drip.sock")  # answers, but too slowly
    timeout = 1.0
    began = time.monotonic()
    reports = query_all(timeout=timeout)
    elapsed = time.monotonic() - began
    states = {Path(r.address).stem: r.state for r in reports}
    assert states == {
        "drip": "hung",
        "hung1": "hung",
        "hung2": "hung",
        "hung3": "hung",
        "live": "live",
    }
    assert elapsed < 1.5 * timeout


@pytest.mark.parametrize("kind", ["drip", "drip-until-close"])
def test_a_dripping_server_is_cut_at_the_deadline(mux_runtime_dir, kind):
    start_fake_server(kind, mux_runtime_dir / "drip.sock")
    began = time.monotonic()
    report = query_server(str(mux_runtime_dir / "drip.sock"), timeout=0.5)
    assert (report.state, report.detail) == ("hung", "no answer within 0.5s")
    assert time.monotonic() - began < 1.0


@pytest.mark.parametrize(
    ("kind", "state", "detail"),
    [
        ("garbage", "garbage", "not JSON"),
        ("not-http", "garbage", "not HTTP"),
        ("http-error", "garbage", "HTTP 500"),
        ("huge", "garbage", "64 KiB"),
        ("foreign", "foreign", "another service"),
        ("no-protocol", "no-protocol", "protocol_version"),
    ],
)
def test_misbehaving_servers_are_reported_as_such(mux_runtime_dir, kind, state, detail):
    path = mux_runtime_dir / f"{kind}.sock"
    start_fake_server(kind, path)
    report = query_server(str(path))
    assert (report.state, report.status) == (state, None)
    assert detail in report.detail


def test_stale_and_missing_sockets_are_stale(mux_runtime_dir):
    stale = make_stale_socket(mux_runtime_dir / "dead.sock")
    assert query_server(str(stale)).state == "stale"
    assert query_server(str(mux_runtime_dir / "missing.sock")).state == "stale"
    plain_file = mux_runtime_dir / "file.sock"
    plain_file.write_text("not a socket")
    assert query_server(str(plain_file)).state == "stale"


def test_query_server_reports_errors_instead_of_raising(mux_runtime_dir):
    assert query_server("ftp://127.0.0.1:21").state == "error"
    too_long = mux_runtime_dir / ("x" * 120 + ".sock")
    report = query_server(str(too_long))
    assert report.state == "error"
    assert report.detail


def test_status_over_mux_server_url_unix_form(mux_runtime_dir, monkeypatch):
    pid, path = start_mux_server(mux_runtime_dir, "elsewhere")
    start_fake_server("hung", mux_runtime_dir / "not-asked.sock")
    monkeypatch.setenv("MUX_SERVER_URL", f"unix://{path}")
    [report] = query_all(timeout=0.5)
    assert report.address == str(path)
    assert report.state == "live"
    assert report.status is not None and report.status.pid == pid


def test_status_over_mux_server_url_http_form(mux_runtime_dir, monkeypatch):
    pid, url = start_mux_server_url(mux_runtime_dir, protocol_version=PROTOCOL + 1)
    monkeypatch.setenv("MUX_SERVER_URL", url)
    [report] = query_all()
    assert (report.address, report.state) == (url, "live")
    assert report.status is not None
    assert (report.status.pid, report.status.protocol_version) == (pid, PROTOCOL + 1)
    assert restart_command_for(report.address) == f"mux server restart --url {url}"


def test_tcp_server_refuses_browser_requests(mux_runtime_dir):
    _pid, url = start_mux_server_url(mux_runtime_dir)
    address = parse_server_address(url)
    assert isinstance(address, TcpAddress)
    owner = {"Authorization": f"Bearer {tcp_secret(url)}"}

    def ask(method: str, headers: dict[str, str]) -> int:
        connection = http.client.HTTPConnection(address.host, address.port, timeout=5)
        try:
            connection.request(
                method, "/api/shutdown" if method == "POST" else "/api/status", headers=headers
            )
            return connection.getresponse().status
        finally:
            connection.close()

    # Even with the owner's secret (a page cannot read it, but refuse what only a page sends).
    assert ask("POST", {**owner, "Origin": "https://evil.example"}) == 403
    assert ask("GET", {**owner, "Host": f"evil.example:{address.port}"}) == 403
    assert ask("GET", {**owner, "Sec-Fetch-Mode": "no-cors"}) == 403
    assert ask("GET", {"Host": "localhost"}) == 401  # no secret
    assert ask("GET", {"Authorization": "Bearer " + "0" * 64}) == 401
    assert ask("GET", {**owner, "Host": "localhost"}) == 200
    assert query_server(url).state == "live"  # still serving, and mux's client sends it


# -- the daemon -------------------------------------------------------------------------


def test_serve_creates_a_private_socket_in_a_private_dir(mux_runtime_dir):
    mux_runtime_dir.rmdir()
    _pid, path = start_mux_server(mux_runtime_dir, "default")
    assert stat.S_IMODE(mux_runtime_dir.stat().st_mode) == 0o700
    info = os.lstat(path)
    assert stat.S_ISSOCK(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o600


def test_serve_tightens_a_loose_runtime_dir_but_no_other_dir(mux_runtime_dir):
    mux_runtime_dir.chmod(0o755)
    start_mux_server(mux_runtime_dir, "default")
    assert stat.S_IMODE(mux_runtime_dir.stat().st_mode) == 0o700
    shared = mux_runtime_dir.parent / "shared"  # removed with the fixture's directory
    shared.mkdir()
    shared.chmod(0o755)
    start_mux_server(shared, "custom")
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755
    assert stat.S_IMODE(os.lstat(shared / "custom.sock").st_mode) == 0o600


def test_unknown_endpoints_get_404(mux_runtime_dir):
    _pid, path = start_mux_server(mux_runtime_dir, "default")
    code, body = http_request(UnixAddress(str(path)), "GET", "/api/nothing", timeout=5)
    assert code == 404
    assert b"no such endpoint" in body


def test_shutdown_request_stops_the_server_and_removes_its_socket(mux_runtime_dir):
    pid, path = start_mux_server(mux_runtime_dir, "default")
    code, body = http_request(UnixAddress(str(path)), "POST", "/api/shutdown", timeout=5)
    assert code == 202
    assert json.loads(body) == {"shutting_down": True}
    assert wait_until(lambda: process_gone(pid) and not path.exists())
    log = server_log(mux_runtime_dir, "default").read_text()
    assert "stopping on shutdown request" in log


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signals_stop_the_server_cleanly(mux_runtime_dir, signum):
    pid, path = start_mux_server(mux_runtime_dir, "default")
    os.kill(pid, signum)
    assert wait_until(lambda: process_gone(pid) and not path.exists())
    assert f"stopping on {signum.name}" in server_log(mux_runtime_dir, "default").read_text()


def test_serve_refuses_when_a_server_already_answers(mux_runtime_dir):
    pid, path = start_mux_server(mux_runtime_dir, "default")
    result = mux("server", "run", "--socket", str(path), timeout=30)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert f"already runs on {path} (pid {pid}" in result.stderr
    assert live_pid(path) == pid


def test_serve_refuses_when_something_else_answers(mux_runtime_dir):
    path = mux_runtime_dir / "default.sock"
    start_fake_server("foreign", path)
    with pytest.raises(MuxError, match="something already answers"):
        server_daemon.serve(path, lock_timeout=1.0)
    assert query_server(str(path)).state == "foreign"


def test_serve_replaces_a_stale_socket(mux_runtime_dir):
    stale = make_stale_socket(mux_runtime_dir / "default.sock")
    pid, path = start_mux_server(mux_runtime_dir, "default")
    assert path == stale
    assert live_pid(path) == pid


def test_serve_refuses_to_replace_a_file_that_is_not_a_socket(mux_runtime_dir):
    path = mux_runtime_dir / "default.sock"
    path.write_text("precious")
    with pytest.raises(MuxError, match="not a socket"):
        server_daemon.serve(path, lock_timeout=1.0)
    assert path.read_text() == "precious"


def test_serve_reports_a_socket_path_that_is_too_long(mux_runtime_dir):
    path = mux_runtime_dir / ("x" * 120 + ".sock")
    with pytest.raises(MuxError, match="cannot listen on"):
        server_daemon.serve(path, lock_timeout=1.0)
    assert not path.exists()


def test_two_servers_racing_for_one_socket_leave_exactly_one(mux_runtime_dir):
    path = mux_runtime_dir / "default.sock"
    make_stale_socket(path)
    command = [sys.executable, "-m", "updater", "server", "run", "--socket", str(path)]
    racers = [
        subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for _ in range(2)
    ]
    try:
        assert wait_until(lambda: any(r.poll() is not None for r in racers), timeout=30)
        [loser] = [r for r in racers if r.poll() is not None]
        [winner] = [r for r in racers if r is not loser]
        assert loser.stderr is not None
        said = loser.stderr.read()
        assert loser.returncode == 1, said
        assert re.search("already runs|starting or stopping", said), said
        assert wait_until(lambda: query_server(str(path)).state == "live")
        assert live_pid(path) == winner.pid
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.terminate()
            racer.wait(10)
            if racer.stderr:
                racer.stderr.close()


# -- start / stop / restart -------------------------------------------------------------


def test_start_restart_stop_with_the_current_mux(mux_runtime_dir):
    path = mux_runtime_dir / "default.sock"
    started = control.start(path, timeout=30)
    assert started.state == "live" and started.status is not None
    first_pid = started.status.pid
    assert first_pid is not None and first_pid != os.getpid()
    log = mux_runtime_dir / "default.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert "listening on" in log.read_text()

    restarted = control.restart(path, timeout=30)
    assert restarted.address == str(path)
    assert restarted.status is not None and restarted.status.pid != first_pid
    assert wait_until(lambda: process_gone(first_pid))

    assert control.stop(path) == "stopped"
    assert not path.exists()
    assert query_server(str(path)).state == "stale"
    assert control.stop(path) == "not-running"


def test_restart_runs_the_new_mux_and_keeps_the_socket(mux_runtime_dir, tmp_path):
    old_pid, path = start_mux_server(mux_runtime_dir, "work", protocol_version=PROTOCOL)
    new_mux = write_fake_mux(tmp_path, protocol_version=PROTOCOL + 1, version="9.9.9")
    report = control.restart(path, executable=str(new_mux), timeout=30)
    assert report.address == str(path)
    assert report.status is not None
    assert report.status.pid != old_pid
    assert (report.status.protocol_version, report.status.version) == (PROTOCOL + 1, "9.9.9")
    assert wait_until(lambda: process_gone(old_pid))
    [again] = query_all()
    assert again.status == report.status
    control.stop(path)


def test_stop_works_against_a_server_of_another_protocol(mux_runtime_dir):
    pid, path = start_mux_server(mux_runtime_dir, "old", protocol_version=PROTOCOL + 41)
    assert control.stop(path) == "stopped"
    assert wait_until(lambda: process_gone(pid))
    assert not path.exists()


def test_stop_over_tcp(mux_runtime_dir):
    pid, url = start_mux_server_url(mux_runtime_dir)
    assert control.stop(url) == "stopped"
    assert wait_until(lambda: process_gone(pid))
    assert query_server(url).state == "stale"


def test_stop_removes_a_stale_socket(mux_runtime_dir):
    stale = make_stale_socket(mux_runtime_dir / "dead.sock")
    assert control.stop(stale) == "not-running"
    assert not stale.exists()
    assert discover_server_addresses({}) == []


def test_stop_refused_by_a_foreign_server(mux_runtime_dir):
    path = mux_runtime_dir / "other.sock"
    start_fake_server("foreign", path)
    with pytest.raises(MuxError, match=r"refused the shutdown request \(HTTP 404\)"):
        control.stop(path)


def test_stop_gives_up_on_a_hung_server(mux_runtime_dir):
    path = mux_runtime_dir / "hung.sock"
    start_fake_server("hung", path)
    began = time.monotonic()
    with pytest.raises(MuxError, match=r"did not answer the shutdown request within 0\.5s"):
        control.stop(path, timeout=0.5)
    assert time.monotonic() - began < 1.5


def test_start_refuses_when_a_server_already_runs(mux_runtime_dir):
    pid, path = start_mux_server(mux_runtime_dir, "default")
    with pytest.raises(MuxError, match="already runs") as caught:
        control.start(path, timeout=5)
    assert caught.value.hint == f"to replace it: mux server restart --socket {path}"
    assert live_pid(path) == pid


def test_start_reports_a_server_that_exits(mux_runtime_dir, tmp_path):
    failing = tmp_path / "failing-mux"
    failing.write_text("#!/bin/sh\necho 'cannot start: broken build' >&2\nexit 7\n")
    failing.chmod(0o755)
    path = mux_runtime_dir / "default.sock"
    with pytest.raises(MuxError, match=r"exited with code 7 .*broken build"):
        control.start(path, executable=str(failing), timeout=30)
    assert not path.exists()


def test_start_gives_up_on_a_server_that_never_answers_and_stops_it(mux_runtime_dir, tmp_path):
    pid_file = tmp_path / "pid"
    silent = tmp_path / "silent-mux"
    silent.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 60\n")
    silent.chmod(0o755)
    path = mux_runtime_dir / "default.sock"
    with pytest.raises(MuxError, match=r"did not answer .* within 1s"):
        control.start(path, executable=str(silent), timeout=1.0)
    assert process_gone(int(pid_file.read_text()))


def test_start_reports_a_missing_executable(mux_runtime_dir, tmp_path):
    with pytest.raises(MuxError, match="cannot run"):
        control.start(mux_runtime_dir / "default.sock", executable=str(tmp_path / "nope"))


def test_current_mux_command_in_a_development_checkout_runs_this_code_from_anywhere(
    monkeypatch, tmp_path
):
    """Whatever the working directory holds (here a folder named updater that would answer
    instead), and where the package is not installed (the base interpreter, outside this
    checkout's environment: the release workflow runs `python -m release` from a checkout it
    does not install), the command runs this checkout's updater."""
    import updater

    fake = tmp_path / "updater"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text("print('the wrong updater')\n")
    base = getattr(sys, "_base_executable", sys.executable)
    monkeypatch.setattr(sys, "executable", base)
    command = buildinfo.current_mux_command()
    assert command[0] == base
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run(
        [*command, "version", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["version"] == updater.__version__


def test_current_mux_command_in_a_standalone_build_is_its_own_versioned_path(monkeypatch, tmp_path):
    """Never the moving link: what this process starts runs the build it runs itself."""
    versions = tmp_path / "versions" / "0.2.0"
    versions.mkdir(parents=True)
    real = versions / "mux"
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mux").symlink_to(real)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "argv", [str(bin_dir / "mux"), "server", "restart"])
    resolved = [os.path.realpath(real)]
    assert buildinfo.current_mux_command() == resolved
    monkeypatch.setattr(sys, "argv", ["mux", "server", "restart"])
    monkeypatch.setenv("PATH", str(bin_dir))
    assert buildinfo.current_mux_command() == resolved
    # Moving the link afterwards changes nothing for this process.
    other = tmp_path / "versions" / "0.3.0"
    other.mkdir()
    (other / "mux").write_text("#!/bin/sh\n")
    (bin_dir / "mux").unlink()
    (bin_dir / "mux").symlink_to(other / "mux")
    monkeypatch.setattr(sys, "argv", [str(real), "server", "restart"])
    assert buildinfo.current_mux_command() == resolved
    # A PyInstaller build knows itself by sys.executable.
    monkeypatch.setattr(sys, "_MEIPASS", str(versions / "_internal"), raising=False)
    monkeypatch.setattr(sys, "executable", str(real))
    monkeypatch.setattr(sys, "argv", ["mux"])
    assert buildinfo.current_mux_command() == resolved


# -- the CLI ----------------------------------------------------------------------------
# End to end through `python -m updater server ...` where it matters (status, the
# start/restart/stop flow, one error); in-process with typer's runner for the rest, since
# each mux process costs a typer import.

runner = CliRunner()


def test_cli_status_reports_every_kind_of_server(mux_runtime_dir):
    start_mux_server(mux_runtime_dir, "a-live")
    start_mux_server(mux_runtime_dir, "b-newer", protocol_version=PROTOCOL + 1)
    make_stale_socket(mux_runtime_dir / "c-stale.sock")
    start_fake_server("hung", mux_runtime_dir / "d-hung.sock")
    start_fake_server("garbage", mux_runtime_dir / "e-garbage.sock")
    start_fake_server("foreign", mux_runtime_dir / "f-foreign.sock")
    start_fake_server("no-protocol", mux_runtime_dir / "g-noproto.sock")
    expected = ["live", "live", "stale", "hung", "garbage", "foreign", "no-protocol"]

    result = mux("server", "status", "--timeout", "0.5")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(": ", 1)[1].split(" ", 1)[0].rstrip(",") for line in lines] == expected
    newer = mux_runtime_dir / "b-newer.sock"
    assert f"restart it with: mux server restart --socket {newer}" in lines[1]
    assert "restart" not in lines[0]
    assert "skipped" in lines[2]

    as_json = mux("server", "status", "--json", "--timeout", "0.5")
    assert as_json.returncode == 0
    doc = json.loads(as_json.stdout)
    assert [s["state"] for s in doc["servers"]] == expected
    assert doc["servers"][1]["status"]["protocol_version"] == PROTOCOL + 1


def test_cli_start_restart_stop(mux_runtime_dir):
    path = mux_runtime_dir / "work.sock"
    started = mux("server", "start", "--name", "work")
    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith(f"started a mux server on {path}: mux ")
    first = query_server(str(path)).status
    assert first is not None

    restarted = mux("server", "restart", "--socket", str(path))
    assert restarted.returncode == 0, restarted.stderr
    second = query_server(str(path)).status
    assert second is not None and second.pid != first.pid
    assert f"pid {second.pid}" in restarted.stdout

    stopped = mux("server", "stop", "--url", f"unix://{path}")
    assert (stopped.returncode, stopped.stdout.strip()) == (0, f"stopped the mux server on {path}")
    assert query_all() == []  # the socket went away with its server


def test_cli_bad_mux_server_url_is_one_usage_error(mux_runtime_dir):
    env = {**os.environ, "MUX_SERVER_URL": "http://example.com:80"}
    result = mux("server", "status", env=env)
    assert result.returncode == EXIT_USAGE
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert "not on this machine" in result.stderr


def test_cli_status_with_no_server(mux_runtime_dir):
    result = runner.invoke(server_app, ["status"])
    assert (result.exit_code, result.stdout) == (
        0,
        f"no mux server found (looked in {mux_runtime_dir})\n",
    )
    as_json = runner.invoke(server_app, ["status", "--json"])
    assert json.loads(as_json.stdout) == {"schema": 2, "servers": []}


def test_cli_start_on_a_running_server_says_so_and_exits_0(mux_runtime_dir):
    # Issue 38, item 9: start on a live server did what was asked (one runs), as stop on
    # nothing does; it exited 1 before.
    pid, path = start_mux_server(mux_runtime_dir, "default")
    result = runner.invoke(server_app, ["start"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith(f"a mux server already runs on {path}: mux ")
    assert f"pid {pid}" in result.stdout and result.stdout.count("\n") == 1
    assert live_pid(path) == pid


def test_cli_start_on_a_server_of_another_protocol_says_how_to_replace_it(mux_runtime_dir):
    pid, path = start_mux_server(mux_runtime_dir, "old", protocol_version=PROTOCOL + 1)
    result = runner.invoke(server_app, ["start", "--name", "old"])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"a mux server already runs on {path}: mux ")
    assert lines[1].endswith(f"to replace it: mux server restart --socket {path}")
    assert live_pid(path) == pid


def test_cli_status_lists_the_runtime_dir_and_mux_server_url(mux_runtime_dir, monkeypatch):
    _pid, path = start_mux_server(mux_runtime_dir, "local")
    _tcp_pid, url = start_mux_server_url(mux_runtime_dir)
    monkeypatch.setenv("MUX_SERVER_URL", url)
    result = runner.invoke(server_app, ["status", "--json"])
    assert result.exit_code == 0, result.stderr
    servers = json.loads(result.stdout)["servers"]
    assert [(s["address"], s["state"]) for s in servers] == [(str(path), "live"), (url, "live")]
    text = runner.invoke(server_app, ["status"])
    assert [line.split(":")[0] for line in text.stdout.splitlines()] == [str(path), "http"]


@pytest.mark.parametrize(
    "option", [["--name", "b"], ["--socket", "{dir}/b.sock"], ["--url", "unix://{dir}/b.sock"]]
)
def test_cli_status_filters_by_the_server_options(mux_runtime_dir, option):
    start_mux_server(mux_runtime_dir, "a")
    _pid, path = start_mux_server(mux_runtime_dir, "b")
    args = [arg.format(dir=mux_runtime_dir) for arg in option]
    result = runner.invoke(server_app, ["status", "--json", *args])
    assert result.exit_code == 0, result.stderr
    assert [s["address"] for s in json.loads(result.stdout)["servers"]] == [str(path)]


def test_cli_status_of_a_named_server_that_does_not_run(mux_runtime_dir):
    start_mux_server(mux_runtime_dir, "a")
    result = runner.invoke(server_app, ["status", "--name", "nothing"])
    assert (result.exit_code, result.stdout) == (
        0,
        f"no mux server found (looked in {mux_runtime_dir / 'nothing.sock'})\n",
    )
    as_json = runner.invoke(server_app, ["status", "--json", "--name", "nothing"])
    assert json.loads(as_json.stdout) == {"schema": 2, "servers": []}


def test_cli_status_refuses_two_server_options(mux_runtime_dir):
    result = runner.invoke(server_app, ["status", "--name", "a", "--url", "http://127.0.0.1:1"])
    assert result.exit_code == EXIT_USAGE
    assert "give only one of --name, --url" in result.stderr


def test_cli_restart_with_nothing_running_starts_one_and_says_so(mux_runtime_dir):
    path = mux_runtime_dir / "fresh.sock"
    result = mux("server", "restart", "--name", "fresh")
    assert result.returncode == 0, result.stderr
    status = query_server(str(path)).status
    assert status is not None
    assert result.stdout.startswith(f"no mux server ran on {path}; started one: mux ")
    assert f"pid {status.pid}" in result.stdout and "restarted" not in result.stdout


def test_cli_stop_defaults_to_the_default_socket(mux_runtime_dir):
    result = runner.invoke(server_app, ["stop"])
    assert (result.exit_code, result.stdout.strip()) == (
        0,
        f"no mux server runs on {mux_runtime_dir / 'default.sock'}",
    )


def test_cli_stop_reports_a_refusal(mux_runtime_dir):
    start_fake_server("foreign", mux_runtime_dir / "other.sock")
    result = runner.invoke(server_app, ["stop", "--name", "other"])
    assert result.exit_code == 1
    assert result.stderr.startswith("mux: error: the server on ")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["start", "--name", "../escape"], "invalid server name"),
        (["stop", "--name", "a", "--socket", "/tmp/x.sock"], "only one of --name, --socket"),
        (["restart", "--url", "http://10.0.0.1:80"], "not on this machine"),
        (["run", "--url", "ftp://127.0.0.1:1"], "unsupported server URL"),
    ],
)
def test_cli_bad_server_selection_is_a_usage_error(mux_runtime_dir, args, message):
    result = runner.invoke(server_app, args)
    assert result.exit_code == EXIT_USAGE
    assert result.stderr.count("\n") == 1
    assert message in result.stderr
    assert list(mux_runtime_dir.iterdir()) == []


# -- parse_status_line never raises anything but StatusLineError -------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
status_like = st.fixed_dictionaries(
    {},
    optional={
        "service": st.sampled_from(["mux", "tmux", ""]) | json_values,
        "protocol_version": st.integers() | json_values,
        "version": json_values,
        "pid": json_values,
        "started_at": json_values,
        "extra": json_values,
    },
)


def _check_parse(raw: bytes) -> None:
    try:
        line = parse_status_line(raw)
    except StatusLineError as exc:
        assert exc.kind in {"garbage", "foreign", "no-protocol"}
    else:
        assert isinstance(line, StatusLine)
        assert line.service == "mux"
        assert isinstance(line.protocol_version, int) and not isinstance(
            line.protocol_version, bool
        )
        json.dumps(line.to_json())


@given(st.binary(max_size=512))
def test_parse_status_line_on_arbitrary_bytes(raw):
    _check_parse(raw)


@given(status_like)
def test_parse_status_line_on_status_like_documents(doc):
    _check_parse(json.dumps(doc).encode())


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    payload=st.binary(max_size=300)
    | status_like.map(lambda d: b"HTTP/1.0 200 OK\r\n\r\n" + json.dumps(d).encode())
)
def test_query_server_never_raises_whatever_a_server_answers(mux_runtime_dir, payload):
    path = mux_runtime_dir / "raw.sock"
    fake = start_fake_server("raw", path, payload=payload)
    try:
        report = query_server(str(path), timeout=2.0)
    finally:
        fake.close()
    assert report.state in {"live", "garbage", "foreign", "no-protocol"}
    assert (report.status is not None) == (report.state == "live")


def test_socket_paths_used_here_fit_in_sun_path(mux_runtime_dir):
    # Guards the fixture itself: a too-long runtime dir would make every test above fail.
    probe = socket.socket(socket.AF_UNIX)
    try:
        probe.bind(str(mux_runtime_dir / "a-reasonably-long-server-name.sock"))
    finally:
        probe.close()
