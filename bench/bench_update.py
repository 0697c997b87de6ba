"""`mux update` from a loopback feed vs the bare tools doing the same work, in one run.

Run: uv run python bench/bench_update.py [--mib 64] [--runs 3]

Baseline: `curl -o` + `sha256sum -c` + `tar -x` + `ln -sfn` on the same archive from the
same loopback server. mux does more (signature, three digests, a safe unpack, fsync, a smoke
test of the new build, the switch and the server report), which is the point of the ratio.
Also prints peak memory (max RSS) of `mux update` for an 8 MiB and a 256 MiB archive: it
should stay flat (streamed download and hash, streamed unpack).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def make_feed_with_payload(tmp: Path, mib: int):
    from release.build import build_standin, write_bill
    from release.package import package_release, sign_release
    from tests.support.releases import make_keypair, make_release, sign_index
    from updater._targets import detect_target

    keypair = make_keypair(tmp / "keys")
    feed = tmp / "feed"
    make_release(feed, "0.1.0", protocol_version=1, keypair=keypair)
    target = detect_target()
    build = build_standin(
        tmp / "builds",
        version="0.2.0",
        protocol_version=1,
        repo="",
        minisign_keys=[keypair.public_key],
        target=target,
    )
    # Incompressible, like real binaries; inside the package, so that the build's own notices
    # and SBOM (written again below, as a build writes them) account for it.
    with (build / "lib" / "updater" / "payload.bin").open("wb") as out:
        for _ in range(mib):
            out.write(os.urandom(1 << 20))
    write_bill(build, None)
    package_release([build], feed / "v0.2.0")
    sign_release(feed / "v0.2.0", keypair.secret_key())
    sign_index(feed, keypair, refresh=False)  # mux reads only a signed index
    return feed, keypair, target


def timed(command: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(
        command, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return time.perf_counter() - started


def fresh_install(tmp: Path, env: dict[str, str], url: str, key: str) -> dict[str, str]:
    home, bin_dir = tmp / "home-mux", tmp / "bin"
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(bin_dir, ignore_errors=True)
    install_env = {**env, "MUX_INSTALL_DIR": str(bin_dir), "MUX_UPDATE_SOURCE": url}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "updater",
            "update",
            "--home",
            str(home),
            "--version",
            "0.1.0",
            "--trust-key",
            key,
        ],
        env=install_env,
        check=True,
        capture_output=True,
    )
    return install_env


def bare_tools(tmp: Path, url: str, target: str, env: dict[str, str]) -> float:
    work = tmp / "bare"
    shutil.rmtree(work, ignore_errors=True)
    (work / "versions" / "0.2.0").mkdir(parents=True)
    archive = f"mux-{target}.tar.gz"
    script = (
        f"curl -fsS -o {archive} {url}/v0.2.0/{archive} && "
        f"curl -fsS -o SHA256SUMS {url}/v0.2.0/SHA256SUMS && "
        f"grep ' {archive}$' SHA256SUMS | sha256sum -c - >/dev/null && "
        f"tar -xzf {archive} -C versions/0.2.0 --strip-components=1 && "
        f"ln -sfn {work}/versions/0.2.0/mux {work}/mux"
    )
    return timed(["sh", "-c", script], env, cwd=work)


def peak_rss_kib(command: list[str], env: dict[str, str]) -> int:
    result = subprocess.run(
        ["/usr/bin/time", "-f", "%M", *command], env=env, check=True, capture_output=True, text=True
    )
    return int(result.stderr.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--memory", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    from tests.support.releases import serve_directory

    base_env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MUX_", "GITHUB_")) and k != "PYTHONDONTWRITEBYTECODE"
    }
    with tempfile.TemporaryDirectory(prefix="mux-bench-") as scratch:
        tmp = Path(scratch)
        base_env.update(
            {
                "HOME": str(tmp / "home"),
                "XDG_CACHE_HOME": str(tmp / "cache"),
                "XDG_RUNTIME_DIR": str(tmp / "run"),
            }
        )
        (tmp / "run").mkdir(mode=0o700)
        feed, keypair, target = make_feed_with_payload(tmp / "f", args.mib)
        with serve_directory(feed) as url:
            mux_times, bare_times = [], []
            for _ in range(args.runs):
                bare_times.append(bare_tools(tmp, url, target, base_env))
                env = fresh_install(tmp, base_env, url, keypair.public_key)
                mux_times.append(timed([str(tmp / "bin" / "mux"), "update"], env))
        mux, bare = statistics.median(mux_times), statistics.median(bare_times)
        print(f"archive: {args.mib} MiB of incompressible data")
        print(f"bare curl + sha256sum -c + tar -x + ln -sfn: {bare:6.2f} s (median of {args.runs})")
        print(f"mux update (all verification layers):        {mux:6.2f} s (median of {args.runs})")
        print(f"ratio: {mux / bare:.2f}x (target: within 1.5x)")

        if args.memory:
            peaks = {}
            for mib in (8, 256):
                sub = tmp / f"mem{mib}"
                sub.mkdir()
                feed, keypair, _ = make_feed_with_payload(sub, mib)
                with serve_directory(feed) as url:
                    env = fresh_install(sub, base_env, url, keypair.public_key)
                    peaks[mib] = peak_rss_kib([str(sub / "bin" / "mux"), "update"], env)
            for mib, kib in peaks.items():
                print(f"peak RSS of mux update with a {mib:3d} MiB archive: {kib / 1024:6.1f} MiB")
            print(f"difference: {(peaks[256] - peaks[8]) / 1024:.1f} MiB (target: within 10 MiB)")


if __name__ == "__main__":
    main()
