"""How a loopback server and its client prove themselves to each other.

In-process: the kernel's tables as read (:mod:`updater.servers.owner`, sockets of this
process), and the server's answer to each kind of credential (``_Service.respond``, fed
requests). One real server process for the path where the kernel does not name a port's
owner (macOS): the client then sends no secret and believes only a server that proves it.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.servers import mux_runtime_dir, start_mux_server_url
from updater.daemon.connections import Connections, Reply, Request
from updater.daemon.hub import WatchHub
from updater.daemon.server import _Service, _Stopper
from updater.daemon.serverlog import ServerLog
from updater.servers import owner
from updater.servers.proof import (
    AUTHORIZATION,
    CHALLENGE_HEADER,
    CLIENT_LABEL,
    PROOF_HEADER,
    PROOF_SCHEME,
    SERVER_LABEL,
    proof_mac,
)
from updater.servers.runtime import tcp_secret_path
from updater.servers.status import query_server

__all__ = ["mux_runtime_dir"]  # a fixture, imported for pytest

SECRET = "ab" * 32
NONCE = "0123456789abcdef" * 2

linux_only = pytest.mark.skipif(
    not os.path.exists("/proc/net/tcp"), reason="the kernel's socket tables are Linux's"
)


# -- the kernel's tables --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode",
            None,
        ),
        (
            "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1501        0 4242 1 0",
            owner.Entry(("0100007F", 8080), ("00000000", 0), "0A", 1501, 4242),
        ),
        (
            "   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 0 1 0",
            owner.Entry(("0100007F", 8080), ("0100007F", 50000), "01", 0, 0),
        ),
        ("   2: 0100007F:zz 00000000:0000 0A 0 0 0 1501 0 1", None),
        ("garbage", None),
    ],
)
def test_a_table_line_is_read_or_skipped(line: str, expected: owner.Entry | None) -> None:
    assert owner.parse_entry(line) == expected


def test_listeners_and_describe_as_pure_rules() -> None:
    entries = [
        owner.Entry(("0100007F", 80), ("00000000", 0), "0A", 1501, 7),
        owner.Entry(("00000000", 80), ("00000000", 0), "0A", 1502, 8),  # the wildcard
        owner.Entry(("0100007F", 81), ("00000000", 0), "0A", 1503, 9),  # another port
        owner.Entry(("0100007F", 80), ("0100007F", 5), "01", 1501, 0),  # a connection
    ]
    found = owner.listening_on(entries, {"0100007F", "00000000"}, 80)
    assert [entry.uid for entry in found] == [1501, 1502]
    holders = [owner.Listener(1501, 7, (42, 43)), owner.Listener(1502, 8, ())]
    assert owner.describe(holders) == "uid 1501 (pid 42, 43); uid 1502"


@pytest.mark.parametrize(
    ("state", "uid", "expected"),
    [
        ("01", 1501, 1501),  # established, accepted or still queued: its listener's owner
        ("03", 1501, 1501),  # half-open
        ("05", 0, None),  # FIN_WAIT2: the server closed it; the kernel keeps it for no one
        ("06", 0, None),  # TIME_WAIT
        ("08", 1501, None),  # CLOSE_WAIT
    ],
)
def test_only_a_live_connection_names_its_listeners_owner(
    state: str, uid: int, expected: int | None
) -> None:
    """A flood that makes the user's server close connections must not make it read as
    another user's (uid 0 of a closed connection)."""
    local, remote = ("0100007F", 8080), ("0100007F", 50000)
    entries = [owner.Entry(local, remote, state, uid, 0)]
    assert owner.owner_of(entries, local=local, remote=remote) == expected


@linux_only
def test_the_kernel_names_this_process_as_owner_of_its_listener_and_connection() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        (found,) = owner.listeners("127.0.0.1", port) or []
        assert found.uid == os.geteuid() and os.getpid() in found.pids
        with socket.create_connection(("127.0.0.1", port)) as client:
            # not accepted yet: the queued connection carries the listener's owner
            assert owner.connection_owner(client) == os.geteuid()


# -- the server's side ----------------------------------------------------------------------


@pytest.fixture
def service() -> Iterator[_Service]:
    stopper = _Stopper()
    fields = {"service": "mux", "protocol_version": 3, "version": "1.0.0", "pid": 1}
    log_read, log_write = os.pipe()
    try:
        yield _Service(
            fields, stopper, WatchHub(max_watchers=1), ServerLog(log_write), secret=SECRET
        )
    finally:
        stopper.close()
        os.close(log_read)
        os.close(log_write)


def request(method: str, path: str, **headers: str) -> Request:
    names = {name.replace("_", "-").lower(): value for name, value in headers.items()}
    return Request(method, path, "HTTP/1.0", {"host": "127.0.0.1:1", **names})


def proof_headers(nonce: str, method: str, path: str, secret: str = SECRET) -> dict[str, str]:
    mac = proof_mac(secret, CLIENT_LABEL, nonce, method, path)
    return {
        AUTHORIZATION.replace("-", "_"): f"{PROOF_SCHEME} {nonce} {mac}",
        CHALLENGE_HEADER.replace("-", "_"): nonce,
    }


def answered_proof(data: bytes) -> str | None:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.decode().lower() == PROOF_HEADER.lower():
            return value.strip().decode()
    return None


def test_a_proof_of_the_secret_is_taken_once_and_answered_with_the_servers_proof(
    service: _Service,
) -> None:
    first = service.respond(
        request("GET", "/api/status", **proof_headers(NONCE, "GET", "/api/status"))
    )
    assert first.data.startswith(b"HTTP/1.0 200 ")
    assert answered_proof(first.data) == proof_mac(SECRET, SERVER_LABEL, NONCE)
    again = service.respond(
        request("GET", "/api/status", **proof_headers(NONCE, "GET", "/api/status"))
    )
    assert again.data.startswith(b"HTTP/1.0 401 ") and answered_proof(again.data) is None


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        (proof_headers("1" * 32, "GET", "/api/status"), "made for another request"),
        (proof_headers("2" * 32, "POST", "/api/shutdown", secret="cd" * 32), "another secret"),
        ({CHALLENGE_HEADER.replace("-", "_"): "3" * 32}, "no credential: no proof either"),
        (
            {AUTHORIZATION: f"{PROOF_SCHEME} short {'0' * 64}", CHALLENGE_HEADER: "short"},
            "a nonce that is not one",
        ),
    ],
)
def test_what_is_no_proof_gets_401_and_no_proof_back(
    service: _Service, headers: dict[str, str], why: str
) -> None:
    reply = service.respond(request("POST", "/api/shutdown", **headers))
    assert reply.data.startswith(b"HTTP/1.0 401 "), why
    assert answered_proof(reply.data) is None, why
    assert reply.then is None, why


def test_the_secret_itself_still_works_and_a_challenge_is_proved(service: _Service) -> None:
    bearer = {AUTHORIZATION: f"Bearer {SECRET}"}
    plain = service.respond(request("GET", "/api/status", **bearer))
    assert plain.data.startswith(b"HTTP/1.0 200 ") and answered_proof(plain.data) is None
    challenged = service.respond(
        request("GET", "/api/status", **bearer, **{CHALLENGE_HEADER.replace("-", "_"): NONCE})
    )
    assert answered_proof(challenged.data) == proof_mac(SECRET, SERVER_LABEL, NONCE)


# -- where the kernel does not name the owner -----------------------------------------------


@pytest.fixture
def kernel_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on macOS: the kernel is not asked who owns a connection."""
    monkeypatch.setattr(owner, "connection_owner", lambda sock: None)


def test_without_the_kernels_word_the_client_sends_no_secret_and_believes_a_proof(
    mux_runtime_dir: Path, kernel_silent: None
) -> None:
    _pid, url = start_mux_server_url(mux_runtime_dir)
    report = query_server(url)
    assert report.state == "live", report.detail


def impostor(port_file: list[int], seen: list[bytes]) -> threading.Thread:
    """A listener that answers a status line without any proof, and keeps what it was sent."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port_file.append(listener.getsockname()[1])

    def answer() -> None:
        with listener:
            connection, _ = listener.accept()
            with connection:
                seen.append(connection.recv(65536))
                body = b'{"service": "mux", "protocol_version": 3, "version": "9.9.9", "pid": 1}'
                connection.sendall(
                    b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
                )

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return thread


def test_without_the_kernels_word_a_listener_that_proves_nothing_is_not_yours(
    mux_runtime_dir: Path, kernel_silent: None
) -> None:
    ports: list[int] = []
    seen: list[bytes] = []
    thread = impostor(ports, seen)
    secret_file = Path(tcp_secret_path(ports[0]))
    secret_file.write_text(SECRET + "\n")
    secret_file.chmod(0o600)
    report = query_server(f"http://127.0.0.1:{ports[0]}")
    thread.join(5)
    assert report.state == "not-yours" and report.status is None, report
    assert "could not prove" in report.detail
    assert SECRET.encode() not in seen[0] and b"Mux-Proof" in seen[0]


# -- a server that stops while a restart's new one listens beside it ------------------------


def test_connections_still_queued_when_a_server_stops_are_told_so_not_reset() -> None:
    """A queued connection hears ``503`` "stopping" (which mux's status query asks again
    after, reaching the new server), not a reset when the listener closes."""
    log_read, log_write = os.pipe()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        clients = [socket.create_connection(listener.getsockname()) for _ in range(3)]
        connections = Connections(listener, lambda request: Reply(b""), ServerLog(log_write))
        assert connections.refuse_waiting() == 3
    for client in clients:
        with client:
            client.settimeout(5)
            answer = client.recv(4096)
            assert answer.startswith(b"HTTP/1.0 503 ") and b'"stopping": true' in answer
    os.close(log_read)
    os.close(log_write)
