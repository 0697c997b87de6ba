"""Moving off a withdrawn release with a live server, against `mux update --rollback`, in one run.

Run: uv run python bench/bench_withdraw.py [--mode dev|build|both] [--rounds 11]

The scene of issue 21's "done when": mux 0.1.0 installed, `mux update` to 0.2.0 (both kept),
a mux server started from 0.2.0 and left running, then 0.2.0 withdrawn in the feed's signed
index without a replacement (`mux-release withdraw`, the publisher's code). Each round times,
through the `<bin>/mux` link as users run it:

* `mux update`: it reads the signed index, finds the installed release withdrawn and moves
  back to the kept 0.1.0, offline (re-verified as `--rollback` does, nothing downloaded);
* `mux update --rollback`, the baseline: the same move asked for by hand.

Between the two (not timed) `mux update --version 0.2.0 --allow-withdrawn` puts 0.2.0 back.
In `build` mode both releases are the real one-folder build (made once per run) and the
installed mux is that build; in `dev` mode they are stand-in builds running this checkout.
Printed: medians with their interquartile range, CPU, the ratio to the baseline per round,
the target (at most 1 s), the load average before and after, and whether the server kept its
pid through every round.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import (
    Samples,
    add_mode_argument,
    clean_env,
    dev_mux,
    load_average,
    print_table,
    real_build,
    run_once,
    selected_modes,
    write_results,
)
from bench_update import REPO, fresh_install, make_feed

from release.publish.lifecycle import change_lifecycle, withdraw
from tests.support.releases import make_keypair, serve_directory

MOVE = "mux update (off the withdrawn 0.2.0)"
ROLLBACK = "mux update --rollback"


def run(mux: Path, env: dict[str, str], *args: str, expect: tuple[int, ...] = (0, 20)) -> str:
    result = subprocess.run([str(mux), *args], env=env, capture_output=True, text=True, check=False)
    if result.returncode not in expect:
        raise SystemExit(f"mux {' '.join(args)} exited {result.returncode}: {result.stderr}")
    return result.stdout


def live_server(mux: Path, env: dict[str, str]) -> tuple[int, str]:
    """The pid and version of the one server `mux server status --json` reports."""
    (server,) = json.loads(run(mux, env, "server", "status", "--json", expect=(0,)))["servers"]
    return server["pid"], server["version"]


def active(mux: Path) -> str:
    return mux.resolve().parent.name


def measure(work: Path, keypair, real: Path | None, installer: list[str], rounds: int) -> None:
    env = clean_env(work)
    env["MUX_REPO"] = REPO  # a checkout names no repository; the attestation names this one
    feed = make_feed(work / "f", 1, keypair, real)
    with serve_directory(feed.path) as url:
        install_env = fresh_install(work, env, url, feed, installer)
        mux = work / "bin" / "mux"
        run(mux, install_env, "update")
        run(mux, install_env, "server", "start", expect=(0,))
        server = live_server(mux, install_env)
        change_lifecycle(feed.path, keypair.secret_key(), "v0.2.0", withdraw("bench", None))
        results = {ROLLBACK: Samples(), MOVE: Samples()}
        for _ in range(rounds):
            for name, args in ((ROLLBACK, ("update", "--rollback")), (MOVE, ("update",))):
                if active(mux) != "0.2.0":
                    raise SystemExit(f"the link is at {active(mux)} before {name}")
                wall, cpu = run_once([str(mux), *args], install_env)
                if active(mux) != "0.1.0":
                    raise SystemExit(f"{name} left the link at {active(mux)}")
                results[name].wall.append(wall)
                results[name].cpu.append(cpu)
                run(mux, install_env, "update", "--version", "0.2.0", "--allow-withdrawn")
        after = live_server(mux, install_env)
        run(mux, install_env, "server", "stop", expect=(0, 1))
    mode = "build" if real is not None else "dev"
    print_table(
        f"{mode}: a withdrawn 0.2.0 with a live server, {rounds} rounds",
        results,
        ROLLBACK,
        targets={MOVE: "<= 1 s"},
    )
    print(
        f"  the server kept pid {server[0]} and mux {server[1]} through every round: {after == server}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    add_mode_argument(parser)
    args = parser.parse_args()
    print(load_average())
    with tempfile.TemporaryDirectory(prefix="mux-bench-withdraw-") as scratch:
        tmp = Path(scratch)
        keypair = make_keypair(tmp / "keys")
        for mode in selected_modes(args):
            work = tmp / mode
            work.mkdir()
            real, installer = None, dev_mux()
            if mode == "build":
                real = real_build(
                    work / "build",
                    version="0.1.0",
                    protocol_version=1,
                    repo=REPO,
                    keys=[keypair.public_key],
                )
                installer = [str(real / "mux")]
            measure(work, keypair, real, installer, args.rounds)
    print()
    print(load_average())
    write_results(__file__)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
