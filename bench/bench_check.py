"""Start-up cost of `mux version` and `mux update --check`, as ratios to `python -c pass`.

Run: uv run python bench/bench_check.py [--mode dev|build|both] [--rounds N]

Both modes in one run: `dev` runs this checkout's `mux`, `build` the real one-folder build
(`mux-release build`, made once for the run), published as v0.1.0 in the test feed and
installed from it by itself, then run through its `<bin>/mux` link as users run it (the
check of an installed build also reads the install's layout). The baseline is `python -c pass` with the
project's own interpreter (sys.executable, never a `python3` shim on PATH), measured in the
same rounds. Targets (issue 10, for the build): `mux version` ≤ 2.5x, a cached
`mux update --check --max-age 1h` ≤ 3x. The cached check is measured twice: alone, and with
one live mux server, which it asks for its status line (what a sidebar on a machine running
mux meets).
The uncached check (which verifies the signed index and the release's signed metadata since
issue 13) is shown for reference against `python -c pass`; its bar is
bench/bench_check_floor.py (within 1.3x of the same work done by a bare script).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

from _common import (
    add_mode_argument,
    clean_env,
    dev_mux,
    interleaved,
    load_average,
    print_table,
    real_build,
    run_once,
    selected_modes,
    write_results,
)

TARGETS = {
    "mux version": "2.5x",
    "mux version --json": "2.5x",
    "mux update --check --max-age 1h (cached)": "3x",
}


def measure(
    mux: list[str], env: dict[str, str], feed: Path, url: str, rounds: int, trust: tuple = ()
) -> dict:
    """``trust``: flags every check takes (a checkout trusts no key of its own)."""
    check = [*mux, "update", "--check", "--json", *trust]
    feeds = {"directory": {**env, "MUX_UPDATE_SOURCE": str(feed)}, "loopback": env}
    for warm_up in (check, [*mux, "version"], [*check, "--max-age", "1h"]):
        # Fills the check cache and, in dev mode, the bytecode caches.
        subprocess.run(warm_up, env=env, capture_output=True, check=False)
    commands = {
        "python -c pass": partial(run_once, [sys.executable, "-c", "pass"], env),
        "mux version": partial(run_once, [*mux, "version"], env),
        "mux version --json": partial(run_once, [*mux, "version", "--json"], env),
        "mux update --check --max-age 1h (cached)": partial(
            run_once, [*check, "--max-age", "1h"], env
        ),
    }
    fast = interleaved(commands, rounds)
    # What a sidebar on a machine running mux meets: the cached check also asks every live
    # server for its status line.
    subprocess.run([*mux, "server", "start"], env=env, capture_output=True, check=True)
    try:
        with_server = interleaved(
            {
                "python -c pass": commands["python -c pass"],
                "mux update --check --max-age 1h (cached, 1 live server)": partial(
                    run_once, [*check, "--max-age", "1h"], env
                ),
            },
            rounds,
        )
    finally:
        subprocess.run([*mux, "server", "stop"], env=env, capture_output=True, check=False)
    uncached = interleaved(
        {
            "python -c pass": commands["python -c pass"],
            "mux update --check (directory feed, uncached)": partial(
                run_once, check, feeds["directory"]
            ),
            "mux update --check (loopback HTTP feed, uncached)": partial(
                run_once, check, feeds["loopback"]
            ),
        },
        max(5, rounds // 3),
    )
    return {"fast": fast, "with_server": with_server, "uncached": uncached}


def install_real_build(folder: Path, feed, where: Path) -> Path:
    """Publish ``folder`` as v0.1.0 in ``feed``, install it with itself, and return the
    ``<bin>/mux`` link users run."""
    from release.publish.package import package_release
    from tests.support.releases import sign_index, sign_release_dir

    where.mkdir(parents=True, exist_ok=True)
    release = feed.path / "v0.1.0"
    package_release([folder], release, released_at="2024-01-01T00:00:00Z")
    sign_release_dir(release, feed.keypair)
    sign_index(feed.path, feed.keypair, refresh=False)
    env = {
        **clean_env(where),
        "MUX_UPDATE_SOURCE": str(feed.path),
        "MUX_INSTALL_DIR": str(where / "bin"),
    }
    home = where / "mux-home"
    result = subprocess.run(
        # The build knows its repository and so wants an attestation, which this local feed
        # has none of; this install only sets the scene for the start-up measurements.
        [
            str(folder / "mux"),
            "update",
            "--home",
            str(home),
            "--version",
            "0.1.0",
            "--insecure-skip-attestation",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"the real build did not install itself: {result.stderr[-500:]}")
    return where / "bin" / "mux"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    add_mode_argument(parser)
    args = parser.parse_args()

    from tests.support.releases import make_feed, serve_directory

    print(load_average())
    summary: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="mux-bench-") as scratch:
        tmp = Path(scratch)
        modes = selected_modes(args)
        feed = make_feed(tmp, versions=["9.0.0"] if "build" in modes else ["0.1.0", "9.0.0"])
        muxes = {}
        for mode in modes:
            if mode == "dev":
                muxes[mode] = dev_mux()
            else:
                folder = real_build(
                    tmp / "build",
                    version="0.1.0",
                    protocol_version=1,
                    repo="acme/mux",
                    keys=[feed.keypair.public_key],
                )
                muxes[mode] = [str(install_real_build(folder, feed, tmp / "installed"))]
        with serve_directory(feed.path) as url:
            for mode, mux in muxes.items():
                home = tmp / f"env-{mode}"
                home.mkdir()
                env = {**clean_env(home), "MUX_UPDATE_SOURCE": url}
                # A checkout has no key baked in: it checks the feed with the feed's own.
                trust = ("--trust-key", feed.keypair.public_key) if mode == "dev" else ()
                results = measure(mux, env, feed.path, url, args.rounds, trust)
                summary[mode] = print_table(
                    f"{mode}: start-up", results["fast"], "python -c pass", targets=TARGETS
                )
                summary[mode].update(
                    print_table(
                        f"{mode}: with a live server", results["with_server"], "python -c pass"
                    )
                )
                summary[mode].update(
                    print_table(f"{mode}: uncached", results["uncached"], "python -c pass")
                )
    print()
    print(load_average())
    write_results(__file__)
    print(json.dumps({mode: {k: round(v, 2) for k, v in r.items()} for mode, r in summary.items()}))


if __name__ == "__main__":
    main()
