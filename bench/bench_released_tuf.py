"""The checks and `mux update` of a released build that trusts a TUF root, in one run.

Run: uv run python bench/bench_released_tuf.py [--rounds 15] [--update-rounds 5] [--mib 64]

One real one-folder build (`mux-release build --tuf-root`, the root of the feeds below baked
in) serves every row:

* the archive `mux-release package` writes for it;
* start-up, installed by itself from a loopback feed with a TUF repository and run through
  its `<bin>/mux` link: the cached `mux update --check --max-age 1h` against `python -c pass`
  (it must not change: it imports no TUF), interleaved rounds;
* the uncached check of a TUF feed against a bare script doing the same TUF refresh and
  fetches with python-tuf and httpx (bench_tuf_check.py), alternating rounds;
* `mux update` with all five layers and the TUF layer, a 64 MiB archive, against curl +
  sha256sum + tar + ln on the same archive from the same server (bench_update.py), each
  round from a fresh install.

Ratios are medians of per-round ratios with their interquartile range; the load average is
printed before and after.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import (
    Measure,
    Samples,
    clean_env,
    describe_ratio,
    interleaved,
    load_average,
    print_table,
    ratios,
    real_build,
    record,
    run_once,
    write_results,
)
from bench_released import archive_size
from bench_tuf_check import FLOOR_NAME, MUX
from bench_tuf_check import measure as measure_uncached
from bench_update import BARE, REPO, fresh_install, make_feed, measure_update

from tests.support.releases import make_keypair, serve_directory
from tests.support.tuf import METADATA_URL, default_root

CACHED = "mux update --check --max-age 1h (cached)"
PASS = "python -c pass"


def cached_rounds(work: Path, real: Path, keypair, rounds: int) -> dict[str, Samples]:
    """The cached check of the installed build, after one uncached check through TUF."""
    env = {**clean_env(work), "MUX_REPO": REPO}
    feed = make_feed(work / "f", 1, keypair, real, tuf=True)
    with serve_directory(feed.path) as url:
        install_env = fresh_install(work, env, url, feed, [str(real / "mux")])
        mux = str(work / "bin" / "mux")
        filled = subprocess.run(
            [mux, "update", "--check", "--json"],
            env=install_env,
            capture_output=True,
            text=True,
            check=False,
        )
        origin = json.loads(filled.stdout or "{}").get("lifecycle", {}).get("origin", "")
        if filled.returncode != 10 or not origin.startswith("the signed TUF targets"):
            raise SystemExit(f"the uncached check did not answer through TUF: {filled.stdout}")
        check = [mux, "update", "--check", "--max-age", "1h"]
        return interleaved(
            {
                PASS: lambda: run_once([sys.executable, "-c", "pass"], install_env),
                CACHED: lambda: run_once(check, install_env),
            },
            rounds,
        )


def verdict(values: list[float], limit: float) -> str:
    return "met" if statistics.median(values) <= limit else "NOT met"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--update-rounds", type=int, default=5)
    parser.add_argument("--mib", type=int, default=64)
    args = parser.parse_args()
    print(load_average(), flush=True)
    with tempfile.TemporaryDirectory(prefix="mux-bench-released-tuf-") as scratch:
        tmp = Path(scratch)
        keypair = make_keypair(tmp / "keys")
        (tmp / "root.json").write_bytes(default_root())
        real = real_build(
            tmp / "build",
            version="0.1.0",
            protocol_version=1,
            repo=REPO,
            keys=[keypair.public_key],
            extra=[
                *("--tuf-root", str(tmp / "root.json")),
                *("--tuf-metadata-url", METADATA_URL),
            ],
        )
        size_mib = archive_size(real, tmp / "archive")
        (cached_work := tmp / "cached").mkdir()
        cached = cached_rounds(cached_work, real, keypair, args.rounds)
        print_table("the cached check", cached, PASS, targets={CACHED: "3x"})
        (uncached_work := tmp / "uncached").mkdir()
        uncached = measure_uncached(
            uncached_work, [str(real / "mux")], clean_env(uncached_work), args.rounds
        )
        print_table("the uncached check of a TUF feed", uncached, FLOOR_NAME, targets={MUX: "1.3x"})
        (update_work := tmp / "update").mkdir()
        update, update_mib = measure_update(
            update_work,
            keypair,
            real,
            [str(real / "mux")],
            {**clean_env(update_work), "MUX_REPO": REPO},
            mib=args.mib,
            rounds=args.update_rounds,
            tuf=True,
        )
        print_table(
            f"mux update through TUF, {update_mib:.1f} MiB archive",
            update,
            BARE,
            targets={"mux update": "1.15x"},
        )

    rows = [
        ("cached check vs python -c pass", ratios(cached[CACHED], cached[PASS]), 3.0),
        (
            "uncached TUF check vs python-tuf + httpx",
            ratios(uncached[MUX], uncached[FLOOR_NAME]),
            1.3,
        ),
        (
            f"mux update ({update_mib:.0f} MiB, TUF + five layers) vs curl",
            ratios(update["mux update"], update[BARE]),
            1.15,
        ),
    ]
    print("\nreleased build trusting a TUF root (median of per-round ratios, IQR)")
    for name, values, limit in rows:
        print(
            f"  {name:52} {describe_ratio(values):>22}  target {limit}x  {verdict(values, limit)}"
        )
    print(
        f"  {'archive mux-<target>.tar.gz':52} {size_mib:17.2f} MiB  target 20 MiB  "
        f"{'met' if size_mib <= 20 else 'NOT met'}"
    )
    record(Measure("archive mux-<target>.tar.gz", value=f"{size_mib:.2f} MiB", target="20 MiB"))
    print(load_average())
    write_results(__file__)


if __name__ == "__main__":
    main()
