"""The uncached `mux update --check` of a build that trusts a TUF root, against the floor of
the same work with python-tuf and httpx, in one run.

Run: uv run python bench/bench_tuf_check.py [--mode dev|build|both] [--rounds 15]

The feed is a loopback HTTP feed with a TUF repository made by the production tooling
(tests/support/tuf.py: root and targets 2 of 3, release-workflow delegated, consistent
snapshots) listing 0.1.0 and 9.0.0. The floor (issue 20's target: mux within 1.3x of it) is a
script doing only what the check must: import httpx, packaging, python-tuf and
cryptography's Ed25519; run python-tuf's `ngclient.Updater` refresh with an httpx fetcher
(bootstrapped from the same root, its trusted metadata kept between runs as mux keeps its
own); list release-workflow's targets and take the newest version; fetch `manifest.json`,
`SHA256SUMS` and `SHA256SUMS.minisig`, each checked against its signed length and sha256;
verify the minisign signature and its trusted comment and the manifest's digest; compare
versions. mux does the same plus its own work (settings, the lifecycle, the check cache,
the feed records, the live-server scan); its answer cache is removed before every run, its
trusted TUF metadata kept (as a second check on a machine finds it).

In `build` mode mux is the released one-folder build, made once per run with the feed's
root baked in (`mux-release build --tuf-root`); in `dev` mode the checkout's `.venv/bin/mux`
with the root given by `MUX_TUF_ROOT`. Rounds alternate their order; medians with the
interquartile range of per-round ratios, CPU, and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import (
    Samples,
    add_mode_argument,
    clean_env,
    dev_mux,
    load_average,
    print_table,
    real_build,
    run_once,
    selected_modes,
    write_results,
)
from bench_check_floor import VERIFY

from tests.support.releases import default_keypair, serve_directory
from tests.support.tuf import METADATA_URL, default_root, make_tuf_feed

FLOOR = r"""
import base64, hashlib, json, os, sys
import httpx
from packaging.version import Version
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from tuf.ngclient import FetcherInterface, Updater
from tuf.api.exceptions import DownloadHTTPError

feed, state, root_path, key_line, current = sys.argv[1:6]
client = httpx.Client()

class Fetcher(FetcherInterface):
    def _fetch(self, url):
        response = client.get(url)
        if response.status_code != 200:
            raise DownloadHTTPError(f"{url}: {response.status_code}", response.status_code)
        return iter([response.content])

os.makedirs(state, exist_ok=True)
with open(root_path, "rb") as f:
    root = f.read()
updater = Updater(state, f"{feed}/metadata/", fetcher=Fetcher(), bootstrap=root)
updater.refresh()
releases = updater._load_targets("release-workflow", "targets")
tags = [p.split("/")[0] for p in releases.targets if p.endswith("/manifest.json")]
tag = max(tags, key=lambda t: Version(t[1:]))
files = {}
for name in ("manifest.json", "SHA256SUMS", "SHA256SUMS.minisig"):
    info = updater.get_targetinfo(f"{tag}/{name}")
    data = client.get(f"{feed}/{tag}/{name}").raise_for_status().content
    assert len(data) == info.length and hashlib.sha256(data).hexdigest() == info.hashes["sha256"]
    files[name] = data
raw_key = base64.b64decode(key_line)
key = Ed25519PublicKey.from_public_bytes(raw_key[10:])
"""

MUX = "mux update --check (TUF, uncached)"
FLOOR_NAME = "floor: python-tuf + httpx, same work"


def measure(work: Path, mux: list[str], env: dict[str, str], rounds: int) -> dict[str, Samples]:
    feed = make_tuf_feed(work / "f", ["0.1.0", "9.0.0"])
    root = work / "root.json"
    root.write_bytes(default_root())
    (work / "floor.py").write_text(FLOOR + VERIFY)
    results = {FLOOR_NAME: Samples(), MUX: Samples()}
    with serve_directory(feed.path) as url:
        commands = {
            FLOOR_NAME: [
                sys.executable,
                str(work / "floor.py"),
                url,
                str(work / "floor-state"),
                str(root),
                feed.keypair.public_key,
                "0.1.0",
            ],
            # The floor checks no attestation (the feed carries none): neither does mux here.
            MUX: [
                *(*mux, "update", "--check", "--json", "--source", url),
                *("--trust-key", feed.keypair.public_key, "--insecure-skip-attestation"),
            ],
        }
        env = {**env, "MUX_TUF_ROOT": str(root)}
        for command in commands.values():  # warm-up: bytecode, page cache, trusted metadata
            for _ in range(2):
                run_once(command, env)
        # Both found the same newest release, from the TUF repository.
        floor = json.loads(
            subprocess.run(
                commands[FLOOR_NAME], env=env, capture_output=True, text=True, check=True
            ).stdout
        )
        checked = subprocess.run(
            commands[MUX], env=env, capture_output=True, text=True, check=False
        )
        answer = json.loads(checked.stdout)
        if floor != {"tag": "v9.0.0", "newer": True} or answer["latest"]["version"] != "9.0.0":
            raise SystemExit(f"the answers differ: {floor} {checked.stdout[:300]}")
        if not answer["lifecycle"]["origin"].startswith("the signed TUF targets"):
            raise SystemExit(f"mux did not read TUF: {answer['lifecycle']}")
        for round_number in range(rounds):
            order = list(commands) if round_number % 2 == 0 else list(reversed(commands))
            for name in order:
                shutil.rmtree(env["XDG_CACHE_HOME"], ignore_errors=True)
                wall, cpu = run_once(commands[name], env)
                results[name].wall.append(wall)
                results[name].cpu.append(cpu)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    add_mode_argument(parser)
    args = parser.parse_args()
    print(load_average())
    with tempfile.TemporaryDirectory(prefix="mux-bench-tuf-") as scratch:
        tmp = Path(scratch)
        for mode in selected_modes(args):
            work = tmp / mode
            work.mkdir()
            mux = dev_mux()
            if mode == "build":
                (work / "root.json").write_bytes(default_root())
                folder = real_build(
                    work / "build",
                    version="0.1.0",
                    protocol_version=1,
                    repo="acme/mux",
                    keys=[default_keypair().public_key],
                    extra=[
                        *("--tuf-root", str(work / "root.json")),
                        *("--tuf-metadata-url", METADATA_URL),
                    ],
                )
                mux = [str(folder / "mux")]
            results = measure(work, mux, clean_env(work), args.rounds)
            print_table(
                f"{mode}: the uncached check of a TUF feed on loopback, {args.rounds} rounds",
                results,
                FLOOR_NAME,
                targets={MUX: "1.3x"},
            )
    print()
    print(load_average())
    write_results(__file__)


if __name__ == "__main__":
    main()
