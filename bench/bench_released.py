"""Start-up (the fast paths), `mux update` and the archive, on the released build, in one run.

Run: uv run python bench/bench_released.py [--rounds 21] [--update-rounds 7] [--mib 64]

One real one-folder build (`mux-release build`) serves every row:

* the archive `mux-release package` writes for it (gzip), and the folder it unpacks to;
* start-up, with the build published in a loopback feed and installed from it by itself, run
  through its `<bin>/mux` link as users run it: `mux version`, a cached
  `mux update --check --max-age 1h` alone and with one live mux server (what a sidebar meets),
  and the uncached check of a directory feed and of a loopback HTTP feed; each against
  `python -c pass` (the project's interpreter) in interleaved rounds (bench_check.py);
* instructions executed by the start-up commands (valgrind's callgrind, every exec'd image
  counted), which a busy machine does not change;
* `mux update` with all five layers, a 64 MiB archive and a Sigstore bundle, against
  curl + sha256sum + tar + ln on the same archive from the same server (bench_update.py).

Ratios are medians of per-round ratios with their interquartile range; the load average is
printed before and after. The uncached rows are reported against `python -c pass` only; their
target (within 1.3x of the floor of the same work with the same libraries) is bench_check_floor.py's.
"""

from __future__ import annotations

import argparse
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
    load_average,
    print_table,
    ratios,
    real_build,
    record,
    write_results,
)
from bench_check import install_real_build, measure
from bench_standalone import folder_size, instructions
from bench_update import BARE, measure_update

ROOT = Path(__file__).resolve().parent.parent


def archive_size(folder: Path, work: Path) -> float:
    """MiB of the ``mux-<target>.tar.gz`` that ``mux-release package`` writes for ``folder``."""
    from release.folder.archive import write_archive
    from release.folder.layout import read_build_info

    work.mkdir(parents=True, exist_ok=True)
    target = read_build_info(folder).target
    archive = work / f"mux-{target}.tar.gz"
    write_archive(folder, target, archive)
    return archive.stat().st_size / (1 << 20)


def counted(mux: Path, env: dict[str, str]) -> dict[str, int | None]:
    """Instructions of the start-up commands (None without valgrind)."""
    check = [str(mux), "update", "--check", "--max-age", "1h"]
    counts = {
        "python -c pass": instructions([sys.executable, "-c", "pass"], env),
        "mux version": instructions([str(mux), "version"], env),
        "cached check": instructions(check, env),
    }
    subprocess.run([str(mux), "server", "start"], env=env, capture_output=True, check=True)
    try:
        counts["cached check, 1 live server"] = instructions(check, env)
    finally:
        subprocess.run([str(mux), "server", "stop"], env=env, capture_output=True, check=False)
    return counts


def row(name: str, samples: Samples, base: Samples, target: str, limit: float | None) -> str:
    ratio = ratios(samples, base)
    median = statistics.median(ratio)
    verdict = "" if limit is None else ("met" if median <= limit else "NOT met")
    wall = statistics.median(samples.wall) * 1000
    cpu = statistics.median(samples.cpu) * 1000
    return (
        f"  {name:46} {describe_ratio(ratio):>24} {wall:9.1f} ms {cpu:9.1f} ms "
        f"{target:>8} {verdict:>8}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21, help="start-up rounds")
    parser.add_argument("--update-rounds", type=int, default=7)
    parser.add_argument("--mib", type=int, default=64, help="archive size for mux update")
    parser.add_argument("--no-instructions", action="store_true", help="skip callgrind")
    args = parser.parse_args()
    from tests.support.releases import make_feed, make_keypair, serve_directory

    print(load_average(), flush=True)
    with tempfile.TemporaryDirectory(prefix="mux-bench-released-") as scratch:
        tmp = Path(scratch)
        keypair = make_keypair(tmp / "keys")
        feed = make_feed(tmp / "startup", versions=["9.0.0"], keypair=keypair)
        real = real_build(
            tmp / "build",
            version="0.1.0",
            protocol_version=1,
            repo="acme/mux",
            keys=[keypair.public_key],
        )
        size_mib = archive_size(real, tmp / "archive")
        unpacked, files = folder_size(real)
        mux = install_real_build(real, feed, tmp / "installed")
        env = {**clean_env(tmp / "installed"), "MUX_UPDATE_SOURCE": str(feed.path)}
        with serve_directory(feed.path) as url:
            env["MUX_UPDATE_SOURCE"] = url
            startup = measure([str(mux)], env, feed.path, url, args.rounds)
            counts = {} if args.no_instructions else counted(mux, env)
        print_table(
            "start-up of the installed build",
            startup["fast"],
            "python -c pass",
            targets={"mux version": "2.5x", "mux update --check --max-age 1h (cached)": "3x"},
        )
        print_table(
            "with a live server",
            startup["with_server"],
            "python -c pass",
            targets={"mux update --check --max-age 1h (cached, 1 live server)": "3x"},
        )
        print_table("uncached", startup["uncached"], "python -c pass")
        work = tmp / "update"
        work.mkdir()
        update, update_mib = measure_update(
            work,
            keypair,
            real,
            [str(real / "mux")],
            clean_env(work),
            mib=args.mib,
            rounds=args.update_rounds,
        )
        print_table(
            f"mux update, {update_mib:.1f} MiB archive, five layers",
            update,
            BARE,
            targets={"mux update": "1.15x"},
        )

    fast, served, uncached = startup["fast"], startup["with_server"], startup["uncached"]
    base = fast["python -c pass"]
    print("\nreleased build (ratios: median of per-round ratios, IQR)")
    print(f"  {'measure':46} {'ratio (IQR)':>24} {'wall':>12} {'CPU':>12} {'target':>8} {'':>8}")
    print(row("mux version", fast["mux version"], base, "2.5x", 2.5))
    print(
        row(
            "update --check --max-age 1h (cached)",
            fast["mux update --check --max-age 1h (cached)"],
            base,
            "3x",
            3.0,
        )
    )
    print(
        row(
            "  the same, 1 live server",
            served["mux update --check --max-age 1h (cached, 1 live server)"],
            served["python -c pass"],
            "3x",
            3.0,
        )
    )
    for name in ("directory feed", "loopback HTTP feed"):
        key = next(k for k in uncached if name in k)
        print(
            row(
                f"update --check, uncached, {name}",
                uncached[key],
                uncached["python -c pass"],
                "",
                None,
            )
        )
    print(
        row(
            f"mux update, {update_mib:.0f} MiB, five layers",
            update["mux update"],
            update[BARE],
            "1.15x",
            1.15,
        )
    )
    verdict = "met" if size_mib <= 20 else "NOT met"
    print(
        f"  {'archive mux-<target>.tar.gz':46} {size_mib:21.2f} MiB "
        f"({unpacked / (1 << 20):.1f} MiB unpacked, {files} files) {'20 MiB':>8} {verdict:>8}"
    )
    record(
        Measure(
            "archive mux-<target>.tar.gz",
            value=f"{size_mib:.2f} MiB ({unpacked / (1 << 20):.1f} MiB unpacked, {files} files)",
            target="20 MiB",
        )
    )
    if counts:
        base_count = counts["python -c pass"]
        print("\ninstructions (callgrind, every exec'd image)")
        for name, count in counts.items():
            if count is None or base_count is None:
                print(f"  {name:46} n/a (valgrind not installed)")
                continue
            print(f"  {name:46} {count / 1e6:8.1f} M  {count / base_count:5.2f}x")
            if name != "python -c pass":
                record(
                    Measure(
                        f"instructions (callgrind): {name}",
                        "python -c pass",
                        count / base_count,
                        value=f"{count / 1e6:.1f} M",
                    )
                )
    print(load_average())
    write_results(__file__)


if __name__ == "__main__":
    main()
