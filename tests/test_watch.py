"""``mux server watch``: real servers, real watcher processes, real updates from other processes.

The events come from what really happens: ``mux update`` moving the link (run by the
installed mux in another process, or a link swapped the way it swaps it), and the server's
background check against a loopback feed that records what it is asked.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import itertools
import json
import os
import queue
import re
import selectors
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from release.rehearsal.serve import serving
from tests.support.installs import Install, bootstrap
from tests.support.releases import Feed, make_feed, make_keypair, make_release, serve_directory
from tests.support.servers import (
    mux_runtime_dir,
    start_fake_server,
    start_mux_server,
    wait_until,
)
from tests.support.watching import Lines, RawStream, event, plugin_script, spawn, watch_start
from updater.daemon import hub as hub_module
from updater.daemon.hub import Watcher, WatchHub
from updater.servers.status import query_server

RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")  # an event's `at`

__all__ = ["mux_runtime_dir"]


@pytest.fixture(scope="module")
def feed(tmp_path_factory: pytest.TempPathFactory) -> Feed:
    return make_feed(
        tmp_path_factory.mktemp("watch"),
        versions=["1.0.0", "1.1.0", "1.2.0"],
        protocols={"1.0.0": 2, "1.1.0": 2, "1.2.0": 3},
    )


# -- helpers ---------------------------------------------------------------------------------


def update(install: Install, version: str, code: int) -> None:
    # --exit-code: 20 says the server will need a restart (a bare update exits 0 then)
    result = install.run("update", "--version", version, "--exit-code")
    assert result.returncode == code, (result.stdout, result.stderr)


# -- events after real updates ---------------------------------------------------------------


def test_watchers_see_each_event_once_and_in_order(tmp_path, sandbox_env, feed):
    with serve_directory(feed.path) as url:
        mux = bootstrap(
            tmp_path, sandbox_env, source=url, version="1.0.0", public_key=feed.keypair.public_key
        )
        assert mux.run("server", "start").returncode == 0
        address = str(Path(mux.env["XDG_RUNTIME_DIR"]) / "mux" / "default.sock")
        watchers = [spawn(mux, "server", "watch") for _ in range(3)]
        for _process, lines in watchers:
            first, entry = watch_start(lines)
            assert (first["protocol_version"], first["version"]) == (2, "1.0.0")
            assert set(first) == {
                "service",
                "protocol_version",
                "version",
                "pid",
                "started_at",
                "executable",
                "type",  # "status": the stream's first line
                "schema",
            }
            assert first["executable"] == str((mux.home / "versions" / "1.0.0" / "mux").resolve())
            assert (entry["address"], entry["state"], entry["version"]) == (
                address,
                "live",
                "1.0.0",
            )
            assert entry["executable"] == first["executable"] and "status" not in entry

        update(mux, "1.1.0", 0)
        times = set()
        for _process, lines in watchers:
            line = lines.next()
            kind, data = event(line)
            assert kind == "update-installed"
            times.add(json.loads(line or "{}").get("at"))
            assert (data["version"], data["protocol_version"], data["compatible"]) == (
                "1.1.0",
                2,
                True,
            )
            assert data["restart_command"] == f"mux server restart --socket {address}"
        # One event, one time (when the server published it), the same for every watcher.
        [at] = times
        assert at is not None and RFC3339.fullmatch(at), times
        update(mux, "1.2.0", 20)
        # A watcher that connects now gets what is in force: the link's version, the restart.
        late, late_lines = spawn(mux, "server", "watch")
        assert watch_start(late_lines)[0]["version"] == "1.0.0"
        assert [event(late_lines.next())[0] for _ in range(2)] == [
            "update-installed",
            "restart-needed",
        ]
        watchers.append((late, late_lines))

        assert mux.run("server", "stop").returncode == 0
        for process, lines in watchers:
            rest = [event(line) for line in lines.rest()]
            if process is not late:
                assert [kind for kind, _ in rest] == [
                    "update-installed",
                    "restart-needed",
                    "server-stopping",
                ]
                installed, restart = rest[0][1], rest[1][1]
                assert (installed["version"], installed["compatible"]) == ("1.2.0", False)
                assert (restart["protocol_version"], restart["server_protocol_version"]) == (3, 2)
                assert restart["restart_command"] == f"mux server restart --socket {address}"
            else:
                assert [kind for kind, _ in rest] == ["server-stopping"]
            assert rest[-1][1]["reason"] == "the server is stopping (shutdown request)"
            assert process.wait(10) == 0  # a clean end
            assert process.stderr is not None and process.stderr.read() == ""


# -- the background check --------------------------------------------------------------------


class RecordingFeed:
    """A feed folder on 127.0.0.1 that records each request (time, path, status, validators)
    and can go away and come back on the same port."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.requests: list[dict[str, Any]] = []
        self.port = 0
        self._server: ExitStack | None = None  # the running server, closed by stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        requests = self.requests

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def send_response(self, code: int, message: str | None = None) -> None:
                requests.append(
                    {
                        "at": time.monotonic(),
                        "path": self.path,
                        "status": code,
                        "if_modified_since": self.headers.get("If-Modified-Since"),
                    }
                )
                super().send_response(code, message)

        handler = functools.partial(Handler, directory=str(self.path))
        self._server = ExitStack()
        self.port = self._server.enter_context(serving(handler, port=self.port)).server_address[1]

    def stop(self) -> None:
        assert self._server is not None
        self._server.close()

    def since(self, index: int, path: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.requests[index:] if path is None or r["path"] == path]


@pytest.fixture
def recording(feed: Feed) -> Iterator[RecordingFeed]:
    recorder = RecordingFeed(feed.path)
    recorder.start()
    try:
        yield recorder
    finally:
        with contextlib.suppress(AssertionError, OSError):
            recorder.stop()


@pytest.mark.slow
def test_the_background_check_runs_on_schedule_and_survives_the_feed_going_away(
    tmp_path, sandbox_env, feed, recording
):
    mux = bootstrap(
        tmp_path,
        sandbox_env,
        source=recording.url,
        version="1.0.0",
        public_key=feed.keypair.public_key,
    )
    mux.env["MUX_UPDATE_CHECK_INTERVAL"] = "1"
    mark = len(recording.requests)
    assert mux.run("server", "start").returncode == 0
    log = Path(mux.env["XDG_RUNTIME_DIR"]) / "mux" / "default.log"
    watcher, lines = spawn(mux, "server", "watch")
    assert watch_start(lines)[0]["version"] == "1.0.0"
    kind, data = event(lines.next())
    assert (kind, data["version"], data["tag"]) == ("update-available", "1.2.0", "v1.2.0")

    wait_until(lambda: len(recording.since(mark, "/releases.json")) >= 4, what="four checks")
    index = recording.since(mark, "/releases.json")
    gaps = [b["at"] - a["at"] for a, b in itertools.pairwise(index)]
    assert all(1.0 <= gap < 5.0 for gap in gaps), gaps  # every interval, with jitter
    # Conditional requests: the unchanged index costs a 304; a known release is not fetched
    # again; no archive is ever downloaded by a check.
    assert all(r["if_modified_since"] and r["status"] == 304 for r in index[1:]), index
    server_requests = recording.since(mark)
    assert [r["path"] for r in server_requests if r["path"].endswith("manifest.json")] == [
        "/v1.2.0/manifest.json"
    ]
    assert not [r for r in server_requests if r["path"].endswith(".tar.gz")]

    # The feed goes away: checks fail (and say so in the log), the server does not care.
    recording.stop()
    failures = log.read_text().count("background check failed")
    wait_until(
        lambda: log.read_text().count("background check failed") >= failures + 2,
        what="two failed checks",
    )
    began = time.monotonic()
    report = query_server(str(Path(mux.env["XDG_RUNTIME_DIR"]) / "mux" / "default.sock"))
    assert report.state == "live" and time.monotonic() - began < 0.5
    # It comes back: the next check finds the same release, and says nothing new.
    recording.start()
    back = len(recording.requests)
    wait_until(lambda: recording.since(back, "/releases.json"), what="a check after the return")
    began = time.monotonic()
    assert mux.run("server", "stop").returncode == 0
    assert time.monotonic() - began < 5.0
    rest = [event(line)[0] for line in lines.rest()]
    assert rest == ["server-stopping"], rest  # update-available was said once, not per check
    assert watcher.wait(10) == 0


@pytest.mark.slow
def test_a_check_by_either_counts_for_both(tmp_path, sandbox_env, feed, recording):
    mux = bootstrap(
        tmp_path,
        sandbox_env,
        source=recording.url,
        version="1.0.0",
        public_key=feed.keypair.public_key,
    )
    checked = mux.run("update", "--check", "--json")
    assert checked.returncode == 10 and json.loads(checked.stdout)["cached"] is False
    mux.env["MUX_UPDATE_CHECK_INTERVAL"] = "30"
    mark = len(recording.requests)
    assert mux.run("server", "start").returncode == 0
    log = Path(mux.env["XDG_RUNTIME_DIR"]) / "mux" / "default.log"
    wait_until(
        lambda: "background check (cached): latest v1.2.0" in log.read_text(), what="a check"
    )
    assert recording.since(mark) == []  # the user's check answered the server's
    assert mux.run("server", "stop").returncode == 0


@pytest.mark.slow
def test_a_server_answers_its_own_checks_answer_to_a_sidebar(
    tmp_path, sandbox_env, feed, recording
):
    mux = bootstrap(
        tmp_path,
        sandbox_env,
        source=recording.url,
        version="1.0.0",
        public_key=feed.keypair.public_key,
    )
    mux.env["MUX_UPDATE_CHECK_INTERVAL"] = "30"
    assert mux.run("server", "start").returncode == 0
    log = Path(mux.env["XDG_RUNTIME_DIR"]) / "mux" / "default.log"
    wait_until(lambda: "background check: latest v1.2.0" in log.read_text(), what="a check")
    mark = len(recording.requests)
    sidebar = mux.run("update", "--check", "--json", "--max-age", "15m")
    assert sidebar.returncode == 10 and json.loads(sidebar.stdout)["cached"] is True
    assert recording.since(mark) == []
    assert mux.run("server", "stop").returncode == 0


def test_the_policy_or_interval_0_turns_the_background_check_off(sandbox_env, mux_runtime_dir):
    env = {**os.environ, **sandbox_env, "MUX_UPDATE_CHECK_INTERVAL": "0"}
    start_mux_server(mux_runtime_dir, "quiet", env=env)
    from tests.support.servers import server_log

    text = server_log(mux_runtime_dir, "quiet").read_text()
    assert "background update checks are off (interval 0)" in text


# -- the plugin of docs/scripting.md ---------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("shell", ["dash", "sh", "busybox"])
def test_the_documented_plugin_runs(tmp_path, sandbox_env, feed, recording, shell):
    command = [shell] if shell != "busybox" else ["busybox", "sh"]
    if shutil.which(command[0]) is None:
        pytest.skip(f"{command[0]} is not installed")
    plugin = tmp_path / "mux-notify"
    plugin.write_text(plugin_script())
    mux = bootstrap(
        tmp_path,
        sandbox_env,
        source=recording.url,
        version="1.0.0",
        public_key=feed.keypair.public_key,
    )
    mux.env["MUX_UPDATE_CHECK_INTERVAL"] = "1"
    mux.env["PATH"] = f"{mux.bin_dir}{os.pathsep}{mux.env['PATH']}"
    assert mux.run("server", "start").returncode == 0
    process = subprocess.Popen(
        [*command, str(plugin)],
        env=mux.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = Lines(process)
    assert lines.next() == "watching mux 1.0.0"
    assert lines.next() == "mux 1.2.0 is available: mux update"
    update(mux, "1.1.0", 0)
    assert lines.next() == "mux 1.1.0 is installed"
    update(mux, "1.2.0", 20)
    assert lines.next() == "mux 1.2.0 is installed"
    address = Path(mux.env["XDG_RUNTIME_DIR"]) / "mux" / "default.sock"
    assert lines.next() == f"restart when convenient: mux server restart --socket {address}"
    # The command it printed: the plugin's stream ends cleanly with the old server.
    assert mux.run("server", "restart", "--socket", str(address)).returncode == 0
    assert lines.rest() == []
    assert process.wait(10) == 0
    assert process.stderr is not None and process.stderr.read() == ""  # written for protocol 2

    # Against the new server (protocol 3), the plugin says it was written for another one.
    again = subprocess.Popen(
        [*command, str(plugin)],
        env=mux.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert Lines(again).next() == "watching mux 1.2.0"  # it read the status line
    assert mux.run("server", "stop").returncode == 0
    assert again.wait(10) == 0
    assert again.stderr is not None
    assert (
        "mux-notify: the server speaks protocol 3, this plugin was written for protocol 2"
        in again.stderr.read()
    )


# -- bounded and fair ------------------------------------------------------------------------


def _fake_install(root: Path) -> tuple[Path, Path, list[Path]]:
    """An install layout with two versions to swap the link between, as mux update does."""
    home, bin_dir = root / "home", root / "bin"
    targets = []
    for version in ("2.0.0", "2.1.0"):
        folder = home / "versions" / version
        folder.mkdir(parents=True)
        (folder / "mux").write_text("#!/bin/sh\n")
        targets.append(folder / "mux")
    bin_dir.mkdir()
    (bin_dir / "mux").symlink_to(targets[0])
    return home, bin_dir, targets


def _swap(bin_dir: Path, target: Path, n: int) -> None:
    temp = bin_dir / f".mux.tmp-test-{n}"
    temp.symlink_to(target)
    os.replace(temp, bin_dir / "mux")


class RawWatcher:
    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(str(path))
        self.sock.sendall(b"GET /api/watch HTTP/1.0\r\n\r\n")
        self.buffer = b""
        self.lines: list[bytes] = []
        self.head_done = False

    def feed(self, data: bytes) -> None:
        self.buffer += data
        if not self.head_done and b"\r\n\r\n" in self.buffer:
            head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            assert head.startswith(b"HTTP/1.0 200"), head
            self.head_done = True
        while self.head_done and b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            self.lines.append(line)


def test_100_watchers_and_one_that_stops_reading(mux_runtime_dir, tmp_path):
    home, bin_dir, targets = _fake_install(tmp_path)
    # The link is polled 50 times a second: 200 moves, each seen as soon as it is made.
    env = {
        **os.environ,
        "MUX_HOME": str(home),
        "MUX_INSTALL_DIR": str(bin_dir),
        "MUX_LINK_POLL": "0.02",
    }
    # The server runs the link's version: no event is in force when the watchers connect.
    _pid, path = start_mux_server(mux_runtime_dir, "busy", env=env, version="2.0.0")
    fast = [RawWatcher(path) for _ in range(100)]
    slow = RawWatcher(path)  # connects, then reads nothing
    selector = selectors.DefaultSelector()
    for watcher in fast:
        watcher.sock.setblocking(False)
        selector.register(watcher.sock, selectors.EVENT_READ, watcher)

    def pump_until(count: int, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while any(len(w.lines) < count for w in fast):
            if time.monotonic() > deadline:
                behind = min(len(w.lines) for w in fast)
                raise AssertionError(f"a fast watcher has {behind} of {count} lines")
            for key, _ in selector.select(0.5):
                data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                assert data, "the server closed a fast watcher"
                key.data.feed(data)

    pump_until(1)  # every first line
    events = 200
    slowest_status = 0.0
    for n in range(1, events + 1):
        _swap(bin_dir, targets[n % 2], n)
        pump_until(1 + n)
        if n % 20 == 0:
            began = time.monotonic()
            assert query_server(str(path)).state == "live"
            slowest_status = max(slowest_status, time.monotonic() - began)
    assert slowest_status < 0.5, f"a status query took {slowest_status:.2f}s"
    expected = [f"2.{n % 2}.0" for n in range(1, events + 1)]
    for watcher in fast:
        seen = [json.loads(line)["data"]["version"] for line in watcher.lines[1:]]
        assert seen == expected  # each event once, in order, for every fast watcher

    # The slow one reads now: what was in flight, then why it was dropped, then the end.
    slow.sock.settimeout(40)
    while data := slow.sock.recv(65536):
        slow.feed(data)
    docs = [json.loads(line) for line in slow.lines]
    assert docs[0]["service"] == "mux"
    got = [d["data"]["version"] for d in docs[1:-1]]
    assert got == expected[: len(got)] and len(got) < events
    assert docs[-1]["type"] == "watch-dropped"
    assert "fell behind" in docs[-1]["data"]["reason"]
    for watcher in fast:
        watcher.sock.close()


def test_watch_needs_a_server_with_a_watch_endpoint(mux_runtime_dir):
    start_fake_server("old-mux", mux_runtime_dir / "old.sock")
    result = subprocess.run(
        [sys.executable, "-m", "updater", "server", "watch", "--name", "old"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.count("\n") == 1
    assert "(mux 0.9.0, protocol 1) has no watch endpoint" in result.stderr
    assert f"mux server restart --socket {mux_runtime_dir / 'old.sock'}" in result.stderr
    nobody = subprocess.run(
        [sys.executable, "-m", "updater", "server", "watch", "--name", "none"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert nobody.returncode == 1 and "no mux server runs on" in nobody.stderr


def _raw_stream(*lines: bytes) -> bytes:
    status = b'{"service": "mux", "protocol_version": 2, "version": "2.0.0", "pid": 1}'
    return b"HTTP/1.0 200 OK\r\n\r\n" + status + b"\n" + b"".join(line + b"\n" for line in lines)


@pytest.mark.parametrize(
    ("events", "code", "stdout_has", "stderr_has"),
    [
        # Escaped on the way out: the terminal never gets a raw escape sequence.
        (
            [
                b'{"type": "update-available", "data": {"tag": "\\u001b[31mred"}}',
                b'{"type": "server-stopping", "data": {}}',
            ],
            0,
            "\\u001b[31mred",
            "",
        ),
        # An event type the client does not know is passed on (readers skip it).
        (
            [b'{"type": "from-the-future", "data": {"x": 1}}'],
            1,
            '"from-the-future"',
            "without saying why",
        ),
        ([b"not json"], 1, "", "not an event"),
        ([b'{"type": "x", "data": "' + b"a" * 70000 + b'"}'], 1, "", "longer than 64 KiB"),
    ],
)
def test_what_a_server_streams_is_checked_and_escaped(
    mux_runtime_dir, events, code, stdout_has, stderr_has
):
    start_fake_server("raw", mux_runtime_dir / "raw.sock", payload=_raw_stream(*events))
    result = subprocess.run(
        [sys.executable, "-m", "updater", "server", "watch", "--name", "raw"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == code, result.stderr
    assert "\x1b" not in result.stdout
    assert stdout_has in result.stdout
    assert stderr_has in result.stderr
    assert "Traceback" not in result.stderr
    first = json.loads(result.stdout.splitlines()[0])
    assert first["version"] == "2.0.0"
    # An older server's first line says neither: typed here, as schema 1 (no event times).
    assert (first["type"], first["schema"]) == ("status", 1)


def test_the_hub_never_blocks_a_publisher() -> None:
    """Unit level: a watcher whose queue is full is dropped at once, without waiting."""
    hub = WatchHub(queue_limit=3)
    from updater.protocol import WatchEvent

    waiting = Watcher()
    hub._watchers.add(waiting)  # registered, never reading
    began = time.monotonic()
    for n in range(10):
        hub.publish(WatchEvent("update-installed", {"n": n}))
    assert time.monotonic() - began < 0.1
    assert waiting.final is not None and b"fell behind" in waiting.final
    assert list(waiting.lines) == []
    assert [e.data["n"] for e in hub.in_force()] == [9]


def test_the_link_watch_notices_a_move_within_two_seconds(tmp_path):
    """The one way a released build notices (a one-second poll: it ships no ctypes for
    inotify), in-process."""
    from updater.daemon.linkwatch import POLL_SECONDS, LinkWatch

    _home, bin_dir, targets = _fake_install(tmp_path)
    seen: queue.Queue[str | None] = queue.Queue()
    watcher = LinkWatch(bin_dir / "mux", seen.put)
    watcher.start()
    try:
        for n in (1, 2, 3):
            moved = time.monotonic()
            _swap(bin_dir, targets[n % 2], n)
            assert seen.get(timeout=5) == str(targets[n % 2])
            assert time.monotonic() - moved < 2.0
        assert POLL_SECONDS <= 1.0
        (bin_dir / "mux").unlink()  # an uninstall: the link is gone
        assert seen.get(timeout=5) is None
    finally:
        watcher.stop()


def test_the_machine_policy_disabled_means_no_background_check(tmp_path):
    """The policy's ``updates = "disabled"`` reaches the server through Settings: the
    schedule runs (the policy may allow checks later), and asks before each check."""
    from updater.config.settings import Settings
    from updater.daemon.notices import ServerNotices

    logged: list[str] = []
    ran: list[str] = []
    for updates, expect_check in (("disabled", False), ("check-only", True), ("enabled", True)):
        logged.clear()
        notices = ServerNotices(
            WatchHub(),
            server_version="1.0.0",
            server_protocol=2,
            restart_command="R",
            settings=Settings(
                home=str(tmp_path / "none"), update_check_interval=3600, updates=updates
            ),
            development=True,
            check_command=lambda: ran.append("x") or ["true"],
            log=logged.append,
        )
        notices.start()
        try:
            assert notices._check is not None
            assert notices._check_allowed() == expect_check, updates
            off = "background update checks are off (the machine policy disables updates)"
            assert (off in logged) == (not expect_check)
        finally:
            notices.stop()
    assert ran == []  # an hour away: nothing ran


@pytest.mark.parametrize("interval", [0.5, 1.0, 60.0, 6 * 3600.0, 30 * 86400.0])
def test_the_schedule_never_asks_before_the_cache_expired(interval):
    from updater.daemon.background import first_delay, next_delay

    for draw in (0.0, 0.3, 0.999999):
        delay = next_delay(interval, rng=lambda draw=draw: draw)
        assert interval <= delay <= interval + min(interval / 10, 1800)
        first = first_delay(interval, rng=lambda draw=draw: draw)
        assert 0 < first <= min(interval, 30) / 2


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_hanging_check_never_blocks_status_or_shutdown(tmp_path, sandbox_env, feed):
    """A feed that takes the connection and never answers: the check hangs in its child, the
    server answers at once, and stops at once, taking the child with it."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # never accepted: connections complete, no answer ever comes
    try:
        with serve_directory(feed.path) as url:
            mux = bootstrap(
                tmp_path,
                sandbox_env,
                source=url,
                version="1.0.0",
                public_key=feed.keypair.public_key,
            )
        mux.env.update(
            MUX_UPDATE_SOURCE=f"http://127.0.0.1:{silent.getsockname()[1]}",
            MUX_UPDATE_CHECK_INTERVAL="1",
            MUX_HTTP_TIMEOUT="60",
        )
        assert mux.run("server", "start").returncode == 0
        path = Path(mux.env["XDG_RUNTIME_DIR"]) / "mux" / "default.sock"
        pid = query_server(str(path)).pid
        assert pid is not None
        wait_until(lambda: _children(pid), what="the background check's child")
        [child] = _children(pid)
        began = time.monotonic()
        assert query_server(str(path)).state == "live"
        assert time.monotonic() - began < 0.5
        began = time.monotonic()
        assert mux.run("server", "stop").returncode == 0
        assert time.monotonic() - began < 5.0
        wait_until(lambda: not Path(f"/proc/{child}").exists(), timeout=5, what="the child to go")
    finally:
        silent.close()


# -- review-11 F4, F6, F8, F11 ---------------------------------------------------------------


def test_a_rollback_to_a_compatible_version_withdraws_restart_needed(tmp_path, sandbox_env, feed):
    """1.0.0's server, the link to 1.1.0 (same protocol), 1.2.0 (another: restart-needed),
    then back to 1.1.0: a watcher that connects now hears only that 1.1.0 is installed."""
    with serve_directory(feed.path) as url:
        mux = bootstrap(
            tmp_path, sandbox_env, source=url, version="1.0.0", public_key=feed.keypair.public_key
        )
        assert mux.run("server", "start").returncode == 0
        early, lines = spawn(mux, "server", "watch")
        assert watch_start(lines)[0]["version"] == "1.0.0"
        update(mux, "1.1.0", 0)
        update(mux, "1.2.0", 20)
        rolled = mux.run("update", "--rollback")
        assert rolled.returncode == 0, (rolled.stdout, rolled.stderr)
        seen = [event(lines.next()) for _ in range(4)]
        assert [(kind, data.get("version")) for kind, data in seen] == [
            ("update-installed", "1.1.0"),
            ("update-installed", "1.2.0"),
            ("restart-needed", "1.2.0"),
            ("update-installed", "1.1.0"),
        ]
        late, late_lines = spawn(mux, "server", "watch")
        first, entry = watch_start(late_lines)
        assert (first["version"], entry["restart_needed"]) == ("1.0.0", False)
        kind, data = event(late_lines.next())
        assert (kind, data["version"], data["compatible"]) == ("update-installed", "1.1.0", True)
        assert mux.run("server", "stop").returncode == 0
        assert [event(line)[0] for line in late_lines.rest()] == ["server-stopping"]
        assert [event(line)[0] for line in lines.rest()] == ["server-stopping"]
        assert late.wait(10) == 0 and early.wait(10) == 0


def test_an_answer_counts_only_for_the_build_that_checked(tmp_path, sandbox_env, feed, recording):
    """A server's background check runs its own (older) build: its answer is not served as
    fresh to the installed mux, which checks with its own code and keys."""
    mux = bootstrap(
        tmp_path,
        sandbox_env,
        source=recording.url,
        version="1.0.0",
        public_key=feed.keypair.public_key,
    )
    update(mux, "1.1.0", 0)
    old_build = mux.home / "versions" / "1.0.0" / "mux"
    by_old = subprocess.run(
        [str(old_build), "server", "check-updates", "--current", "1.1.0", "--max-age", "3600"],
        env=mux.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert by_old.returncode == 0, by_old.stderr
    answer = json.loads(by_old.stdout)
    assert (answer["ok"], answer["cached"], answer["checked_by"]["version"]) == (
        True,
        False,
        "1.0.0",
    )
    mark = len(recording.requests)
    mine = mux.run("update", "--check", "--json", "--max-age", "1h")
    assert mine.returncode == 10 and json.loads(mine.stdout)["cached"] is False
    assert recording.since(mark, "/releases.json")  # asked the feed itself
    again = mux.run("update", "--check", "--json", "--max-age", "1h")
    assert again.returncode == 10 and json.loads(again.stdout)["cached"] is True


def _hub_stream(hub: WatchHub) -> tuple[socket.socket, threading.Thread | None]:
    """One watcher on ``hub`` over a real socket pair: (the reader's end, the stream's thread,
    None when the hub refused it)."""
    reader, server_side = socket.socketpair()
    watcher = hub.admit({"service": "mux"})
    if watcher is None:
        server_side.close()
        return reader, None
    thread = threading.Thread(target=hub.stream, args=(server_side, watcher, b""), daemon=True)
    thread.start()
    return reader, thread


def test_a_watcher_that_hangs_up_frees_its_place_at_once():
    hub = WatchHub(max_watchers=1)
    try:
        reader, thread = _hub_stream(hub)
        assert thread is not None
        reader.settimeout(5)
        assert reader.recv(4096).startswith(b'{"schema": 2, "service"')
        _other, refused = _hub_stream(hub)
        assert refused is None  # the one place is taken
        reader.close()
        # Gone at once, not at the next heartbeat (15 s) or event.
        wait_until(lambda: hub.watcher_count == 0, timeout=5, what="the place to be freed")
        thread.join(5)
        assert not thread.is_alive()
        again, taken = _hub_stream(hub)
        assert taken is not None
        again.close()
    finally:
        hub.close("the test is over")


def test_an_idle_stream_sends_heartbeats_that_the_client_skips(monkeypatch):
    monkeypatch.setattr(hub_module, "HEARTBEAT", 0.2)
    hub = WatchHub()
    try:
        reader, _thread = _hub_stream(hub)
        reader.settimeout(10)
        received = b""
        while received.count(b"\n") < 3:
            chunk = reader.recv(4096)
            assert chunk, "the stream ended"
            received += chunk
        lines = [json.loads(line) for line in received.splitlines()[:3]]
        assert lines[0] == {"service": "mux", "type": "status", "schema": 2}
        assert [line["type"] for line in lines[1:]] == ["heartbeat", "heartbeat"]
        assert all(RFC3339.fullmatch(line["at"]) for line in lines[1:]), lines
        reader.close()
    finally:
        hub.close("the test is over")


def test_watch_gives_up_on_a_server_that_hangs_mid_stream(mux_runtime_dir):
    import signal

    pid, path = start_mux_server(mux_runtime_dir, "freezes")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "updater",
            "server",
            "watch",
            "--socket",
            str(path),
            "--read-timeout",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = Lines(process)
    assert watch_start(lines)[1]["state"] == "live"
    os.kill(pid, signal.SIGSTOP)
    try:
        assert process.wait(30) == 1
        assert process.stderr is not None
        err = process.stderr.read()
        assert err.count("\n") == 1 and "no line from the server for 1s: it may be hung" in err
    finally:
        os.kill(pid, signal.SIGCONT)


def test_the_check_child_s_output_is_bounded_as_it_is_read(tmp_path):
    from updater.childio import OutputTooLarge, read_bounded

    flood = subprocess.Popen(
        [sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('x' * 65536)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    with pytest.raises(OutputTooLarge):
        read_bounded(flood, 64 * 1024, time.monotonic() + 60)
    assert flood.poll() is not None  # killed, and reaped
    noisy = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nsys.stderr.write('e' * 300000)\nsys.stdout.write('{}')",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = read_bounded(noisy, 1024, time.monotonic() + 60)
    assert (out, err) == (b"{}", b"e" * 1024)
    assert noisy.returncode == 0
    stuck = subprocess.Popen(
        [sys.executable, "-c", "import time\ntime.sleep(600)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    with pytest.raises(subprocess.TimeoutExpired):
        read_bounded(stuck, 1024, time.monotonic() + 0.5)
    assert stuck.poll() is not None


@pytest.mark.parametrize(
    ("source", "asked", "used"),
    [
        ("https://feed.example", 0.01, 60.0),
        ("github", 5, 60.0),
        ("https://feed.example", 3600, 3600),
        ("http://127.0.0.1:8080", 0.01, 1.0),
        ("/srv/mirror", 0.5, 1.0),
        ("http://127.0.0.1:8080", 2, 2),
        ("https://feed.example", 0, 0.0),
    ],
)
def test_the_check_interval_has_a_floor(source, asked, used):
    from types import SimpleNamespace

    from updater.daemon.background import check_interval

    heard: list[str] = []
    settings = SimpleNamespace(update_check_interval=asked, source=source)
    assert check_interval(settings, heard.append) == used  # type: ignore[arg-type]
    assert bool(heard) == (0 < asked < used)


# -- issue 24: the policy as it changes, and the first line ----------------------------------


def test_a_running_server_follows_the_machine_policy_as_it_changes(tmp_path, sandbox_env):
    """The policy switched to check-only, then disabled, then enabled again while a server
    runs: its watchers are told what installs the update as the policy now says (and, once
    it disables updates, that the update no longer holds), a new watcher gets only what the
    policy allows, and no check child runs while it disables updates."""
    policy = tmp_path / "root" / "etc" / "mux" / "policy.toml"
    policy.parent.mkdir(parents=True)
    keypair = make_keypair(tmp_path / "keys")
    feed_dir = tmp_path / "feed"
    now = int(time.time())
    for number, version in enumerate(("1.0.0", "1.1.0")):
        make_release(
            feed_dir,
            version,
            protocol_version=2,
            keypair=keypair,
            build={"policy_file": str(policy)},  # what the installed build reads
            signed_at=now - 3600 * (2 - number),
        )
    recording = RecordingFeed(feed_dir)
    recording.start()

    def set_policy(updates: str) -> None:
        temporary = policy.with_name(".policy.toml.tmp")
        temporary.write_text(f'updates = "{updates}"\n')
        temporary.chmod(0o644)
        os.replace(temporary, policy)

    try:
        mux = bootstrap(
            tmp_path, sandbox_env, source=recording.url, version="1.0.0",
            public_key=keypair.public_key,
        )  # fmt: skip
        mux.env["MUX_UPDATE_CHECK_INTERVAL"] = "1"
        assert mux.run("server", "start").returncode == 0
        path = Path(mux.env["XDG_RUNTIME_DIR"]) / "mux" / "default.sock"
        log = path.with_name("default.log")
        watcher = RawStream(path)
        assert watcher.next() is not None  # the status line
        kind, data = watcher.next_event()
        assert (kind, data["version"], data["install_command"]) == (
            "update-available",
            "1.1.0",
            "mux update",
        )

        set_policy("check-only")
        # Said again to the watcher as the policy now has it: no command, the policy manages.
        kind, data = watcher.next_event()
        assert (kind, data["install_command"], data["managed_by"]["kind"]) == (
            "update-available",
            None,
            "policy",
        )
        late = RawStream(path)
        assert late.next() is not None
        kind, data = late.next_event()
        assert (kind, data["install_command"]) == ("update-available", None)
        late.sock.close()

        set_policy("disabled")
        # The watcher that was told of 1.1.0 is told it no longer holds, once.
        kind, data = watcher.next_event()
        assert (kind, data["version"], data["reason"]) == (
            "update-retracted",
            "1.1.0",
            "the machine policy disables updates",
        )
        wait_until(lambda: 'now sets updates = "disabled"' in log.read_text(), what="the change")
        wait_until(lambda: "background check skipped" in log.read_text(), what="a skipped check")
        asked = len(recording.since(0, "/releases.json"))
        answered = log.read_text().count("background check: ") + log.read_text().count(
            "background check (cached)"
        )
        # A new watcher gets nothing in force: its first line after the status line is the
        # heartbeat, 15 s of the server's own time later, in which a dozen checks would have run.
        quiet = RawStream(path)
        assert quiet.next() is not None
        heartbeat = quiet.next(30)
        assert heartbeat is not None and RFC3339.fullmatch(heartbeat.pop("at")), heartbeat
        assert heartbeat == {"type": "heartbeat", "data": {"interval": 15.0}}
        assert len(recording.since(0, "/releases.json")) == asked
        assert (
            log.read_text().count("background check: ")
            + log.read_text().count("background check (cached)")
            == answered
        )

        set_policy("enabled")
        kind, data = watcher.next_event()  # the next check, allowed again
        assert (kind, data["install_command"]) == ("update-available", "mux update")
        assert quiet.next_event()[0] == "update-available"
        assert mux.run("server", "stop").returncode == 0
        assert watcher.next_event()[0] == quiet.next_event()[0] == "server-stopping"
    finally:
        with contextlib.suppress(AssertionError, OSError):
            recording.stop()


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
def test_the_first_line_is_the_status_line_a_plugin_checks(mux_runtime_dir):
    """A plugin written for the status-line contract checks `.service == "mux"` on the first
    line (jq here, as such plugins do): it is the server's status line itself, exactly what
    GET /api/status answers; the server's entry follows as an event."""
    from updater.servers.addresses import UnixAddress
    from updater.servers.wire import http_request

    _pid, path = start_mux_server(mux_runtime_dir, "plugin")
    process = subprocess.Popen(
        [sys.executable, "-m", "updater", "server", "watch", "--socket", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = Lines(process)
    first = lines.next()
    assert first is not None
    checked = subprocess.run(
        ["jq", "-e", '.service == "mux" and (.protocol_version | type) == "number"'],
        input=first,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert checked.returncode == 0, (first, checked.stdout, checked.stderr)
    _code, body = http_request(UnixAddress(str(path)), "GET", "/api/status", timeout=5)
    # The status line itself, typed as the stream's first line, with the stream's schema.
    assert json.loads(first) == {**json.loads(body), "type": "status", "schema": 2}
    kind, entry = event(lines.next())
    assert (kind, entry["address"], entry["state"]) == ("server", str(path), "live")
    assert entry["pid"] == json.loads(first)["pid"] and "status" not in entry
    process.terminate()
    process.wait(10)
