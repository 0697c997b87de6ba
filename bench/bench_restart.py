"""`mux server restart` into a healthy build, many times: how often it falls back, how long it takes.

Run: uv run python bench/bench_restart.py [--rounds 1000] [--timeout 7]

An installed mux (stand-in release builds of this checkout, from a signed feed folder:
1.0.0, then 1.1.0 at the same protocol installed by `mux update`), a server started from
1.0.0, then ``--rounds`` restarts as a user runs them: `<bin>/mux server restart --socket P`
through the link, each a real process that stops the server, starts 1.1.0's and waits for
its status line (``MUX_RESTART_TIMEOUT``, ``--timeout``). Printed: how many restarts
succeeded (exit 0), fell back to the old build (exit 5) or failed otherwise; the wall time of
a restart (median, interquartile range, 95th percentile, maximum); the load average before
and after; and, at the end, the processes left of the installed versions (a real /proc scan:
one server, nothing else).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _common import Measure, record, write_results  # noqa: E402

from tests.support.environment import scrubbed  # noqa: E402
from tests.support.installs import bootstrap  # noqa: E402
from tests.support.releases import make_keypair, make_release  # noqa: E402
from updater.servers.client import query_server  # noqa: E402


def processes_in(folder: Path) -> list[int]:
    inside = os.path.realpath(folder) + os.sep
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as stream:
                argv = stream.read().decode(errors="replace")
        except OSError:
            continue
        if inside in argv:
            found.append(int(name))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=7.0, help="MUX_RESTART_TIMEOUT")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="mux-bench-restart-") as scratch:
        tmp = Path(scratch)
        runtime = Path(tempfile.mkdtemp(prefix="mux-br-", dir="/tmp"))
        runtime.chmod(0o700)
        env = scrubbed(os.environ)
        env.pop("PYTHONPATH", None)
        env.update(
            {
                "HOME": str(tmp / "home"),
                "XDG_CACHE_HOME": str(tmp / "cache"),
                "XDG_STATE_HOME": str(tmp / "state"),
                "XDG_CONFIG_HOME": str(tmp / "config"),
                "XDG_DATA_HOME": str(tmp / "data"),
                "XDG_RUNTIME_DIR": str(runtime),
                "MUX_UPDATE_CHECK_INTERVAL": "0",
                "MUX_RESTART_TIMEOUT": f"{args.timeout:g}",
                "NO_COLOR": "1",
            }
        )
        keypair = make_keypair(tmp / "keys")
        feed = tmp / "feed"
        for number, version in enumerate(("1.0.0", "1.1.0")):
            make_release(feed, version, protocol_version=7, keypair=keypair, signed_at=number + 1)
        mux = bootstrap(tmp, env, source=str(feed), version="1.0.0", public_key=keypair.public_key)
        socket = runtime / "mux" / "bench.sock"
        started = mux.run("server", "start", "--socket", str(socket))
        assert started.returncode == 0, started.stderr
        updated = mux.run("update")
        assert updated.returncode == 0 and mux.active() == "1.1.0", updated.stderr

        codes: dict[int, int] = {}
        walls: list[float] = []
        failures: list[str] = []
        load_before = os.getloadavg()
        for round_ in range(args.rounds):
            began = time.monotonic()
            result = mux.run("server", "restart", "--socket", str(socket))
            walls.append(time.monotonic() - began)
            codes[result.returncode] = codes.get(result.returncode, 0) + 1
            if result.returncode != 0:
                failures.append(
                    f"round {round_}: exit {result.returncode}: {result.stderr.strip()}"
                )
            status = query_server(str(socket)).status
            if status is None or status.version != "1.1.0":
                failures.append(f"round {round_}: after it, the server is {status}")
            if (round_ + 1) % 100 == 0:
                print(f"  {round_ + 1} restarts, {codes}", flush=True)
        load_after = os.getloadavg()
        left = {v: processes_in(mux.home / "versions" / v) for v in ("1.0.0", "1.1.0")}
        stopped = mux.run("server", "stop", "--socket", str(socket))
        shutil.rmtree(runtime, ignore_errors=True)

    ordered = sorted(walls)
    quartiles = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else [ordered[0]] * 3
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    print(f"restarts: {args.rounds}")
    print(f"  healthy (exit 0): {codes.get(0, 0)}")
    print(f"  fell back to the old build (exit 5): {codes.get(5, 0)}")
    print(f"  other failures: {sum(n for c, n in codes.items() if c not in (0, 5))}")
    print(
        f"wall time of one restart: median {statistics.median(ordered):.3f} s "
        f"(IQR {quartiles[0]:.3f}-{quartiles[2]:.3f}), p95 {p95:.3f} s, max {ordered[-1]:.3f} s"
    )
    print(f"load average: {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    print(
        f"processes left of 1.0.0: {len(left['1.0.0'])}, of 1.1.0: {len(left['1.1.0'])} (the server)"
    )
    print(f"stopped at the end: exit {stopped.returncode}")
    for line in failures[:10]:
        print(f"  {line}")
    record(
        Measure(
            "mux server restart into a healthy build",
            value=(
                f"{codes.get(0, 0)} of {args.rounds} healthy, {codes.get(5, 0)} fell back; "
                f"median {statistics.median(ordered):.2f} s (IQR {quartiles[0]:.2f}-"
                f"{quartiles[2]:.2f}), p95 {p95:.2f} s; processes left: "
                f"{len(left['1.0.0'])} of 1.0.0, {len(left['1.1.0'])} of 1.1.0"
            ),
            target="every restart healthy, one process left",
        )
    )
    write_results(__file__)
    return 0 if not failures and len(left["1.1.0"]) == 1 and not left["1.0.0"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
