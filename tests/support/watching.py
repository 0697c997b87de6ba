"""Watching a mux as it runs: a process's output lines read with a deadline (:class:`Lines`,
:func:`spawn`), ``mux server watch``'s events (:func:`event`, :func:`watch_start`), the watch
stream read from the socket (:class:`RawStream`), the plugin of docs/scripting.md, and the
processes an install has running (:func:`processes_of`)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.support.installs import Install


class Lines:
    """The stdout lines of a process, read by a thread, taken with a deadline."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def next(self, timeout: float = 20.0) -> str | None:
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line within {timeout:g}s") from None

    def rest(self, timeout: float = 20.0) -> list[str]:
        found = []
        while (line := self.next(timeout)) is not None:
            found.append(line)
        return found


def spawn(install: Install, *args: str) -> tuple[subprocess.Popen[str], Lines]:
    process = subprocess.Popen(
        [str(install.mux), *args],
        env=install.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, Lines(process)


def event(line: str | None) -> tuple[str, dict[str, Any]]:
    assert line is not None
    doc = json.loads(line)
    return doc["type"], doc["data"]


def watch_start(lines: Lines) -> tuple[dict[str, Any], dict[str, Any]]:
    """The first two lines of `mux server watch`: the server's status line itself, then the
    `server` event (the server as `mux server status --json` lists it)."""
    status = json.loads(lines.next() or "")
    assert status["service"] == "mux", status  # what plugins of the status-line contract check
    assert (status["type"], status["schema"]) == ("status", 2), status
    assert "address" not in status and "status" not in status
    kind, entry = event(lines.next())
    assert kind == "server", kind
    return status, entry


def plugin_script() -> str:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "scripting.md").read_text()
    block = doc.split("<!-- plugin:begin -->", 1)[1].split("<!-- plugin:end -->", 1)[0]
    match = re.search(r"```sh\n(.*?)```", block, re.S)
    assert match, "docs/scripting.md lost its plugin"
    return match.group(1)


class RawStream:
    """A watch stream read straight from the socket by a thread: every line, heartbeats too."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(str(path))
        self.sock.sendall(b"GET /api/watch HTTP/1.0\r\n\r\n")
        self._lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        buffer, head_done = b"", False
        with contextlib.suppress(OSError):
            while data := self.sock.recv(65536):
                buffer += data
                if not head_done and b"\r\n\r\n" in buffer:
                    head, buffer = buffer.split(b"\r\n\r\n", 1)
                    assert head.startswith(b"HTTP/1.0 200"), head
                    head_done = True
                while head_done and b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    self._lines.put(json.loads(line))
        self._lines.put(None)

    def next(self, timeout: float = 30.0) -> dict[str, Any] | None:
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line within {timeout:g}s") from None

    def next_event(self, timeout: float = 30.0) -> tuple[str, dict[str, Any]]:
        """The next line that is not a heartbeat, within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.next(max(0.0, deadline - time.monotonic()))
            assert line is not None, "the stream ended"
            if line.get("type") != "heartbeat":
                return line["type"], line["data"]


def processes_of(folder: Path) -> list[tuple[int, str]]:
    """Every process whose command line or program lies in ``folder`` (a real process scan)."""
    inside = os.path.realpath(folder) + os.sep
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as stream:
                argv = stream.read().decode(errors="replace").split("\0")
            program = os.readlink(f"/proc/{name}/exe")
        except OSError:
            continue
        if any(inside in arg for arg in argv) or program.startswith(inside):
            found.append((int(name), " ".join(argv)))
    return found
