"""`mux server watch`: what 100 idle watchers cost a server, and how fast an event arrives.

Run: uv run python bench/bench_watch.py [--watchers 100] [--seconds 10] [--events 40]

1. A real server (its mux link watched, no background check) is measured idle for
   ``--seconds`` with no watcher (the baseline, same run), then with ``--watchers`` connected
   and idle: CPU seconds used (utime + stime from /proc) and resident memory (VmRSS).
2. Event latency: the mux link is moved the way ``mux update`` moves it (a new link renamed
   over the old one), ``--events`` times, with the watchers connected; printed is the time
   from the rename to the line arriving at the first watcher and at the last of them.
   Target: under 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _common import Measure, record, write_results  # noqa: E402


def proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


class Watcher:
    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(str(path))
        self.sock.sendall(b"GET /api/watch HTTP/1.0\r\n\r\n")
        self.buffer = b""
        self.in_body = False
        self.lines: list[bytes] = []

    def take(self) -> None:
        self.buffer += self.sock.recv(65536)
        if not self.in_body:
            _head, sep, self.buffer = self.buffer.partition(b"\r\n\r\n")
            if not sep:
                self.buffer = _head
                return
            self.in_body = True
        *complete, self.buffer = self.buffer.split(b"\n")
        self.lines += complete


def measure(pid: int, seconds: float) -> tuple[float, int]:
    before = proc_cpu_seconds(pid)
    time.sleep(seconds)  # a benchmark's measuring window, not synchronisation
    return proc_cpu_seconds(pid) - before, proc_rss_kib(pid)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--watchers", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--events", type=int, default=40)
    args = parser.parse_args()

    from tests.support.servers import start_mux_server, stop_all

    tmp = Path(tempfile.mkdtemp(prefix="mux-bench-watch-", dir="/tmp"))
    tmp.chmod(0o700)
    try:
        home, bin_dir = tmp / "home", tmp / "bin"
        targets = []
        for version in ("2.0.0", "2.1.0"):
            folder = home / "versions" / version
            folder.mkdir(parents=True)
            (folder / "mux").write_text("#!/bin/sh\n")
            targets.append(folder / "mux")
        bin_dir.mkdir()
        (bin_dir / "mux").symlink_to(targets[0])
        runtime = tmp / "run"
        runtime.mkdir(mode=0o700)
        env = {
            **os.environ,
            "MUX_HOME": str(home),
            "MUX_INSTALL_DIR": str(bin_dir),
            "MUX_UPDATE_CHECK_INTERVAL": "0",
        }
        pid, path = start_mux_server(runtime, "bench", env=env, version="2.0.0")
        time.sleep(1.0)  # let start-up settle before the baseline window
        idle_cpu, idle_rss = measure(pid, args.seconds)

        watchers = [Watcher(path) for _ in range(args.watchers)]
        selector = selectors.DefaultSelector()
        for watcher in watchers:
            selector.register(watcher.sock, selectors.EVENT_READ, watcher)

        def pump(count: int) -> tuple[float, float]:
            """Until every watcher has ``count`` lines: when the first and the last got there."""
            first = last = 0.0
            while True:
                done = [w for w in watchers if len(w.lines) >= count]
                now = time.perf_counter()
                if done and not first:
                    first = now
                if len(done) == len(watchers):
                    last = now
                    return first, last
                for key, _ in selector.select(5.0):
                    key.data.take()

        pump(1)
        busy_cpu, busy_rss = measure(pid, args.seconds)
        print(f"server with {args.watchers} idle watchers, {args.seconds:g} s windows:")
        tick = 1 / os.sysconf("SC_CLK_TCK")
        print(
            f"  CPU: {idle_cpu:.3f} s with none, {busy_cpu:.3f} s with {args.watchers} "
            f"(the kernel counts in {1000 * tick:.0f} ms ticks)"
        )
        print(
            f"  RSS: {idle_rss} KiB with none, {busy_rss} KiB with {args.watchers} "
            f"(ratio {busy_rss / idle_rss:.2f}, +{(busy_rss - idle_rss) / args.watchers:.0f} "
            "KiB per watcher)"
        )

        to_first, to_last = [], []
        for n in range(1, args.events + 1):
            temp = bin_dir / f".mux.tmp-bench-{n}"
            temp.symlink_to(targets[n % 2])
            moved = time.perf_counter()
            os.replace(temp, bin_dir / "mux")
            first, last = pump(1 + n)
            to_first.append(first - moved)
            to_last.append(last - moved)
        for watcher in watchers:
            line = json.loads(watcher.lines[-1])
            assert line["type"] == "update-installed", line

        def describe(samples: list[float]) -> str:
            ordered = sorted(samples)
            p95 = ordered[max(0, int(0.95 * len(ordered)) - 1)]
            return (
                f"median {1000 * statistics.median(samples):.1f} ms, p95 {1000 * p95:.1f} ms, "
                f"max {1000 * max(samples):.1f} ms"
            )

        print(f"event latency, link moved -> line arrived ({args.events} events, target < 2 s):")
        print(f"  first watcher: {describe(to_first)}")
        print(f"  all {args.watchers}:       {describe(to_last)}")
        per_watcher = (busy_rss - idle_rss) / args.watchers
        record(
            Measure(
                f"a server with {args.watchers} idle watchers: memory",
                value=f"+{per_watcher:.0f} KiB per watcher; CPU {busy_cpu:.3f} s vs "
                f"{idle_cpu:.3f} s idle in {args.seconds:g} s",
            )
        )
        record(
            Measure(
                f"event latency to all {args.watchers} watchers (link moved -> line arrived)",
                value=describe(to_last),
                target="< 2 s",
            )
        )
        for watcher in watchers:
            watcher.sock.close()
    finally:
        stop_all()
        shutil.rmtree(tmp, ignore_errors=True)
    write_results(__file__)


if __name__ == "__main__":
    main()
