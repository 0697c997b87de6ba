"""The attestation layer's own cost: importing sigstore and verifying one bundle.

Run: uv run python bench/bench_attestation.py [--mode dev|build|both] [--rounds N]

Bundles come from a throwaway Sigstore instance (release.rehearsal.fake_sigstore) with its
trusted root, so no network. Two measurements, in the same rounds:

* dev mode only: in fresh processes, `python -c pass`, `import updater.trust.attestation` and
  "import sigstore + verify one bundle" (the library call `mux update` makes);
* both modes: `mux update` of a small release with every layer against the same update with
  `--insecure-skip-attestation`; the difference is what the layer costs where users run it
  (the real build has no `python -c` to time the library call alone).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
from functools import partial
from pathlib import Path

from _common import (
    Samples,
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
from bench_update import REPO, fresh_install, make_feed

VERIFY = """
import sys
from pathlib import Path
from updater.trust.attestation import AttestationIdentity, verify_attestation
bundle, digest, root = Path(sys.argv[1]).read_bytes(), sys.argv[2], Path(sys.argv[3])
identity = AttestationIdentity(repository="acme/mux",
                               signer_workflow=".github/workflows/release.yml",
                               ref="refs/tags/v1.0.0")
verify_attestation(bundle, digest, identity, trusted_root=root)
"""


def library_call(tmp: Path, rounds: int) -> None:
    from release.rehearsal.fake_sigstore import FakeSigstore

    env = clean_env(tmp)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    instance = FakeSigstore.create(tmp / "sigstore")
    digest = hashlib.sha256(b"mux").hexdigest()
    bundle = tmp / "bundle.json"
    bundle.write_bytes(
        instance.attest({"mux.tar.gz": digest}, repository="acme/mux", ref="refs/tags/v1.0.0")
    )
    verify = [sys.executable, "-c", VERIFY, str(bundle), digest, str(instance.trusted_root_path)]
    run_once(verify, env)  # warm the bytecode cache
    results = interleaved(
        {
            "python -c pass": partial(run_once, [sys.executable, "-c", "pass"], env),
            "import updater.trust.attestation": partial(
                run_once, [sys.executable, "-c", "import updater.trust.attestation"], env
            ),
            "import sigstore + verify one bundle": partial(run_once, verify, env),
        },
        rounds,
    )
    print_table("dev: the library call in a fresh process", results, "python -c pass")
    cost = statistics.median(
        results["import sigstore + verify one bundle"].wall
    ) - statistics.median(results["python -c pass"].wall)
    print(f"  the layer's library call costs about {cost * 1000:.0f} ms")


def layer_in_update(mode: str, tmp: Path, rounds: int, keypair) -> None:
    from tests.support.releases import serve_directory

    # A checkout names no repository; the attestation must name the one it verifies.
    env = {**clean_env(tmp), "MUX_REPO": REPO}
    real, installer = None, dev_mux()
    if mode == "build":
        real = real_build(
            tmp / "build", version="0.1.0", protocol_version=1, repo=REPO, keys=[keypair.public_key]
        )
        installer = [str(real / "mux")]
    feed = make_feed(tmp / "f", 1, keypair, real)  # the smallest release: the build alone
    archive = feed.path / "v0.2.0" / f"mux-{feed.target}.tar.gz"
    mux = tmp / "bin" / "mux"
    with serve_directory(feed.path) as url:

        def update(*flags: str) -> tuple[float, float]:
            install_env = fresh_install(tmp, env, url, feed, installer)
            return run_once([str(mux), "update", *flags], install_env)

        results: dict[str, Samples] = interleaved(
            {
                "mux update --insecure-skip-attestation": partial(
                    update, "--insecure-skip-attestation"
                ),
                "mux update (every layer)": update,
            },
            rounds,
        )
    print_table(
        f"{mode}: mux update of a {archive.stat().st_size / (1 << 20):.1f} MiB release, "
        "with and without the attestation layer",
        results,
        "mux update --insecure-skip-attestation",
    )
    every, skipped = (
        results["mux update (every layer)"],
        results["mux update --insecure-skip-attestation"],
    )
    wall = statistics.median(every.wall) - statistics.median(skipped.wall)
    cpu = statistics.median(every.cpu) - statistics.median(skipped.cpu)
    print(
        f"  the attestation layer adds about {wall * 1000:.0f} ms of wall time and "
        f"{cpu * 1000:.0f} ms of CPU time to `mux update` ({mode})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    add_mode_argument(parser)
    args = parser.parse_args()
    from tests.support.releases import make_keypair

    print(load_average())
    with tempfile.TemporaryDirectory(prefix="mux-bench-") as scratch:
        tmp = Path(scratch)
        keypair = make_keypair(tmp / "keys")
        modes = selected_modes(args)
        if "dev" in modes:
            (tmp / "library").mkdir()
            library_call(tmp / "library", args.rounds)
        for mode in modes:
            (tmp / mode).mkdir()
            layer_in_update(mode, tmp / mode, args.rounds, keypair)
    print()
    print(load_average())
    write_results(__file__)


if __name__ == "__main__":
    main()
