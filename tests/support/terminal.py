"""Run a process with its stderr on a pseudo-terminal, as a person at a terminal would."""

from __future__ import annotations

import os
import pty
import subprocess
from collections.abc import Mapping, Sequence


def on_a_terminal(
    command: Sequence[str], env: Mapping[str, str]
) -> subprocess.CompletedProcess[bytes]:
    """Run with stderr on a pseudo-terminal (mux then draws its progress bar with rich)."""
    leader, follower = pty.openpty()
    try:
        process = subprocess.Popen(
            list(command),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=follower,
        )
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the writer side is closed and drained
                break
            if not chunk:
                break
            chunks.append(chunk)
        stdout = process.stdout.read() if process.stdout else b""
        process.wait(timeout=120)
    finally:
        if follower != -1:
            os.close(follower)
        os.close(leader)
    return subprocess.CompletedProcess(list(command), process.returncode, stdout, b"".join(chunks))
