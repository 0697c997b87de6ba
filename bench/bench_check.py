"""Start-up cost of `mux version` and `mux update --check`, as ratios to `python -c pass`.

Run: uv run python bench/bench_check.py [--runs N]

Everything is measured in the same run with the project's own interpreter (sys.executable),
never a `python3` shim on PATH. Targets (issue 2): `mux version` and a cached
`mux update --check --max-age 1h` under 6x. The uncached check (which verifies the signed
index and the release's signed metadata since issue 13) is shown for reference; its bar is
bench/bench_check_floor.py (within 1.3x of the same work done by a bare script), which
replaced the old 10x, a bar the libraries' import time alone exceeds here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def median_seconds(command: list[str], env: dict[str, str], runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
        )
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()

    from tests.support.releases import make_feed, serve_directory

    mux = [str(Path(sys.executable).with_name("mux"))]
    with tempfile.TemporaryDirectory(prefix="mux-bench-") as scratch:
        tmp = Path(scratch)
        feed = make_feed(tmp, versions=["0.1.0", "9.0.0"])
        # Measure what users get: bytecode cached (a release build ships it precompiled).
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("MUX_", "GITHUB_")) and k != "PYTHONDONTWRITEBYTECODE"
        }
        env.update(
            {
                "HOME": str(tmp / "home"),
                "XDG_CACHE_HOME": str(tmp / "cache"),
                "XDG_RUNTIME_DIR": str(tmp / "run"),
            }
        )
        (tmp / "run").mkdir(mode=0o700)
        with serve_directory(feed.path) as url:
            env["MUX_UPDATE_SOURCE"] = url
            check = [*mux, "update", "--check", "--json", "--trust-key", feed.keypair.public_key]
            for warm_up in (check, [*mux, "version"], [*check, "--max-age", "1h"]):
                subprocess.run(warm_up, env=env, capture_output=True, check=False)
            results = {
                "python -c pass": median_seconds([sys.executable, "-c", "pass"], env, args.runs),
                "mux version": median_seconds([*mux, "version"], env, args.runs),
                "mux version --json": median_seconds([*mux, "version", "--json"], env, args.runs),
                "mux update --check --max-age 1h (cached)": median_seconds(
                    [*check, "--max-age", "1h"], env, args.runs
                ),
                "mux update --check (loopback feed, uncached)": median_seconds(
                    check, env, max(5, args.runs // 3)
                ),
            }
    baseline = results["python -c pass"]
    limits = {
        "mux version": 6,
        "mux version --json": 6,
        "mux update --check --max-age 1h (cached)": 6,
    }
    print(f"{'command':48} {'median':>9} {'ratio':>7} {'target':>7}")
    for name, seconds in results.items():
        limit = limits.get(name)
        print(
            f"{name:48} {seconds * 1000:7.1f}ms {seconds / baseline:6.2f}x "
            f"{('<' + str(limit) + 'x') if limit else '':>7}"
        )
    print(json.dumps({k: round(v / baseline, 2) for k, v in results.items()}))


if __name__ == "__main__":
    main()
