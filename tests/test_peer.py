"""updater.servers.peer: the operating system's word on the process behind a socket, asked of
this process's own sockets, executable and lock."""

from __future__ import annotations

import fcntl
import os
import socket
import sys
from pathlib import Path

import pytest

from updater.servers.peer import peer_pid, process_executable, socket_lock_holder

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")


def test_the_peer_of_a_connected_socket_is_its_process() -> None:
    left, right = socket.socketpair(socket.AF_UNIX)
    with left, right:
        assert peer_pid(left) == os.getpid()
    with socket.socket(socket.AF_UNIX) as unconnected:
        assert peer_pid(unconnected) is None


@linux
def test_a_process_executable_and_whether_it_is_on_disk(tmp_path: Path) -> None:
    assert process_executable(os.getpid()) == (os.path.realpath(sys.executable), True)
    assert process_executable(2**22 + 1) is None  # above Linux's pid_max


@linux
def test_the_holder_of_a_server_s_socket_lock(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    assert socket_lock_holder(path) is None  # no lock file
    with open(f"{path}.lock", "w") as lock:
        assert socket_lock_holder(path) is None  # nobody holds it
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert socket_lock_holder(path) == os.getpid()
