"""`mux update` from a loopback feed vs the bare tools doing the same work, in one run.

Run: uv run python bench/bench_update.py [--mode dev|build|both] [--mib 64] [--rounds 5]

The release is what the release workflow publishes: the archive (a build plus MIB MiB of
incompressible data, like real binaries), manifest.json, SHA256SUMS signed with minisign, and
a Sigstore bundle attesting the archive, made by a throwaway Sigstore instance whose trusted
root mux is given (MUX_SIGSTORE_TRUSTED_ROOT), as the release rehearsal does. So `mux update`
runs all five layers: signature, manifest/digest, attestation, archive, smoke test (each run
is checked to have printed `attestation: ok`). In `build` mode both releases are the real
one-folder build (made once per run) and the installed mux is that build; in `dev` mode they
are stand-in builds running this checkout.

Baseline, in the same rounds: `curl -o` + `sha256sum -c` + `tar -x` + `ln -sfn` on the same
archive from the same loopback server. Target (issue 10): within 1.15x.

Also prints peak memory (max RSS) of `mux update` for an 8 MiB and a 256 MiB archive
(`--memory`): it should stay flat (streamed download and hash, streamed unpack).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from _common import (
    Measure,
    Samples,
    add_mode_argument,
    add_payload,
    clean_env,
    dev_mux,
    load_average,
    print_table,
    real_build,
    rebadge,
    record,
    run_once,
    selected_modes,
    write_results,
)

REPO = "acme/mux"


@dataclass
class Feed:
    path: Path
    public_key: str
    trusted_root: Path
    target: str


def make_feed(tmp: Path, mib: int, keypair, real: Path | None, *, tuf: bool = False) -> Feed:
    """v0.1.0 (what is installed) and v0.2.0, signed and attested; v0.2.0 carries enough
    incompressible data for its archive to weigh ``mib`` MiB. With ``tuf``: the feed has a
    TUF repository listing both (tests/support/tuf.py's root v1, which ``real`` must trust;
    stand-in builds are made trusting it)."""
    from release.build.standin import build_standin
    from release.publish.feed import sign_feed_index
    from release.publish.package import package_release, sign_release
    from release.rehearsal.fake_sigstore import FakeSigstore
    from tests.support.tuf import METADATA_URL, add_repository, default_root
    from updater.config.targets import detect_target
    from updater.formats import models

    target = detect_target()
    sigstore = FakeSigstore.create(tmp / "sigstore")
    feed = tmp / "feed"
    build_archive_size = 0
    for version in ("0.1.0", "0.2.0"):
        scratch = tmp / "builds" / version
        scratch.mkdir(parents=True)
        if real is None:
            build = build_standin(
                scratch,
                version=version,
                protocol_version=1,
                repo=REPO,
                minisign_keys=[keypair.public_key],
                target=target,
                **({"tuf_root": default_root(), "tuf_metadata_url": METADATA_URL} if tuf else {}),
            )
        elif version == "0.1.0":
            build = real
        else:
            build = rebadge(real, scratch, version=version, protocol_version=1)
        if version == "0.2.0":
            add_payload(build, (mib << 20) - build_archive_size)
        release = feed / models.tag_for(version)
        package_release([build], release)
        build_archive_size = (release / models.archive_name(target)).stat().st_size
        sigstore.attest_release(release, version, repository=REPO)
        sign_release(release, keypair.secret_key())
        if version == "0.2.0" and real is None:
            shutil.rmtree(scratch)
    sign_feed_index(feed, keypair.secret_key(), new_feed=True)  # as a real feed publishes
    if tuf:
        add_repository(feed)
    return Feed(feed, keypair.public_key, sigstore.trusted_root_path, target)


def fresh_install(
    tmp: Path, env: dict[str, str], url: str, feed: Feed, installer: list[str]
) -> dict[str, str]:
    """Install v0.1.0 into a fresh MUX_HOME with ``installer``; the env that runs its mux."""
    home, bin_dir = tmp / "home-mux", tmp / "bin"
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(bin_dir, ignore_errors=True)
    install_env = {
        **env,
        "MUX_INSTALL_DIR": str(bin_dir),
        "MUX_UPDATE_SOURCE": url,
        "MUX_SIGSTORE_TRUSTED_ROOT": str(feed.trusted_root),
    }
    key = feed.public_key
    result = subprocess.run(
        [*installer, "update", "--home", str(home), "--version", "0.1.0", "--trust-key", key],
        env=install_env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"installing 0.1.0 failed: {result.stderr.strip()[-500:]}")
    return install_env


def bare_tools(tmp: Path, url: str, target: str, env: dict[str, str]) -> tuple[float, float]:
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
    return run_once(["sh", "-c", script], env, cwd=work)


def checked_update(mux: Path, env: dict[str, str]) -> tuple[float, float]:
    """One timed `mux update`, which must have run every layer."""
    import resource
    import time

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(
        [str(mux), "update", "-v"], env=env, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0 or "attestation: ok" not in result.stdout:
        raise SystemExit(f"mux update did not pass every layer: {result.stdout}{result.stderr}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


BARE = "curl + sha256sum -c + tar -x + ln -sfn"


def measure_update(
    work: Path,
    keypair,
    real: Path | None,
    installer: list[str],
    env: dict[str, str],
    *,
    mib: int,
    rounds: int,
    tuf: bool = False,
) -> tuple[dict[str, Samples], float]:
    """``rounds`` interleaved rounds of the bare tools and a fresh ``mux update`` (installed
    with ``installer``: the real build when ``real`` is given); the samples and the archive's
    size in MiB."""
    from tests.support.releases import serve_directory

    feed = make_feed(work / "f", mib, keypair, real, tuf=tuf)
    archive = feed.path / "v0.2.0" / f"mux-{feed.target}.tar.gz"
    results = {BARE: Samples(), "mux update": Samples()}
    with serve_directory(feed.path) as url:
        for _ in range(rounds):
            wall, cpu = bare_tools(work, url, feed.target, env)
            results[BARE].wall.append(wall)
            results[BARE].cpu.append(cpu)
            install_env = fresh_install(work, env, url, feed, installer)
            wall, cpu = checked_update(work / "bin" / "mux", install_env)
            results["mux update"].wall.append(wall)
            results["mux update"].cpu.append(cpu)
    return results, archive.stat().st_size / (1 << 20)


def peak_rss_kib(command: list[str], env: dict[str, str]) -> int:
    result = subprocess.run(
        ["/usr/bin/time", "-f", "%M", *command], env=env, check=True, capture_output=True, text=True
    )
    return int(result.stderr.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--memory", action=argparse.BooleanOptionalAction, default=True)
    add_mode_argument(parser)
    args = parser.parse_args()
    from tests.support.releases import make_keypair, serve_directory

    print(load_average())
    with tempfile.TemporaryDirectory(prefix="mux-bench-") as scratch:
        tmp = Path(scratch)
        keypair = make_keypair(tmp / "keys")
        for mode in selected_modes(args):
            work = tmp / mode
            work.mkdir()
            env = clean_env(work)
            real = None
            installer = dev_mux()
            # A checkout names no repository; the attestation must name the one it verifies.
            env["MUX_REPO"] = REPO
            if mode == "build":
                real = real_build(
                    work / "build",
                    version="0.1.0",
                    protocol_version=1,
                    repo=REPO,
                    keys=[keypair.public_key],
                )
                installer = [str(real / "mux")]
            results, archive_mib = measure_update(
                work, keypair, real, installer, env, mib=args.mib, rounds=args.rounds
            )
            print_table(
                f"{mode}: {archive_mib:.1f} MiB archive, all five layers "
                f"(attestation included), {args.rounds} rounds",
                results,
                BARE,
                targets={"mux update": "1.15x"},
            )
            if args.memory:
                peaks = {}
                for mib in (8, 256):
                    sub = work / f"mem{mib}"
                    sub.mkdir()
                    memory_real = None
                    if real is not None:
                        memory_real = rebadge(real, sub, version="0.1.0", protocol_version=1)
                    memory_feed = make_feed(sub / "f", mib, keypair, memory_real)
                    with serve_directory(memory_feed.path) as url:
                        install_env = fresh_install(sub, env, url, memory_feed, installer)
                        peaks[mib] = peak_rss_kib([str(sub / "bin" / "mux"), "update"], install_env)
                    shutil.rmtree(sub)
                for mib, kib in peaks.items():
                    print(f"  peak RSS of mux update, {mib:3d} MiB archive: {kib / 1024:6.1f} MiB")
                print(
                    f"  difference: {(peaks[256] - peaks[8]) / 1024:.1f} MiB (target: within 10 MiB)"
                )
                record(
                    Measure(
                        f"{mode}: peak RSS of mux update, 256 MiB vs 8 MiB archive",
                        value=f"{peaks[256] / 1024:.1f} MiB vs {peaks[8] / 1024:.1f} MiB",
                        target="within 10 MiB",
                    )
                )
    print()
    print(load_average())
    write_results(__file__)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
