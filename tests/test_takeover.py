"""updater.servers.takeover.possible: a new server listens beside the old one only on a TCP
address a live server of this user's shares (Linux's SO_REUSEPORT), never on a Unix socket,
for a server that did not answer, or on a port that is not shared."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from updater.core.verdicts import ServerReport
from updater.protocol import StatusLine
from updater.servers.takeover import possible

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_REUSEPORT: Linux's")
LIVE = StatusLine(service="mux", protocol_version=1, version="1.0.0", pid=1, started_at=None)


def report(address: str, status: StatusLine | None = LIVE) -> ServerReport:
    return ServerReport(
        address=address, state="live" if status else "hung", status=status, detail=""
    )


@pytest.fixture
def listening() -> Iterator[tuple[socket.socket, str]]:
    with socket.socket(socket.AF_INET) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        yield server, f"http://127.0.0.1:{server.getsockname()[1]}"


def test_never_on_a_unix_socket_or_beside_a_server_that_did_not_answer(tmp_path: Path) -> None:
    sock = tmp_path / "s.sock"
    assert not possible(sock, report(str(sock)))
    assert not possible("http://127.0.0.1:9", None)
    assert not possible("http://127.0.0.1:9", report("http://127.0.0.1:9", status=None))


@linux
def test_beside_a_live_server_that_shares_its_port(listening) -> None:
    _, address = listening
    assert possible(address, report(address)) is True


@linux
def test_not_on_a_port_that_is_not_shared() -> None:
    with socket.socket(socket.AF_INET) as server:
        server.bind(("127.0.0.1", 0))  # no SO_REUSEPORT: a second listener cannot bind
        server.listen(1)
        address = f"http://127.0.0.1:{server.getsockname()[1]}"
        assert possible(address, report(address)) is False
