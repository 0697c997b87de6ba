"""The uncached `mux update --check` against the floor of the same work, in one run.

Run: uv run python bench/bench_check_floor.py [--rounds 15]

The floor (issue 13) is a script doing only what the check must do, with the same libraries:
import httpx, packaging and cryptography's Ed25519, follow GitHub's `/releases/latest`
redirect, fetch `manifest.json`, `SHA256SUMS` and `SHA256SUMS.minisig` (through the
download redirect), verify the minisign signature (prehashed, and its trusted comment) and
the manifest's digest, and compare versions. Both run against the same loopback GitHub
impersonator (tests/support/github.py), as fresh processes with bytecode cached. mux does a
little more on top (its settings, the check cache, the feed-seq and install-record reads,
the live-server scan): the ratio shows what that costs. Target: within 1.3x.

The machine may be shared: rounds are interleaved (floor and mux alternate, in alternating
order), and both wall-clock and CPU time (user + system of the child, from wait4) are
reported as medians with their spread (min-max and the interquartile range). Every mux run
starts without a cache (the answer cache and the ETag store): the check must do the whole
work each time.
"""

from __future__ import annotations

import argparse
import json
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

from _common import record_ratio, write_results  # noqa: E402

FLOOR = r"""
import base64, hashlib, json, sys
import httpx
from packaging.version import Version
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

web, repo, key_line, current = sys.argv[1:5]
raw_key = base64.b64decode(key_line)
key = Ed25519PublicKey.from_public_bytes(raw_key[10:])
with httpx.Client() as client:
    latest = client.get(f"{web}/{repo}/releases/latest")
    tag = latest.headers["location"].rstrip("/").rpartition("/releases/tag/")[2]
    base = f"{web}/{repo}/releases/download/{tag}"
    files = {
        name: client.get(f"{base}/{name}", follow_redirects=True).raise_for_status().content
        for name in ("manifest.json", "SHA256SUMS", "SHA256SUMS.minisig")
    }
"""

# What every floor does with the three documents once it has them (``files``, ``tag``,
# ``raw_key``, ``key``, ``current``): the minisign signature and its trusted comment, the
# manifest's digest, the versions compared (bench_tuf_check.py's floor ends the same way).
VERIFY = r"""
lines = files["SHA256SUMS.minisig"].decode().splitlines()
signature, comment = base64.b64decode(lines[1]), lines[2].removeprefix("trusted comment: ")
assert signature[2:10] == raw_key[2:10]
key.verify(signature[10:], hashlib.blake2b(files["SHA256SUMS"], digest_size=64).digest())
key.verify(base64.b64decode(lines[3]), signature[10:] + comment.encode())
sums = dict(reversed(line.split("  ", 1)) for line in files["SHA256SUMS"].decode().splitlines())
assert sums["manifest.json"] == hashlib.sha256(files["manifest.json"]).hexdigest()
manifest = json.loads(files["manifest.json"])
print(json.dumps({"tag": tag, "newer": Version(manifest["version"]) > Version(current)}))
"""


def run_once(command: list[str], env: dict[str, str]) -> tuple[float, float, bytes]:
    """(wall seconds, child CPU seconds, stdout) of one run, with no cache from the last one:
    a check that knows the tag from an earlier answer skips the release's documents, and
    this measures the whole verified work."""
    shutil.rmtree(env["XDG_CACHE_HOME"], ignore_errors=True)
    started = time.perf_counter()
    process = subprocess.Popen(
        command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    out, err = process.stdout.read(), process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 10):
        raise SystemExit(f"{command[:3]} exited {code}: {err.decode()[-400:]}")
    return wall, usage.ru_utime + usage.ru_stime, out


def spread(samples: list[float]) -> str:
    quartiles = statistics.quantiles(samples, n=4)
    return (
        f"median {statistics.median(samples) * 1000:7.1f} ms  "
        f"IQR {quartiles[0] * 1000:6.1f}-{quartiles[2] * 1000:6.1f}  "
        f"min-max {min(samples) * 1000:6.1f}-{max(samples) * 1000:6.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    from tests.support.github import FakeGitHub, serve_github
    from tests.support.releases import make_keypair, make_release

    mux = [str(Path(sys.executable).with_name("mux"))]
    with tempfile.TemporaryDirectory(prefix="mux-bench-floor-") as scratch:
        tmp = Path(scratch)
        keypair = make_keypair(tmp / "keys")
        for version in ("0.1.0", "9.0.0"):
            make_release(tmp / "releases", version, protocol_version=1, keypair=keypair)
        (tmp / "floor.py").write_text(FLOOR + VERIFY)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("MUX_", "GITHUB_", "XDG_")) and k != "PYTHONDONTWRITEBYTECODE"
        }
        env.update(
            {
                "HOME": str(tmp / "home"),
                "XDG_CACHE_HOME": str(tmp / "cache"),
                "XDG_STATE_HOME": str(tmp / "state"),
                "XDG_RUNTIME_DIR": str(tmp / "run"),
            }
        )
        (tmp / "run").mkdir(mode=0o700)
        with serve_github(FakeGitHub(root=tmp / "releases", repo="acme/mux")) as github:
            env.update(
                MUX_GITHUB_URL=github.web_url,
                MUX_GITHUB_API_URL=github.api_url,
                MUX_REPO="acme/mux",
            )
            from updater.config.buildinfo import current

            commands = {
                "floor": [
                    sys.executable,
                    str(tmp / "floor.py"),
                    github.web_url,
                    "acme/mux",
                    keypair.public_key,
                    current().version,
                ],
                "mux": [*mux, "update", "--check", "--json", "--trust-key", keypair.public_key],
            }
            for command in commands.values():  # warm-up: bytecode, page cache
                for _ in range(2):
                    run_once(command, env)
            wall: dict[str, list[float]] = {name: [] for name in commands}
            cpu: dict[str, list[float]] = {name: [] for name in commands}
            for round_number in range(args.rounds):
                order = list(commands) if round_number % 2 == 0 else list(reversed(commands))
                for name in order:
                    seconds, used, out = run_once(commands[name], env)
                    wall[name].append(seconds)
                    cpu[name].append(used)
                    if name == "mux":
                        assert json.loads(out)["latest"]["version"] == "9.0.0"
    for what, samples in (("wall", wall), ("cpu", cpu)):
        for name in commands:
            print(f"{what:4} {name:5}  {spread(samples[name])}")
    ratios = {
        what: statistics.median(samples["mux"]) / statistics.median(samples["floor"])
        for what, samples in (("wall", wall), ("cpu", cpu))
    }
    paired = [m / f for m, f in zip(wall["mux"], wall["floor"], strict=True)]
    print(
        f"ratio mux/floor: wall {ratios['wall']:.2f}x, cpu {ratios['cpu']:.2f}x "
        f"(per-round wall ratios {min(paired):.2f}-{max(paired):.2f}; target: within 1.3x)"
    )
    print(json.dumps({k: round(v, 3) for k, v in ratios.items()}))
    record_ratio(
        "the uncached check (GitHub source), development checkout",
        paired,
        "the floor: httpx, packaging and Ed25519 doing the same work",
        value=f"CPU {ratios['cpu']:.2f}x (ratio of medians)",
        target="1.3x",
    )
    write_results(__file__)


if __name__ == "__main__":
    main()
