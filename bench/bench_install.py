"""Wall time of a fresh `install.sh` from a loopback feed vs the bare minimum doing the same.

The release holds a realistic archive: a stand-in build with PAYLOAD_MIB of incompressible
data inside its folder. Each round runs, in the same conditions and alternating:

* install.sh (dash, curl): discovery, manifest + SHA256SUMS + minisign, download, SHA-256,
  unpack, smoke test, .mux-files, rename, link, record;
* the bare baseline: `curl -o` the archive and SHA256SUMS, `sha256sum -c`, `tar -x`,
  `ln -s`.

It prints the median of each and the ratio (target: install.sh within 1.3x).

    uv run python bench/bench_install.py [--rounds 7] [--payload-mib 48]
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

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from release.build import build_standin  # noqa: E402
from release.package import package_release  # noqa: E402
from tests.support.installsh import make_toolbox, render_install_sh  # noqa: E402
from tests.support.releases import (  # noqa: E402
    make_keypair,
    serve_directory,
    sign_index,
    sign_release_dir,
)
from updater._targets import detect_target  # noqa: E402

VERSION = "1.0.0"

BASELINE = r"""
set -eu
cd "$1"
curl -fsSL -o "mux-$3.tar.gz" "$2/v1.0.0/mux-$3.tar.gz"
curl -fsSL -o SHA256SUMS "$2/v1.0.0/SHA256SUMS"
sha256sum -c --ignore-missing --quiet SHA256SUMS
mkdir -p versions
tar -xzf "mux-$3.tar.gz" -C versions
ln -s "$PWD/versions/mux-$3/mux" mux
"""


def make_big_release(root: Path, payload_mib: int) -> tuple[Path, str]:
    keypair = make_keypair(root / "keys")
    target = detect_target()
    feed = root / "feed"
    with tempfile.TemporaryDirectory(prefix="mux-bench-build-") as scratch:
        build = build_standin(
            Path(scratch),
            target=target,
            version=VERSION,
            protocol_version=1,
            repo="",
            minisign_keys=[keypair.public_key],
        )
        with open(build / "lib" / "payload.bin", "wb") as out:
            for _ in range(payload_mib):
                out.write(os.urandom(1 << 20))
        release = feed / f"v{VERSION}"
        package_release([build], release, released_at="2024-01-01T00:00:00Z")
    sign_release_dir(release, keypair)
    sign_index(feed, keypair, refresh=False)
    return feed, keypair.public_key


def timed(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdin=subprocess.DEVNULL, capture_output=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--payload-mib", type=int, default=48)
    parser.add_argument(
        "--sha256sum-only",
        action="store_true",
        help="hide openssl from install.sh so it hashes with coreutils sha256sum, as the baseline",
    )
    args = parser.parse_args()

    target = detect_target()
    with tempfile.TemporaryDirectory(prefix="mux-bench-") as tmp:
        root = Path(tmp)
        print(f"building a release with {args.payload_mib} MiB of incompressible data...")
        feed, key = make_big_release(root, args.payload_mib)
        archive = feed / f"v{VERSION}" / f"mux-{target}.tar.gz"
        print(f"archive: {archive.stat().st_size / (1 << 20):.1f} MiB")
        script = render_install_sh(root / "install.sh", keys=[key])
        base_env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("MUX_", "XDG_")) and k not in ("GITHUB_PATH", "GITHUB_ACTIONS")
        }
        if args.sha256sum_only:
            tools = make_toolbox(root / "tools", downloader="curl", hashers=("sha256sum",))
            base_env = {**base_env, "PATH": str(tools)}
        ours: list[float] = []
        bare: list[float] = []
        with serve_directory(feed) as url:
            for round_number in range(args.rounds):
                home = root / f"home-{round_number}"
                home.mkdir()
                env = {
                    **base_env,
                    "HOME": str(home),
                    "MUX_DOWNLOAD_URL": url,
                    "MUX_NO_MODIFY_PATH": "1",
                    "NO_COLOR": "1",
                }
                ours.append(timed(["/usr/bin/dash", str(script), "--quiet"], env))
                plain = root / f"bare-{round_number}"
                plain.mkdir()
                bare.append(
                    timed(
                        ["/usr/bin/dash", "-c", BASELINE, "bare", str(plain), url, target], base_env
                    )
                )
                shutil.rmtree(home)
                shutil.rmtree(plain)
    ours_median = statistics.median(ours)
    bare_median = statistics.median(bare)
    hashing = "sha256sum" if args.sha256sum_only else "fastest hash tool"
    print(
        f"install.sh (dash, curl, minisign, {hashing}):          median {ours_median:.3f} s  (runs: {', '.join(f'{t:.3f}' for t in ours)})"
    )
    print(
        f"curl + sha256sum -c + tar -x + ln -s:        median {bare_median:.3f} s  (runs: {', '.join(f'{t:.3f}' for t in bare)})"
    )
    ratio = ours_median / bare_median
    print(f"ratio: {ratio:.2f}x (target: within 1.3x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
