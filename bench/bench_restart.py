"""`mux server restart` into a healthy build, many times: how often it falls back, how long it takes.

Run: uv run python bench/bench_restart.py [--rounds 1000] [--timeout 7]
     uv run python bench/bench_restart.py --squatter [--rounds 100]   (as root: setpriv)
     uv run python bench/bench_restart.py --against CHECKOUT [--rounds 30]

``--squatter``: ``--rounds`` restarts of a TCP server this checkout started, while another
uid (1501, through ``setpriv``) tries to bind its port in a tight loop in every socket mode;
printed: how many restarts ended with a new server of this user's, and how many times the
other uid got the port (it must be 0).

``--against CHECKOUT``: the wall time of `mux server restart` from this checkout against the
same command from another checkout (a worktree of an earlier commit), each restarting its
own server (a Unix socket, then a TCP port), interleaved round by round; printed and
recorded: the median of the per-round ratios and their interquartile range.

The default:
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
import socket as socket_module
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _common import (  # noqa: E402
    Measure,
    describe_ratio,
    describe_seconds,
    interleaved,
    load_average,
    ratios,
    record,
    record_ratio,
    run_once,
    write_results,
)

from tests.support.environment import scrubbed  # noqa: E402
from tests.support.installs import bootstrap  # noqa: E402
from tests.support.releases import make_keypair, make_release  # noqa: E402
from tests.support.squatters import SQUATTER  # noqa: E402
from updater.servers.status import query_server  # noqa: E402


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
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=7.0, help="MUX_RESTART_TIMEOUT")
    parser.add_argument("--squatter", action="store_true", help="another uid binds in a loop")
    parser.add_argument("--against", type=Path, help="a checkout to compare restart time with")
    args = parser.parse_args()
    if args.squatter:
        return squatter_rounds(args.rounds or 100)
    if args.against:
        return compared_rounds(args.against, args.rounds or 30)
    args.rounds = args.rounds or 1000
    return installed_rounds(args)


def installed_rounds(args: argparse.Namespace) -> int:
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
            # A real process: the restart as a user runs it, start-up included, is what is timed.
            result = mux.run("server", "restart", "--socket", str(socket), process=True)
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


# -- a squatter, and another checkout -----------------------------------------------------


def free_port() -> int:
    with socket_module.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def checkout_env(tmp: Path) -> dict[str, str]:
    runtime = Path(tempfile.mkdtemp(prefix="mux-br-", dir="/tmp"))
    runtime.chmod(0o700)
    env = scrubbed(os.environ)
    env.pop("PYTHONPATH", None)
    env.update(
        HOME=str(tmp / "home"),
        XDG_STATE_HOME=str(tmp / "state"),
        XDG_CACHE_HOME=str(tmp / "cache"),
        XDG_RUNTIME_DIR=str(runtime),
        MUX_UPDATE_CHECK_INTERVAL="0",
        NO_COLOR="1",
    )
    return env


def mux_of(checkout: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``mux ARGS`` as that checkout's development mux (run from its folder)."""
    return subprocess.run(
        [sys.executable, "-m", "updater", *args],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def squatter_rounds(rounds: int) -> int:
    """Restarts of a TCP server while another uid tries to take its port."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        print("--squatter acts as another uid: run it as root, with setpriv (util-linux)")
        return 2
    with tempfile.TemporaryDirectory(prefix="mux-bench-squat-") as scratch:
        env = checkout_env(Path(scratch))
        os.environ["XDG_RUNTIME_DIR"] = env["XDG_RUNTIME_DIR"]  # for query_server's secret
        url = f"http://127.0.0.1:{free_port()}"
        started = mux_of(ROOT, env, "server", "start", "--url", url)
        assert started.returncode == 0, started.stderr
        squatter = subprocess.Popen(
            [
                *("setpriv", "--reuid=1501", "--regid=1501", "--clear-groups", "--"),
                *(sys.executable, "-c", SQUATTER, url.rsplit(":", 1)[1]),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd="/",
        )
        assert squatter.stdout is not None and squatter.stdout.readline() == "trying\n"
        ours, walls, pids, problems = 0, [], set(), []
        for round_ in range(rounds):
            began = time.monotonic()
            result = mux_of(ROOT, env, "server", "restart", "--url", url)
            walls.append(time.monotonic() - began)
            report = query_server(url)
            if result.returncode == 0 and report.state == "live" and report.pid not in pids:
                ours += 1
                pids.add(report.pid)
            else:
                problems.append(f"round {round_}: exit {result.returncode}, {report.state}")
        got = int(squatter.communicate(timeout=30)[0].strip() or -1)
        mux_of(ROOT, env, "server", "stop", "--url", url)
        shutil.rmtree(env["XDG_RUNTIME_DIR"], ignore_errors=True)
    print(f"restarts with another uid binding the port in a loop: {rounds}")
    print(f"  ended with a new server of this user's answering: {ours}")
    print(f"  times the other uid got the port: {got}")
    print(f"  wall time of one restart: {describe_seconds(walls)}")
    for line in problems[:10]:
        print(f"  {line}")
    record(
        Measure(
            "mux server restart of a TCP server while another uid binds its port in a loop",
            value=f"{ours} of {rounds} ended with a new server of ours; the other uid got the port {got} times",
            target="every restart ends with our server, the other uid never gets the port",
        )
    )
    write_results(__file__, "squatter")
    return 0 if ours == rounds and got == 0 else 1


def compared_rounds(other: Path, rounds: int) -> int:
    """`mux server restart` of this checkout against another's, each restarting its own
    server, round by round: a Unix socket, then a TCP port."""
    with tempfile.TemporaryDirectory(prefix="mux-bench-vs-") as scratch:
        tmp = Path(scratch)
        checkouts = {"this": ROOT, "other": other.resolve()}
        envs = {name: checkout_env(tmp / name) for name in checkouts}
        for kind in ("socket", "url"):
            addresses = {
                name: (
                    str(Path(envs[name]["XDG_RUNTIME_DIR"]) / f"bench-{kind}.sock")
                    if kind == "socket"
                    else f"http://127.0.0.1:{free_port()}"
                )
                for name in checkouts
            }
            for name, checkout in checkouts.items():
                started = mux_of(
                    checkout, envs[name], "server", "start", f"--{kind}", addresses[name]
                )
                assert started.returncode == 0, started.stderr
            samples = interleaved(
                {
                    name: partial(_restart, checkout, envs[name], kind, addresses[name])
                    for name, checkout in checkouts.items()
                },
                rounds,
            )
            for name, checkout in checkouts.items():
                mux_of(checkout, envs[name], "server", "stop", f"--{kind}", addresses[name])
            values = ratios(samples["this"], samples["other"])
            cpu = [a / b for a, b in zip(samples["this"].cpu, samples["other"].cpu, strict=True)]
            what = "a Unix socket" if kind == "socket" else "a TCP port"
            print(
                f"restart of {what}: this {describe_seconds(samples['this'].wall)}, "
                f"{other.name} {describe_seconds(samples['other'].wall)}: {describe_ratio(values)}"
                f" (CPU of the command: {describe_ratio(cpu)})"
            )
            record_ratio(
                f"mux server restart of {what} (development mux)",
                values,
                f"the same command from {_commit_of(other)}",
                value=f"CPU of the command {describe_ratio(cpu).strip()}",
                target="within noise of the baseline",
            )
        for env in envs.values():
            shutil.rmtree(env["XDG_RUNTIME_DIR"], ignore_errors=True)
    print(load_average())
    write_results(__file__, "against")
    return 0


def _restart(checkout: Path, env: dict[str, str], kind: str, address: str) -> tuple[float, float]:
    command = [sys.executable, "-m", "updater", "server", "restart", f"--{kind}", address]
    return run_once(command, env, cwd=checkout)


def _commit_of(checkout: Path) -> str:
    found = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True
    )
    return found.stdout.strip() or str(checkout)


if __name__ == "__main__":
    raise SystemExit(main())
