"""A child process's output, read within bounds: a size cap and a deadline (stdlib only).

The background check child of a server and the attestation child of ``mux update`` answer
their parent once on stdout; a child that writes too much or takes too long is killed, and
nothing it wrote beyond the cap is ever held in memory.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time


class OutputTooLarge(Exception):
    """A child wrote more to its stdout than its reader takes."""


def read_bounded(
    child: subprocess.Popen[bytes], limit: int, deadline: float
) -> tuple[bytes, bytes]:
    """The child's stdout and stderr, read as they come, and its exit.

    Never holds more than ``limit`` bytes of either: more on stdout kills the child
    (:class:`OutputTooLarge`); stderr keeps its first ``limit`` bytes and the rest is read
    and dropped. Past ``deadline`` (monotonic) the child is killed (``TimeoutExpired``).
    """
    assert child.stdout is not None and child.stderr is not None
    started = time.monotonic()
    stdout, stderr = child.stdout.fileno(), child.stderr.fileno()
    taken = {stdout: bytearray(), stderr: bytearray()}
    try:
        with selectors.DefaultSelector() as selector:
            for fd in taken:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise subprocess.TimeoutExpired(child.args, deadline - started)
                for key, _events in selector.select(remaining):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        selector.unregister(key.fd)
                        continue
                    kept = taken[key.fd]
                    if key.fd == stdout and len(kept) + len(chunk) > limit:
                        raise OutputTooLarge
                    kept += chunk[: max(0, limit - len(kept))]
        child.wait(max(0.0, deadline - time.monotonic()))
    except BaseException:
        child.kill()
        child.wait()
        raise
    finally:
        child.stdout.close()
        child.stderr.close()
    return bytes(taken[stdout]), bytes(taken[stderr])
