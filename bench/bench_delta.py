"""`mux update` by a delta against a full update of the same pair of releases, in one run.

Run: uv run python bench/bench_delta.py [--old-build DIR --new-build DIR] [--rounds 7]

Two builds (``--old-build``/``--new-build``: real one-folder builds of two consecutive commits,
``mux-release build``; without them, stand-in builds of this checkout, 0.1.0 and 0.2.0) are
packaged into a loopback feed as the release workflow publishes them: the new release with its
file list and its delta from the old one (``mux-release delta``), every file in ``SHA256SUMS``
attested by a throwaway Sigstore (so all five layers run; each run is checked to print
``attestation: ok``), signed with minisign. Each round installs the old build afresh (with
itself, as users have it) and times ``mux update`` (the delta), then installs afresh again and
times ``mux update --no-delta`` (the full archive): the two in one round, so load slows both
alike. Bytes are what the server's request log says it sent of the build's files (the file
list, the delta, the archive); the metadata (``releases.json``, ``SHA256SUMS``, the manifest,
the bundle) is the same for both and listed apart. Also the peak RSS of a delta update, and
that the installed tree is byte-identical to a full install of the same release.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import http.server
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import (
    Measure,
    Samples,
    clean_env,
    describe_ratio,
    describe_seconds,
    load_average,
    record,
    record_ratio,
    write_results,
)

REPO = "acme/mux"


def _feed(tmp: Path, old: Path, new: Path, keypair: Any) -> tuple[Path, Path, str, str, str]:
    from release.build.standin import build_standin
    from release.folder.layout import read_build_info
    from release.publish.delta import write_deltas
    from release.publish.feed import sign_feed_index
    from release.publish.package import package_release, sign_release
    from release.rehearsal.fake_sigstore import FakeSigstore
    from updater.config.targets import detect_target

    feed = tmp / "feed"
    builds = []
    for version, build in (("0.1.0", old), ("0.2.0", new)):
        if build is None:
            build = build_standin(
                tmp / "builds" / version,
                version=version,
                protocol_version=1,
                repo=REPO,
                minisign_keys=[keypair.public_key],
                target=detect_target(),
            )
        builds.append(build)
    versions = [read_build_info(b).version for b in builds]
    sigstore = FakeSigstore.create(tmp / "sigstore")
    for version, build in zip(versions, builds, strict=True):
        package_release([build], feed / f"v{version}")
    report = write_deltas(feed / f"v{versions[1]}", [feed / f"v{versions[0]}"], say=print)
    if not any(d.published for d in report.deltas):
        raise SystemExit("no delta was published")
    for version in versions:
        sigstore.attest_release(feed / f"v{version}", version, repository=REPO)
        sign_release(feed / f"v{version}", keypair.secret_key())
    sign_feed_index(feed, keypair.secret_key(), new_feed=True)
    return (
        feed,
        sigstore.trusted_root_path,
        versions[0],
        versions[1],
        read_build_info(builds[0]).target,
    )


class _Log:
    def __init__(self) -> None:
        self.sent: list[tuple[str, int]] = []

    def handler(self, directory: Path) -> Any:
        log = self

        class Recording(http.server.SimpleHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def copyfile(self, source: Any, outputfile: Any) -> None:
                counted = 0
                while block := source.read(1 << 16):
                    outputfile.write(block)
                    counted += len(block)
                log.sent.append((self.path, counted))

        return functools.partial(Recording, directory=str(directory))


def _install(
    tmp: Path, env: dict[str, str], installer: Path, url: str, old: str, key: str, root: Path
):
    home, bin_dir = tmp / "home-mux", tmp / "bin"
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(bin_dir, ignore_errors=True)
    install_env = {
        **env,
        "MUX_INSTALL_DIR": str(bin_dir),
        "MUX_UPDATE_SOURCE": url,
        "MUX_SIGSTORE_TRUSTED_ROOT": str(root),
        "MUX_REPO": REPO,
    }
    result = subprocess.run(
        [str(installer), "update", "--home", str(home), "--version", old, "--trust-key", key],
        env=install_env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"installing {old} failed: {result.stderr.strip()[-500:]}")
    return install_env, home, bin_dir / "mux"


def _timed_update(mux: Path, env: dict[str, str], *args: str) -> tuple[float, float, int, str]:
    """Wall and CPU seconds (user + system, its children included) and peak RSS (KiB) of one
    `mux update`, which must pass every layer."""
    import time

    started = time.perf_counter()
    result = subprocess.run(
        ["/usr/bin/time", "-f", "%U %S %M", str(mux), "update", "-v", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if result.returncode != 0 or "attestation: ok" not in result.stdout:
        raise SystemExit(f"mux update did not pass every layer: {result.stdout}{result.stderr}")
    user, system, peak = result.stderr.strip().splitlines()[-1].split()
    return wall, float(user) + float(system), int(peak), result.stdout


def _tree(folder: Path) -> dict[str, str]:
    found = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        if path.is_symlink():
            found[key] = "-> " + os.readlink(path)
        elif path.is_file():
            found[key] = f"{hashlib.sha256(path.read_bytes()).hexdigest()} {path.stat().st_mode:o}"
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-build", type=Path, help="the installed build (mux-<target>/)")
    parser.add_argument("--new-build", type=Path, help="the build it updates to")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    if (args.old_build is None) != (args.new_build is None):
        raise SystemExit("give both --old-build and --new-build, or neither (stand-in builds)")
    from release.rehearsal.serve import serve_handler
    from tests.support.releases import make_keypair

    print(load_average())
    with tempfile.TemporaryDirectory(prefix="mux-bench-delta-") as scratch:
        tmp = Path(scratch)
        keypair = make_keypair(tmp / "keys")
        if args.old_build is not None:
            from release.folder.layout import read_build_info

            keys = read_build_info(args.old_build).trust.minisign_keys
            print(f"real builds: {args.old_build} -> {args.new_build}; they trust {keys}")
            keypair = _keypair_from(tmp, keys)
        feed, root, old, new, target = _feed(tmp, args.old_build, args.new_build, keypair)
        release = feed / f"v{new}"
        archive = release / f"mux-{target}.tar.gz"
        print(f"{archive.name}: {archive.stat().st_size} B")
        installer = (
            args.old_build / "mux"
            if args.old_build is not None
            else Path(sys.executable).with_name("mux")
        )
        env = clean_env(tmp)
        log = _Log()
        walls = {"delta": Samples(), "full": Samples()}
        sent: dict[str, list[int]] = {"delta": [], "full": []}
        metadata: dict[str, list[int]] = {"delta": [], "full": []}
        peaks: dict[str, list[int]] = {"delta": [], "full": []}
        trees: dict[str, dict[str, str]] = {}
        build_files = (
            f"mux-{target}.tar.gz",
            f"mux-{target}.files.json",
            f"mux-{target}.from-{old}.delta",
        )
        with serve_handler(log.handler(feed)) as url:
            for number in range(args.rounds):
                order = ("delta", "full") if number % 2 == 0 else ("full", "delta")
                for method in order:
                    install_env, home, mux = _install(
                        tmp, env, installer, url, old, keypair.public_key, root
                    )
                    log.sent.clear()
                    flags = () if method == "delta" else ("--no-delta",)
                    wall, cpu, peak, out = _timed_update(mux, install_env, *flags)
                    used = "a delta from" in out
                    if used != (method == "delta"):
                        raise SystemExit(f"the {method} run did not use what it asked: {out}")
                    walls[method].wall.append(wall)
                    walls[method].cpu.append(cpu)
                    peaks[method].append(peak)
                    of_build = sum(n for p, n in log.sent if p.rsplit("/", 1)[-1] in build_files)
                    sent[method].append(of_build)
                    metadata[method].append(sum(n for _, n in log.sent) - of_build)
                    trees[method] = _tree(home / "versions" / new)
        size = archive.stat().st_size
        print(f"\n{args.rounds} rounds, {old} -> {new}, all five layers, installed build updating")
        for method in ("delta", "full"):
            print(
                f"  {method:5}: wall {describe_seconds(walls[method].wall)}, "
                f"CPU {describe_seconds(walls[method].cpu)}; "
                f"build files sent {statistics.median(sent[method])} B "
                f"({100 * statistics.median(sent[method]) / size:.2f}% of the archive), "
                f"metadata {statistics.median(metadata[method])} B; "
                f"peak RSS {statistics.median(peaks[method]) / 1024:.1f} MiB "
                f"(max {max(peaks[method]) / 1024:.1f})"
            )
        ratio = [d / f for d, f in zip(walls["delta"].wall, walls["full"].wall, strict=True)]
        print(f"  wall, delta / full, per round: {describe_ratio(ratio)} (target <= 0.6x)")
        cpu = [d / f for d, f in zip(walls["delta"].cpu, walls["full"].cpu, strict=True)]
        print(f"  CPU, delta / full, per round: {describe_ratio(cpu)}")
        print(f"  bytes, delta / full: {statistics.median(sent['delta']) / size:.4f}")
        print(f"  installed trees identical: {trees['delta'] == trees['full']}")
        kind = "real builds" if args.old_build is not None else "stand-in builds"
        record_ratio(
            f"mux update by a delta ({kind}, {old} -> {new}): wall",
            ratio,
            "a full update of the same pair",
            value=f"{statistics.median(walls['delta'].wall) * 1000:.0f} ms median wall",
            target="0.6x",
        )
        record_ratio("  the same: CPU", cpu, "a full update of the same pair")
        record(
            Measure(
                "  the same: bytes of the build's files downloaded",
                "the archive",
                statistics.median(sent["delta"]) / size,
                value=f"{statistics.median(sent['delta'])} of {size} B",
                target="1 %",
            )
        )
    print(load_average())
    write_results(__file__)


def _keypair_from(tmp: Path, keys: list[str]) -> Any:
    """The key pair the real builds trust: MUX_BENCH_SECRET_KEY names its unencrypted minisign
    secret key file (``.pub`` beside it), since a build trusts only the keys baked into it."""
    from tests.support.releases import KeyPair

    path = os.environ.get("MUX_BENCH_SECRET_KEY")
    if not path:
        raise SystemExit("set MUX_BENCH_SECRET_KEY to the secret key the builds trust")
    public_path = Path(path).with_suffix(".pub")
    public = public_path.read_text().strip().splitlines()[-1]
    if public not in keys:
        raise SystemExit(f"{path}'s public key is not one the builds trust")
    return KeyPair(Path(path), public, None, public_path)


if __name__ == "__main__":
    main()
