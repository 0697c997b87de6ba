"""A mux server under attack: other users of the machine, and clients that misbehave.

Real servers (processes on real Unix sockets and loopback ports), real clients, and for the
attacks of another user real processes of another uid (``setpriv``, as root; skipped with
the reason elsewhere). docs/threat-model.md ("Local attackers") names each defence and its
test here. What every attack must leave standing: the server answers its owner's status
query within a second and a new watcher gets its first line.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.support.servers import (
    mux_runtime_dir,
    server_log,
    start_mux_server,
    start_mux_server_url,
    tcp_secret,
    tcp_server_log,
    wait_until,
)
from tests.support.users import (
    OTHER_UID,
    OWNER_UID,
    as_user,
    mux_as,
    other_users,
    private_dir,
    run_as,
    user_env,
)
from updater.daemon.connections import REQUEST_DEADLINE
from updater.errors import EXIT_NOT_YOURS
from updater.servers import control
from updater.servers.addresses import parse_server_address
from updater.servers.status import query_server
from updater.servers.watch import open_watch

__all__ = ["mux_runtime_dir", "other_users"]  # fixtures, imported for pytest

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="reads a server's threads and memory in /proc"
)


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


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_threads(pid: int, address: str | Path) -> int:
    """The threads of an idle server once it has had a watcher (the hub's waiting thread is
    started with the first one), after that watcher's thread ended."""
    before = threads(pid)
    first_watch_line(address)
    wait_until(lambda: threads(pid) == before + 1, what="the first watcher's thread to end")
    return before + 1


def status_command_seconds(address: str | Path) -> float:
    """`mux server status --json` itself, as a user runs it: the server must be listed live;
    how long the command took (its own start-up included: a test compares it with the same
    command's time against the server when nobody attacks it)."""
    env = {**os.environ, "MUX_SERVER_URL": str(address)} if "://" in str(address) else None
    began = time.monotonic()
    result = mux("server", "status", "--json", env=env)
    took = time.monotonic() - began
    assert result.returncode == 0, result.stderr
    servers = {s["address"]: s for s in json.loads(result.stdout)["servers"]}
    assert servers[str(address)]["state"] == "live", servers
    return took


def answers_within_a_second(address: str | Path) -> None:
    """The owner's status query: live, and within a second."""
    began = time.monotonic()
    report = query_server(str(address), timeout=1.0)
    took = time.monotonic() - began
    assert report.state == "live", (report.state, report.detail)
    assert took < 1.0, took


def first_watch_line(address: str | Path) -> dict:
    """A new watcher's first line (the server's status line), through mux's watch client."""
    stream = open_watch(str(address), timeout=5.0)
    try:
        assert stream.status.service == "mux"
        return stream.status.to_json()
    finally:
        stream.close()


def unix_client(path: Path) -> socket.socket:
    """A connection to ``path``, waiting (10 s at most) while its listen queue is full."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(10)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.connect(str(path))
            return client
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)  # the server works through its queue: try again


def read_all(client: socket.socket, timeout: float = 20.0) -> bytes:
    client.settimeout(timeout)
    received = b""
    with contextlib.suppress(OSError):
        while chunk := client.recv(65536):
            received += chunk
    return received


def stream_lines(received: bytes) -> list[dict]:
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200"), head
    return [json.loads(line) for line in body.splitlines()]


# -- 1: a watcher that hangs up before the answer ------------------------------------------


def test_watchers_that_hang_up_before_the_answer_leak_no_place(mux_runtime_dir):
    """300 clients (more than the 256 places) send GET /api/watch and hang up before the
    server has read it: each place comes back, and a new watcher is served."""
    pid, path = start_mux_server(mux_runtime_dir, "early")
    calm = max(status_command_seconds(path) for _ in range(2))  # the slower of two, unattacked
    idle = idle_threads(pid, path)
    for _round in range(3):
        os.kill(pid, signal.SIGSTOP)  # every one of them is gone before the server reads it
        try:
            for _ in range(100):
                with unix_client(path) as client:
                    client.sendall(b"GET /api/watch HTTP/1.0\r\n\r\n")
        finally:
            os.kill(pid, signal.SIGCONT)
        # Served after the 100 (connections are accepted in order), then every stream ended.
        answers_within_a_second(path)
        attacked = min(status_command_seconds(path) for _ in range(2))
        assert attacked - calm < 1.0, (attacked, calm)
        wait_until(lambda: threads(pid) <= idle, what="the server to be done with them")
    answers_within_a_second(path)
    assert first_watch_line(path)["pid"] == pid
    assert "Traceback" not in server_log(mux_runtime_dir, "early").read_text()


# -- 13: end of input from a watcher is not a hang-up --------------------------------------


def _tcp_client(url: str) -> socket.socket:
    address = parse_server_address(url)
    return socket.create_connection(("127.0.0.1", address.port), timeout=10)  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", ["unix", "tcp"])
def test_a_watcher_that_half_closes_gets_its_stream_to_the_last_line(mux_runtime_dir, kind):
    """``shutdown(SHUT_WR)`` after the request, as ``nc -N`` and ``socat`` do: the stream goes
    on, and ends with the server's last line when it stops."""
    if kind == "unix":
        _pid, path = start_mux_server(mux_runtime_dir, "halfclose")
        address: str = str(path)
        client = unix_client(path)
        request = b"GET /api/watch HTTP/1.0\r\n\r\n"
    else:
        _pid, address = start_mux_server_url(mux_runtime_dir)
        client = _tcp_client(address)
        secret = tcp_secret(address)
        request = f"GET /api/watch HTTP/1.0\r\nAuthorization: Bearer {secret}\r\n\r\n".encode()
    with client:
        client.sendall(request)
        client.shutdown(socket.SHUT_WR)
        received = b""
        while b"\n" not in received.partition(b"\r\n\r\n")[2]:
            chunk = client.recv(65536)
            assert chunk, f"the stream ended before its first line: {received!r}"
            received += chunk
        assert control.stop(address) == "stopped"
        lines = stream_lines(received + read_all(client))
    assert lines[0]["service"] == "mux"
    assert {line.get("type") for line in lines[1:-1]} <= {"heartbeat"}
    assert lines[-1]["type"] == "server-stopping", lines


def test_a_watcher_that_closes_frees_its_place_at_once_on_tcp_too(mux_runtime_dir):
    """Where end of input and a close look alike (TCP), a reader that closed entirely is
    still found gone at once: it answers the heartbeat sent at its end of input with a
    reset."""
    pid, url = start_mux_server_url(mux_runtime_dir)
    idle = idle_threads(pid, url)
    secret = tcp_secret(url)
    clients = []
    for _ in range(20):
        client = _tcp_client(url)
        client.sendall(
            f"GET /api/watch HTTP/1.0\r\nAuthorization: Bearer {secret}\r\n\r\n".encode()
        )
        clients.append(client)
    for client in clients:
        assert client.recv(65536).startswith(b"HTTP/1.0 200")
    wait_until(lambda: threads(pid) >= idle + 20, what="20 streams")
    for client in clients:
        client.close()
    wait_until(lambda: threads(pid) <= idle, timeout=5, what="every place to be freed")


# -- 6: connections, request size and time are bounded --------------------------------------


def test_slow_and_oversized_requests_hold_nothing_for_long(mux_runtime_dir):
    """100 clients drip their request a byte at a time, 60 send 64 KiB header lines: the
    server's threads and memory stay flat, it answers at once, and the drippers are cut at
    the request deadline however steadily they drip."""
    pid, path = start_mux_server(mux_runtime_dir, "crowded")
    calm = max(status_command_seconds(path) for _ in range(2))  # the slower of two, unattacked
    base_threads, base_rss = idle_threads(pid, path), rss_mib(pid)
    drippers = [unix_client(path) for _ in range(100)]
    stop = threading.Event()

    def drip() -> None:  # a byte every half second on each: no read ever waits long
        while not stop.wait(0.5):
            for client in drippers:
                with contextlib.suppress(OSError):
                    client.send(b"G")

    dripping = threading.Thread(target=drip, daemon=True)
    dripping.start()
    huge = []
    try:
        for _ in range(60):
            client = unix_client(path)
            client.settimeout(0.5)
            with contextlib.suppress(OSError):
                client.sendall(b"GET /api/status HTTP/1.0\r\nX-Pad: " + b"a" * 65536)
            huge.append(client)
        answers_within_a_second(path)
        attacked = min(status_command_seconds(path) for _ in range(2))
        assert attacked - calm < 1.0, (attacked, calm)
        assert first_watch_line(path)["pid"] == pid
        assert threads(pid) <= base_threads + 2, threads(pid)
        assert rss_mib(pid) - base_rss < 24, (base_rss, rss_mib(pid))
        # Cut at the deadline, whatever they send (EOF or a reset, for every one).
        began = time.monotonic()

        def cut(client: socket.socket) -> bool:
            client.setblocking(False)
            try:
                return client.recv(65536) == b""
            except BlockingIOError:
                return False
            except OSError:
                return True

        wait_until(
            lambda: all(cut(c) for c in drippers), timeout=REQUEST_DEADLINE + 20, what="the cut"
        )
        assert time.monotonic() - began < REQUEST_DEADLINE + 20
        answers_within_a_second(path)
    finally:
        stop.set()
        dripping.join(5)
        for client in drippers + huge:
            client.close()


def _few_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))


def test_out_of_descriptors_the_server_neither_spins_nor_stops_answering(mux_runtime_dir):
    """A server that may open 64 descriptors, and 150 clients that connect and say nothing:
    it never runs out (it closes the connections that waited longest), its loop does not
    spin, and it answers its owner within a second."""
    pid, path = start_mux_server(mux_runtime_dir, "starved", preexec_fn=_few_descriptors)
    held = []
    try:
        for _ in range(150):
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.setblocking(False)
            try:
                client.connect(str(path))
            except OSError:  # the listen queue is full: that is the point
                client.close()
                continue
            held.append(client)
        answers_within_a_second(path)  # up and serving before its CPU is counted
        # A loop that spins on a full descriptor table burns a CPU with nobody asking: its
        # CPU is counted over a window of two quiet seconds (a measurement, not a wait for
        # anything), then it must still answer.
        cpu, began = cpu_seconds(pid), time.monotonic()
        time.sleep(2.0)
        busy = (cpu_seconds(pid) - cpu) / (time.monotonic() - began)
        for _ in range(5):
            answers_within_a_second(path)
        assert first_watch_line(path)["pid"] == pid
        assert busy < 0.5, f"the server used {busy:.0%} of a CPU"
    finally:
        for client in held:
            client.close()
    log = server_log(mux_runtime_dir, "starved").read_text()
    assert "Traceback" not in log and log.count("\n") < 10, log


# -- 15: the log says what an operator needs, bounded --------------------------------------


def test_the_log_says_what_an_operator_needs_and_no_more(mux_runtime_dir):
    _pid, path = start_mux_server(mux_runtime_dir, "quiet")
    log = server_log(mux_runtime_dir, "quiet")
    before = log.read_text()
    for _ in range(100):
        assert query_server(str(path)).state == "live"
    for _ in range(50):  # clients that hang up early
        with unix_client(path) as client:
            client.sendall(b"GET /api/watch HTTP/1.0\r\n\r\n")
    for _ in range(20):  # whole 60 KiB request lines
        with unix_client(path) as client:
            with contextlib.suppress(OSError):
                client.sendall(b"GET /" + b"a" * 60000 + b" HTTP/1.0\r\n\r\n")
            read_all(client, 5)
    for _ in range(20):
        with unix_client(path) as client:
            client.sendall(b"\x16\x03\x01\x02\x00 not http\r\n\r\n")
            read_all(client, 5)
    answers_within_a_second(path)
    assert control.stop(path) == "stopped"
    added = log.read_text()[len(before) :]
    assert "Traceback" not in added
    assert "aaaa" not in added and "/api/status" not in added and "/api/watch" not in added
    lines = added.splitlines()
    assert len(lines) <= 5, lines  # a refusal, how many more, the stop
    assert all(len(line) < 1100 for line in lines)
    assert lines[-1].endswith("stopping on shutdown request")


def _fake_install(root: Path) -> tuple[Path, Path, list[Path]]:
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


def test_the_log_never_grows_past_its_limit(mux_runtime_dir, tmp_path):
    """A server whose log may hold 1024 bytes, told 14 times that the mux link moved: the
    log stays under the limit, keeps its first line and says the newest move."""
    home, bin_dir, targets = _fake_install(tmp_path)
    env = {**os.environ, "MUX_HOME": str(home), "MUX_INSTALL_DIR": str(bin_dir)}
    start_mux_server(
        mux_runtime_dir, "bounded", env=env, version="2.0.0", serve_args={"log_limit": 1024}
    )
    log = server_log(mux_runtime_dir, "bounded")
    first = log.read_text().splitlines()[0]
    assert "listening on" in first
    for n in range(1, 15):
        temp = bin_dir / f".mux.tmp-{n}"
        temp.symlink_to(targets[n % 2])
        os.replace(temp, bin_dir / "mux")
        version = f"2.{n % 2}.0"
        wait_until(
            lambda version=version: f"now points at {version} " in log.read_text().splitlines()[-1],
            what=f"move {n} in the log",
        )
        assert log.stat().st_size <= 1024
    lines = log.read_text().splitlines()
    assert lines[0] == first
    assert any("older lines were dropped" in line for line in lines)
    # The newest lines before the trim are kept too, not only what came after it.
    assert [line.rsplit(" now points at ", 1)[1] for line in lines[-2:]] == [
        "2.1.0 (protocol None)",
        "2.0.0 (protocol None)",  # move 14
    ]
    assert sum("now points at" in line for line in lines) >= 4


# -- 2: another user and a loopback server --------------------------------------------------

ATTACK = r"""
import json, socket, sys, time
port, seconds = int(sys.argv[1]), float(sys.argv[2])

def exchange(data, wait=3.0):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        try:
            s.sendall(data)
        except OSError:
            pass
        s.settimeout(wait)
        got = b""
        try:
            while chunk := s.recv(65536):
                got += chunk
        except OSError:
            pass
        return got.decode("latin-1")

host = f"Host: 127.0.0.1:{port}\r\n"
found = {
    "status": exchange(f"GET /api/status HTTP/1.0\r\n{host}\r\n".encode()),
    "watch": exchange(f"GET /api/watch HTTP/1.0\r\n{host}\r\n".encode()),
    "browser-watch": exchange(
        f"GET /api/watch HTTP/1.1\r\n{host}Sec-Fetch-Mode: no-cors\r\n"
        "Sec-Fetch-Site: cross-site\r\nAccept: */*\r\n\r\n".encode()
    ),
    "guessed": exchange(f"GET /api/status HTTP/1.0\r\n{host}Authorization: Bearer {'0' * 64}\r\n\r\n".encode()),
    "shutdown": exchange(f"POST /api/shutdown HTTP/1.0\r\n{host}Content-Length: 0\r\n\r\n".encode()),
}
print(json.dumps(found), flush=True)
line = b"GET /" + b"a" * 65536 + b" HTTP/1.0\r\n\r\n"
end, sent = time.monotonic() + seconds, 0
while time.monotonic() < end:
    exchange(line, wait=0.5)
    sent += 1
print(json.dumps({"flooded": sent}), flush=True)
"""


def test_another_user_gets_nothing_from_a_loopback_server(mux_runtime_dir, other_users):
    """Another uid asks for the status line, a watch stream (as a browser would too), a
    shutdown, and floods 64 KiB request lines for 5 s: it gets 401s and 403s, the server
    keeps answering its owner within a second, and its log stays small."""
    pid, url = start_mux_server_url(mux_runtime_dir)
    calm = max(status_command_seconds(url) for _ in range(2))  # the slower of two, unattacked
    port = url.rsplit(":", 1)[1]
    secret = tcp_secret(url)
    log = tcp_server_log(url)
    size_before = log.stat().st_size
    attacker_env = user_env(OTHER_UID, os.environ)
    attacker = subprocess.Popen(
        [*as_user(OTHER_UID), sys.executable, "-c", ATTACK, port, "5"],
        env=attacker_env,
        cwd="/",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert attacker.stdout is not None
        found = json.loads(attacker.stdout.readline() or "{}")
        assert found, attacker.stderr.read() if attacker.stderr else ""
        # The flood runs now: the owner is served all the same.
        for _ in range(3):
            answers_within_a_second(url)
        attacked = min(status_command_seconds(url) for _ in range(2))
        assert attacked - calm < 1.0, (attacked, calm)
        assert first_watch_line(url)["pid"] == pid
        flooded = json.loads(attacker.stdout.readline() or "{}")
        assert attacker.wait(60) == 0
    finally:
        if attacker.poll() is None:
            attacker.kill()
            attacker.wait()
    assert flooded["flooded"] > 10
    for what in ("status", "watch", "guessed", "shutdown"):
        assert found[what].startswith("HTTP/1.0 401 "), (what, found[what][:300])
    assert found["browser-watch"].startswith("HTTP/1.0 403 "), found["browser-watch"][:300]
    assert all('"service"' not in answer for answer in found.values())
    answers_within_a_second(url)  # the shutdown request did not stop it
    grown = log.stat().st_size - size_before
    text = log.read_text()
    assert grown < 2048, text[-3000:]
    assert secret not in text and "aaaa" not in text and "Traceback" not in text

    # mux itself, as the other user: refused, and told why; the server stays.
    status = mux_as(OTHER_UID, ["server", "status"], {**attacker_env, "MUX_SERVER_URL": url})
    assert status.returncode == 0, status.stderr
    # The kernel names the port's owner: nothing, not even a request, goes to another's.
    held = f"not your server: the port is held by uid {os.geteuid()}"
    assert f"not-yours ({held})" in status.stdout, status.stdout
    stop = mux_as(OTHER_UID, ["server", "stop", "--url", url], attacker_env)
    assert stop.returncode == EXIT_NOT_YOURS and held in stop.stderr, stop.stderr
    watch = mux_as(OTHER_UID, ["server", "watch", "--url", url], attacker_env)
    assert watch.returncode == 1 and held in watch.stderr, watch.stderr
    for result in (status, stop, watch):
        assert secret not in result.stdout + result.stderr
    answers_within_a_second(url)
    # The owner's mux, through MUX_SERVER_URL, stops it.
    owner = mux("server", "stop", "--url", url)
    assert owner.returncode == 0, owner.stderr
    assert secret not in owner.stdout + owner.stderr


def test_the_secret_is_new_for_every_server_and_gone_when_it_stops(mux_runtime_dir):
    """A listener that squats a port after its server stopped learns nothing of use: the
    secret file goes with the server, and the next server on the port has another."""
    _pid, url = start_mux_server_url(mux_runtime_dir)
    port = int(url.rsplit(":", 1)[1])
    path = mux_runtime_dir / f"tcp-{port}.secret"
    info = path.lstat()
    assert (info.st_mode & 0o777, info.st_uid) == (0o600, os.geteuid())
    first = tcp_secret(url)
    assert control.stop(url) == "stopped"
    assert not path.exists()
    started = mux("server", "start", "--url", f"http://127.0.0.1:{port}")
    assert started.returncode == 0, started.stderr
    try:
        assert tcp_secret(url) != first
        answers_within_a_second(url)
    finally:
        assert mux("server", "stop", "--url", url).returncode == 0


# -- 11: a socket folder others can write, and links where a server writes -----------------


@pytest.mark.parametrize("mode", [0o777, 0o1777])
def test_a_socket_folder_others_can_write_is_refused(other_users, mode):
    """uid 1501 plants links where uid 1500's server would write its log and lock, in a
    folder both can write (sticky or not): 1500's server refuses the folder, and 1500's files
    stay as they were."""
    base = Path(tempfile.mkdtemp(prefix="mux-shared-", dir="/tmp"))
    try:
        base.chmod(0o755)
        shared = base / "shared"
        shared.mkdir()
        shared.chmod(mode)
        owner_files = private_dir(OWNER_UID, "mux-own-")
        precious, other = owner_files / "precious.txt", owner_files / "other.txt"
        for path in (precious, other):
            path.write_text("precious\n")
            os.chown(path, OWNER_UID, OWNER_UID)
        for link, target in (("s.log", precious), ("s.sock.lock", other)):
            planted = run_as(OTHER_UID, ["ln", "-s", str(target), str(shared / link)], os.environ)
            assert planted.returncode == 0, planted.stderr
        env = user_env(OWNER_UID, os.environ)
        socket_path = shared / "s.sock"
        for args in (["start"], ["run"]):
            result = mux_as(OWNER_UID, ["server", *args, "--socket", str(socket_path)], env)
            assert precious.read_text() == other.read_text() == "precious\n", args
            assert result.returncode == 1, (args, result.stdout, result.stderr)
            assert result.stderr.count("\n") == 1, result.stderr
            assert "other users can write to it" in result.stderr, result.stderr
        assert precious.read_text() == other.read_text() == "precious\n"
        assert not socket_path.exists()
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


def test_a_link_or_a_hard_link_where_a_server_writes_is_never_followed(mux_runtime_dir):
    # Beside the runtime dir, on its file system: a hard link cannot cross to another one
    # (tmp_path may be on a RAM file system, tests/conftest.py).
    precious = mux_runtime_dir.parent / "precious.txt"
    precious.write_text("precious\n")
    (mux_runtime_dir / "linked.log").symlink_to(precious)
    os.link(precious, mux_runtime_dir / "hard.log")
    (mux_runtime_dir / "locked.sock.lock").symlink_to(precious)
    for name, said in (
        ("linked", "linked.log: it is a symbolic link"),
        ("hard", "hard.log: it has other names"),
        ("locked", "locked.sock.lock: it is a symbolic link"),
    ):
        result = mux("server", "start", "--name", name)
        assert precious.read_text() == "precious\n", name
        assert result.returncode == 1, (name, result.stdout, result.stderr)
        assert said in result.stderr, result.stderr
        assert query_server(str(mux_runtime_dir / f"{name}.sock")).state == "stale"
    assert precious.read_text() == "precious\n"


def _plant(path: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "device":
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is
    elif kind == "link-to-device":
        os.symlink("/dev/null", path)  # never followed
    elif kind == "huge":
        with path.open("wb") as handle:
            handle.truncate(1 << 30)  # sparse: large, costs no disk
    elif kind == "other-owner":
        path.write_text("someone else's\n")
        os.chown(path, OTHER_UID, OTHER_UID)
    else:
        raise AssertionError(kind)


def _needs_root(kind: str) -> None:
    if kind in ("device", "other-owner") and os.geteuid() != 0:
        pytest.skip("only root can make a device node or a file of another user's")


FILE_KINDS = ["fifo", "folder", "device", "link-to-device", "huge", "other-owner"]


@pytest.mark.parametrize("kind", [kind for kind in FILE_KINDS if kind != "huge"])
@pytest.mark.parametrize("where", ["log", "lock"])
def test_every_kind_of_file_where_a_server_writes_is_one_line(mux_runtime_dir, kind, where):
    _needs_root(kind)
    name = f"{where}-{kind}"
    _plant(mux_runtime_dir / (f"{name}.log" if where == "log" else f"{name}.sock.lock"), kind)
    began = time.monotonic()
    result = mux("server", "start", "--name", name, timeout=60)
    assert time.monotonic() - began < 30
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert "refusing to open" in result.stderr or "cannot open" in result.stderr, result.stderr
    assert query_server(str(mux_runtime_dir / f"{name}.sock")).state == "stale"


@pytest.mark.parametrize("where", ["log", "lock"])
def test_a_huge_log_or_lock_of_this_users_is_started_over(mux_runtime_dir, where):
    """A 1 GiB log or lock file (this user's own, one name): the server starts, reads none of
    it, and the log starts over."""
    name = f"{where}-huge"
    planted = mux_runtime_dir / (f"{name}.log" if where == "log" else f"{name}.sock.lock")
    _plant(planted, "huge")
    result = mux("server", "start", "--name", name, timeout=60)
    try:
        assert result.returncode == 0, (result.stdout, result.stderr)
        answers_within_a_second(mux_runtime_dir / f"{name}.sock")
        assert (mux_runtime_dir / f"{name}.log").stat().st_size < 4096
    finally:
        assert mux("server", "stop", "--name", name).returncode == 0


@pytest.mark.parametrize("kind", FILE_KINDS)
def test_every_kind_of_file_at_the_secret_is_no_secret_and_one_line(mux_runtime_dir, kind):
    """What stands at `tcp-<port>.secret` when a client reads it: it sends no secret, the
    server refuses, and the client says so in one line; no hang, no traceback."""
    _needs_root(kind)
    _pid, url = start_mux_server_url(mux_runtime_dir)
    port = int(url.rsplit(":", 1)[1])
    secret = mux_runtime_dir / f"tcp-{port}.secret"
    secret.unlink()
    _plant(secret, kind)
    began = time.monotonic()
    result = mux("server", "status", env={**os.environ, "MUX_SERVER_URL": url})
    assert time.monotonic() - began < 30
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") == 1, result.stdout
    assert "error (HTTP 401" in result.stdout and "answers only the user" in result.stdout
    assert "Traceback" not in result.stderr
