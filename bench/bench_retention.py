"""Retention tied to live servers: disk after many updates, and what asking the servers costs.

Run: uv run python bench/bench_retention.py [--updates 10] [--servers 10] [--runs 15]

1. Disk: one long-lived server started from the first version, then ``--updates`` updates
   through the installed mux (stand-in builds from a loopback feed). Expected: the active,
   the previous and the server's version stay, whatever the number of updates; printed as a
   ratio to the size of one version, beside what keeping everything would cost.
2. Time: ``mux update --prune`` with ``--servers`` live servers, against the same prune with
   none, interleaved in one run (each prune has one old version to remove, so the servers are
   asked every time: all status lines in parallel, one shared timeout). The difference is the
   time the retention check adds to ``mux update``; target: within 50 ms for 10 servers. The
   check alone is also timed in-process (the same functions ``mux update`` calls).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import Measure, record, record_ratio, write_results

from updater.core.retention import settle

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def tree_bytes(path: Path) -> int:
    from updater.install.layout import tree_size

    return tree_size(path)


def environment(tmp: Path) -> dict[str, str]:
    runtime = Path(tempfile.mkdtemp(prefix="mux-bench-", dir="/tmp"))
    runtime.chmod(0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUX_")}
    env.update(
        HOME=str(tmp / "home"),
        XDG_CACHE_HOME=str(tmp / "home" / ".cache"),
        XDG_STATE_HOME=str(tmp / "home" / ".state"),
        XDG_RUNTIME_DIR=str(runtime),
        MUX_UPDATE_CHECK_INTERVAL="0",
        NO_COLOR="1",
    )
    (tmp / "home").mkdir(parents=True, exist_ok=True)
    return env


def disk_after_updates(tmp: Path, updates: int) -> None:
    from tests.support.installs import bootstrap
    from tests.support.releases import make_feed, serve_directory

    versions = [f"1.{n}.0" for n in range(updates + 1)]
    feed = make_feed(tmp / "disk", versions=versions)
    env = environment(tmp / "disk")
    with serve_directory(feed.path) as url:
        mux = bootstrap(
            tmp / "disk", env, source=url, version=versions[0], public_key=feed.keypair.public_key
        )
        try:
            assert mux.run("server", "start").returncode == 0
            one = tree_bytes(mux.home / "versions" / versions[0])
            for version in versions[1:]:
                result = mux.run("update", "--version", version)
                assert result.returncode == 0, result.stderr
            kept = sorted(p.name for p in (mux.home / "versions").iterdir())
            used = tree_bytes(mux.home / "versions")
        finally:
            mux.run("server", "stop")
    print(f"disk after {updates} updates with one long-lived server (started from {versions[0]}):")
    print(f"  kept: {', '.join(kept)}")
    record(
        Measure(
            f"disk after {updates} updates with one long-lived server",
            "one version",
            used / one,
            value=f"kept {len(kept)} versions",
        )
    )
    print(
        f"  used {used / 1024:.0f} KiB = {used / one:.2f} x one version ({one / 1024:.0f} KiB); "
        f"keeping every version would be {updates + 1:.2f} x"
    )


def prune_times(tmp: Path, servers: int, runs: int) -> None:
    from tests.support.installs import bootstrap
    from tests.support.releases import make_feed, serve_directory
    from tests.support.servers import start_mux_server, stop_all

    feed = make_feed(tmp / "time", versions=["2.0.0", "2.1.0"])
    env = environment(tmp / "time")
    runtime = Path(env["XDG_RUNTIME_DIR"]) / "mux"
    runtime.mkdir(mode=0o700)
    with serve_directory(feed.path) as url:
        mux = bootstrap(
            tmp / "time", env, source=url, version="2.0.0", public_key=feed.keypair.public_key
        )
        assert mux.run("update").returncode == 0
    versions_dir = mux.home / "versions"
    idle_runtime = Path(tempfile.mkdtemp(prefix="mux-bench-idle-", dir="/tmp"))
    idle_runtime.chmod(0o700)
    busy_env = dict(mux.env)
    idle_env = {**mux.env, "XDG_RUNTIME_DIR": str(idle_runtime)}
    server_env = {**os.environ, **env}
    for n in range(servers):
        start_mux_server(runtime, f"s{n:02d}", env=server_env)

    def one_prune(run_env: dict[str, str], n: int) -> tuple[float, float]:
        """Wall-clock and CPU seconds of one prune."""
        shutil.copytree(versions_dir / "2.0.0", versions_dir / f"0.0.{n}")  # up for removal
        cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        result = subprocess.run(
            [str(mux.mux), "update", "--prune", "--json"],
            env=run_env,
            capture_output=True,
            text=True,
            check=False,
        )
        elapsed = time.perf_counter() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["removed_versions"] == [f"0.0.{n}"]
        used = after.ru_utime - cpu.ru_utime + after.ru_stime - cpu.ru_stime
        return elapsed, used

    with_servers, without, cpu_with, cpu_without = [], [], [], []
    try:
        for n in range(runs):  # interleaved: load on the machine hits both alike
            wall, cpu = one_prune(busy_env, 2 * n)
            with_servers.append(wall)
            cpu_with.append(cpu)
            wall, cpu = one_prune(idle_env, 2 * n + 1)
            without.append(wall)
            cpu_without.append(cpu)
        inproc = in_process_check(mux, runtime, runs)
    finally:
        stop_all()
        shutil.rmtree(idle_runtime, ignore_errors=True)

    def stats(samples: list[float]) -> str:
        quartiles = statistics.quantiles(samples, n=4)
        return (
            f"median {1000 * statistics.median(samples):.1f} ms "
            f"(IQR {1000 * quartiles[0]:.1f}-{1000 * quartiles[2]:.1f})"
        )

    added = statistics.median(with_servers) - statistics.median(without)
    print(f"`mux update --prune` ({runs} interleaved pairs):")
    print(f"  with {servers} live servers: {stats(with_servers)}")
    print(f"  with none:            {stats(without)}")
    print(
        f"  ratio {statistics.median(with_servers) / statistics.median(without):.3f}; "
        f"the retention check adds {1000 * added:.1f} ms (target: within 50 ms)"
    )
    cpu_added = statistics.median(cpu_with) - statistics.median(cpu_without)
    print(
        f"  CPU of the prune process: {stats(cpu_with)} with, {stats(cpu_without)} without "
        f"(+{1000 * cpu_added:.1f} ms)"
    )
    print(f"the retention check in-process ({servers} servers): {inproc}")
    record_ratio(
        f"mux update --prune with {servers} live servers",
        [w / n for w, n in zip(with_servers, without, strict=True)],
        "the same with none",
        value=f"the retention check adds {1000 * added:.1f} ms",
        target="within 50 ms",
    )


def in_process_check(mux, runtime: Path, runs: int) -> str:
    """What _settle adds when something is up for removal: every status line, one timeout."""

    from updater.install.layout import Layout, read_record, server_holds
    from updater.servers import status as servers
    from updater.servers.addresses import every_server_address

    layout = Layout(str(mux.home), str(mux.bin_dir))
    os.environ["XDG_RUNTIME_DIR"] = str(runtime.parent)
    samples, base = [], []
    for _ in range(runs):
        began = time.perf_counter()
        settle(
            read_record(layout),
            active=layout.active_version(),
            installed=layout.installed_versions(),
        )
        base.append(time.perf_counter() - began)
        began = time.perf_counter()
        reports = servers.query_all(every_server_address(None))
        holds = server_holds(layout, reports)
        settle(
            read_record(layout),
            active=layout.active_version(),
            installed=layout.installed_versions(),
            holds=holds,
        )
        samples.append(time.perf_counter() - began)
        assert sum(r.state == "live" for r in reports) == len(reports)
    return (
        f"median {1000 * statistics.median(samples):.1f} ms, max {1000 * max(samples):.1f} ms "
        f"(settling alone: median {1000 * statistics.median(base):.2f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--servers", type=int, default=10)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mux-bench-retention-") as scratch:
        tmp = Path(scratch)
        disk_after_updates(tmp, args.updates)
        prune_times(tmp, args.servers, args.runs)
    write_results(__file__)


if __name__ == "__main__":
    main()
