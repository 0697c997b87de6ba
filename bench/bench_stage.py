"""Applying a staged release vs a full `mux update` of the same pair, on the released build.

Run: uv run python bench/bench_stage.py [--rounds 7] [--mib 64]

One real one-folder build (`mux-release build`) is v0.1.0, installed from a loopback feed by
itself; v0.2.0 is the same build rebadged, its archive padded to MIB MiB of incompressible
data, signed and attested (bench_update.py's feed: all five layers run). Each round installs
v0.1.0 afresh for every row, then times one `mux update`:

* full: nothing staged, every layer (the baseline);
* staged, recent signed answer: `mux update --check` then `mux update --stage` beforehand,
  with a check interval of an hour, so the lifecycle's answer comes from the check cache and
  no request is made (the path of updater.cli.staged); warm file cache;
* the same with a cold file cache: the install's files (the staged tree and the running
  build) evicted from the page cache (posix_fadvise DONTNEED, after a sync) before the run;
* staged, fresh network read: a check interval of 0, so the update reads the feed's index,
  lifecycle and the release's signed documents again and then applies the staged copy.

Ratios are per-round ratios against the full update in the same round (median and IQR).
Target (issue 39): the recent-answer row at most 0.3x.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    Samples,
    clean_env,
    load_average,
    print_table,
    real_build,
    write_results,
)
from bench_update import REPO, checked_update, fresh_install, make_feed

FULL = "mux update (full: download and every layer)"
RECENT = "mux update applying a staged copy, recent signed answer"
COLD = "  the same, cold file cache"
FRESH = "mux update applying a staged copy, fresh network read"


def evict(root: Path) -> None:
    """Drop ``root``'s files from the page cache (they are clean after the sync)."""
    os.sync()
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                continue
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def staged_install(work: Path, env: dict[str, str], url: str, feed, installer, interval: str):
    """v0.1.0 installed afresh with v0.2.0 staged; the env that runs its mux."""
    installed_env = fresh_install(work, env, url, feed, installer)
    install_env = {**installed_env, "MUX_UPDATE_CHECK_INTERVAL": interval}
    mux = str(work / "bin" / "mux")
    if interval != "0":
        done = subprocess.run([mux, "update", "--check"], env=install_env, capture_output=True)
        if done.returncode != 10:
            raise SystemExit(f"the check did not offer v0.2.0: {done.stderr.decode()[-300:]}")
    done = subprocess.run([mux, "update", "--stage"], env=install_env, capture_output=True)
    if done.returncode != 0:
        raise SystemExit(f"staging failed: {done.stderr.decode()[-300:]}")
    return install_env


def applied(work: Path, env: dict[str, str], *, recent: bool) -> tuple[float, float]:
    """One timed `mux update` that must apply the staged copy (from the cache when ``recent``:
    its note names the signed answer's age, which only that path says)."""
    mux = work / "bin" / "mux"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run([str(mux), "update"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    said = result.stdout + result.stderr
    if result.returncode != 0 or "applied the copy staged" not in said:
        raise SystemExit(f"mux update did not apply the staged copy: {said[-500:]}")
    if recent != ("signed answer that offers it" in said):
        raise SystemExit(f"mux update did not take the path asked for: {said[-500:]}")
    if os.readlink(mux).split("/")[-2] != "0.2.0":
        raise SystemExit("the link does not name 0.2.0")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    from tests.support.releases import make_keypair, serve_directory

    print(load_average())
    with tempfile.TemporaryDirectory(prefix="mux-bench-") as scratch:
        tmp = Path(scratch)
        keypair = make_keypair(tmp / "keys")
        env = clean_env(tmp)
        env["MUX_REPO"] = REPO
        real = real_build(
            tmp / "build", version="0.1.0", protocol_version=1, repo=REPO, keys=[keypair.public_key]
        )
        installer = [str(real / "mux")]
        feed = make_feed(tmp / "f", args.mib, keypair, real)
        results = {name: Samples() for name in (FULL, RECENT, COLD, FRESH)}
        with serve_directory(feed.path) as url:
            for _ in range(args.rounds):
                full_env = fresh_install(tmp, env, url, feed, installer)
                timed = {FULL: checked_update(tmp / "bin" / "mux", full_env)}
                run_env = staged_install(tmp, env, url, feed, installer, "1h")
                timed[RECENT] = applied(tmp, run_env, recent=True)
                run_env = staged_install(tmp, env, url, feed, installer, "1h")
                evict(tmp / "home-mux")
                timed[COLD] = applied(tmp, run_env, recent=True)
                run_env = staged_install(tmp, env, url, feed, installer, "0")
                timed[FRESH] = applied(tmp, run_env, recent=False)
                for name, (wall, cpu) in timed.items():
                    results[name].wall.append(wall)
                    results[name].cpu.append(cpu)
        print_table(
            f"released build: {args.mib} MiB archive, staged vs full, {args.rounds} rounds",
            results,
            FULL,
            targets={RECENT: "0.3x", FRESH: "0.45x"},
        )
    print()
    print(load_average())
    write_results(__file__)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
