"""Wall time of a fresh `install.sh` from a loopback feed vs the bare minimum doing the same.

The release holds a realistic archive: a stand-in build with PAYLOAD_MIB of incompressible
data inside its folder. Each round runs, in the same conditions and alternating:

* install.sh (dash, curl): discovery, manifest + SHA256SUMS + minisign, download, SHA-256,
  unpack, smoke test, .mux-files, rename, link, record;
* the bare baseline: `curl -o` the archive and SHA256SUMS, `sha256sum -c`, `tar -x`,
  `ln -s`.

It prints the median of each and the ratio (target: install.sh within 1.3x).

Modes (``--mode``, default both): ``dev`` packages a stand-in build (a sh launcher running this
checkout), ``build`` the real one-folder build (``mux-release build``, made once per run),
whose ``mux version --json`` is then what install.sh smoke-tests. Either way the archive is
padded with incompressible data to PAYLOAD_MIB MiB.

``--shell`` runs install.sh under another shell (mksh, posh, bash, ...), against the same
dash baseline.

    uv run python bench/bench_install.py [--mode dev|build|both] [--rounds 7] [--payload-mib 48]
                                         [--shell dash]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from _common import (  # noqa: E402
    Samples,
    add_mode_argument,
    add_payload,
    load_average,
    print_table,
    real_build,
    rebadge,
    selected_modes,
    write_results,
)

from release.build.standin import build_standin  # noqa: E402
from release.publish.package import package_release  # noqa: E402
from tests.support.installsh import (  # noqa: E402
    SHELLS,
    find_tool,
    make_toolbox,
    render_install_sh,
)
from tests.support.releases import (  # noqa: E402
    make_keypair,
    serve_directory,
    sign_index,
    sign_release_dir,
)
from updater.config.targets import detect_target  # noqa: E402

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


def make_big_release(root: Path, payload_mib: int, mode: str) -> tuple[Path, str]:
    keypair = make_keypair(root / "keys")
    target = detect_target()
    feed = root / "feed"
    with tempfile.TemporaryDirectory(prefix="mux-bench-build-") as scratch:
        if mode == "build":
            real = real_build(
                Path(scratch) / "real",
                version=VERSION,
                protocol_version=1,
                repo="",
                keys=[keypair.public_key],
            )
            # The build's own size counts towards the archive's: pad the rest.
            package_release([real], Path(scratch) / "sized", released_at="2024-01-01T00:00:00Z")
            own = (Path(scratch) / "sized" / f"mux-{target}.tar.gz").stat().st_size
            build = rebadge(real, Path(scratch) / "padded", version=VERSION, protocol_version=1)
        else:
            build = build_standin(
                Path(scratch),
                target=target,
                version=VERSION,
                protocol_version=1,
                repo="",
                minisign_keys=[keypair.public_key],
            )
            own = 0
        add_payload(build, (payload_mib << 20) - own)
        release = feed / f"v{VERSION}"
        package_release([build], release, released_at="2024-01-01T00:00:00Z")
    sign_release_dir(release, keypair)
    sign_index(feed, keypair, refresh=False)
    return feed, keypair.public_key


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run that must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdin=subprocess.DEVNULL, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(mode: str, root: Path, args: argparse.Namespace) -> None:
    target = detect_target()
    print(f"{mode}: building a release of {args.payload_mib} MiB (incompressible padding)...")
    feed, key = make_big_release(root, args.payload_mib, mode)
    archive = feed / f"v{VERSION}" / f"mux-{target}.tar.gz"
    script = render_install_sh(root / "install.sh", keys=[key])
    base_env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MUX_", "XDG_")) and k not in ("GITHUB_PATH", "GITHUB_ACTIONS")
    }
    if args.sha256sum_only:
        tools = make_toolbox(root / "tools", downloader="curl", hashers=("sha256sum",))
        base_env = {**base_env, "PATH": str(tools)}
    hashing = "sha256sum" if args.sha256sum_only else "fastest hash tool"
    first, *rest = SHELLS[args.shell]
    found = find_tool(first)
    if found is None:
        raise SystemExit(f"{first} is not installed")
    shell = [found, *rest]
    ours_name = f"install.sh ({args.shell}, curl, minisign, {hashing})"
    bare_name = "curl + sha256sum -c + tar -x + ln -s"
    results = {bare_name: Samples(), ours_name: Samples()}
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
            wall, cpu = timed([*shell, str(script), "--quiet"], env)
            results[ours_name].wall.append(wall)
            results[ours_name].cpu.append(cpu)
            plain = root / f"bare-{round_number}"
            plain.mkdir()
            wall, cpu = timed(
                ["/usr/bin/dash", "-c", BASELINE, "bare", str(plain), url, target], base_env
            )
            results[bare_name].wall.append(wall)
            results[bare_name].cpu.append(cpu)
            shutil.rmtree(home)
            shutil.rmtree(plain)
    print_table(
        f"{mode}: {archive.stat().st_size / (1 << 20):.1f} MiB archive, {args.rounds} rounds",
        results,
        bare_name,
        targets={ours_name: "1.3x"},
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--payload-mib", type=int, default=48)
    parser.add_argument(
        "--sha256sum-only",
        action="store_true",
        help="hide openssl from install.sh so it hashes with coreutils sha256sum, as the baseline",
    )
    parser.add_argument(
        "--shell",
        default="dash",
        choices=sorted(SHELLS),
        help="the shell install.sh runs under (the baseline always runs under dash)",
    )
    add_mode_argument(parser)
    args = parser.parse_args()
    print(load_average())
    for mode in selected_modes(args):
        with tempfile.TemporaryDirectory(prefix="mux-bench-") as tmp:
            measure(mode, Path(tmp), args)
    print()
    print(load_average())
    write_results(__file__)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
