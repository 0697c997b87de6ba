"""The attestation layer's own cost: importing sigstore and verifying one bundle.

Run: uv run python bench/bench_attestation.py [--runs N]

Measured in fresh processes against `python -c pass` in the same run, with a bundle from a
throwaway Sigstore instance (release.fake_sigstore) and its trusted root, so no network.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VERIFY = """
import sys
from pathlib import Path
from updater.attestation import AttestationIdentity, verify_attestation
bundle, digest, root = Path(sys.argv[1]).read_bytes(), sys.argv[2], Path(sys.argv[3])
identity = AttestationIdentity(repository="acme/mux",
                               signer_workflow=".github/workflows/release.yml",
                               ref="refs/tags/v1.0.0")
verify_attestation(bundle, digest, identity, trusted_root=root)
"""


def median(command: list[str], env: dict[str, str], runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    from release.fake_sigstore import FakeSigstore

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT)
    with tempfile.TemporaryDirectory(prefix="mux-bench-") as scratch:
        tmp = Path(scratch)
        env.update({"HOME": str(tmp), "XDG_CACHE_HOME": str(tmp / "cache")})
        instance = FakeSigstore.create(tmp / "sigstore")
        digest = hashlib.sha256(b"mux").hexdigest()
        bundle = tmp / "bundle.json"
        bundle.write_bytes(
            instance.attest({"mux.tar.gz": digest}, repository="acme/mux", ref="refs/tags/v1.0.0")
        )
        verify = [
            sys.executable,
            "-c",
            VERIFY,
            str(bundle),
            digest,
            str(instance.trusted_root_path),
        ]
        subprocess.run(verify, env=env, check=True)  # warm the bytecode cache
        results = {
            "python -c pass": median([sys.executable, "-c", "pass"], env, args.runs),
            "import updater.attestation": median(
                [sys.executable, "-c", "import updater.attestation"], env, args.runs
            ),
            "import sigstore + verify one bundle": median(verify, env, args.runs),
        }
    baseline = results["python -c pass"]
    for name, seconds in results.items():
        print(f"{name:40} {seconds * 1000:8.1f} ms {seconds / baseline:6.1f}x")
    cost = results["import sigstore + verify one bundle"] - baseline
    print(f"the attestation layer adds about {cost * 1000:.0f} ms to `mux update`")


if __name__ == "__main__":
    main()
