"""What every benchmark shares: the two modes, the real build, interleaved timing, statistics.

Modes (``--mode``): ``dev`` runs mux from this checkout (``.venv/bin/mux``, stand-in builds
for releases), ``build`` runs the real one-folder build users get, made once per run with
``mux-release build`` and reused by every measurement of that run; ``both`` (the default)
measures the two side by side in one run.

Timing: the commands of one comparison run in rounds, one after another within a round, so
that a machine shared with other jobs slows every command alike; each round gives one ratio
per command against the baseline of that round. The report gives medians with their
interquartile range (the spread), the CPU time (user + system, less sensitive to a busy
machine than wall time) and the load average before and after, so a reader can judge the noise.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MODES = ("dev", "build")


def add_mode_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mode",
        choices=[*MODES, "both"],
        default="both",
        help="dev: this checkout; build: the real one-folder build (made once per run); both",
    )


def selected_modes(args: argparse.Namespace) -> list[str]:
    return list(MODES) if args.mode == "both" else [args.mode]


def dev_mux() -> list[str]:
    """The development entry point, next to this interpreter (never a `mux` on PATH)."""
    return [str(Path(sys.executable).with_name("mux"))]


def clean_env(tmp: Path) -> dict[str, str]:
    """The environment of a measured process: no MUX_/GITHUB_ settings, a private HOME, XDG
    dirs in ``tmp``, and bytecode caching allowed (a release ships its bytecode compiled)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MUX_", "GITHUB_", "XDG_")) and k != "PYTHONDONTWRITEBYTECODE"
    }
    runtime = tmp / "run"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env.update(
        {
            "HOME": str(tmp / "home"),
            "XDG_CACHE_HOME": str(tmp / "cache"),
            "XDG_STATE_HOME": str(tmp / "state"),
            "XDG_RUNTIME_DIR": str(runtime),
            "NO_COLOR": "1",
        }
    )
    return env


def real_build(
    out_dir: Path,
    *,
    version: str,
    protocol_version: int,
    repo: str,
    keys: Sequence[str],
    extra: Sequence[str] = (),
    say: Callable[[str], None] = print,
) -> Path:
    """``mux-release build`` into ``out_dir`` (``extra``: more of its options, such as
    ``--tuf-root``); the build folder (``mux-<target>/``)."""
    started = time.monotonic()
    command = [
        sys.executable,
        "-m",
        "release",
        "build",
        "--out",
        str(out_dir),
        "--version",
        version,
        "--protocol-version",
        str(protocol_version),
        "--repo",
        repo,
        *(arg for key in keys for arg in ("--key", key)),
        *extra,
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"mux-release build failed: {result.stderr.strip()[-500:]}")
    folder = Path(result.stdout.strip().splitlines()[-1])
    say(f"built {folder} with mux-release build in {time.monotonic() - started:.0f} s")
    return folder


def rebadge(build: Path, destination: Path, *, version: str, protocol_version: int) -> Path:
    """A copy of a build folder with another version and protocol baked in (what a release
    with a version and protocol bump changes), as the release rehearsal makes its second one."""
    from release.build.steps import make_build_info, write_bill, write_build_info
    from release.folder.layout import read_build_info

    info = read_build_info(build)
    copy = destination / build.name
    shutil.copytree(build, copy, symlinks=True)
    (package_dir,) = {p.parent for p in copy.rglob("_build_info.json")}
    write_build_info(
        package_dir,
        make_build_info(
            version=version,
            protocol_version=protocol_version,
            target=info.target,
            repo=info.repo,
            minisign_keys=info.trust.minisign_keys,
            tuf_root=info.trust.tuf_root.encode() if info.trust.tuf_root else None,
            tuf_metadata_url=info.trust.tuf_metadata_url,
        ),
    )
    write_bill(copy, None)  # its notices and SBOM describe what it now ships
    return copy


def add_payload(build: Path, size: int) -> None:
    """About ``size`` bytes of incompressible data (like real binaries) in a file the build's
    notices and SBOM can map, then its notices and SBOM again: in a standalone build, a stored
    member of PyInstaller's ``base_library.zip`` (CPython's, by path; never read by mux); in a
    stand-in, a Python source of mux's package (mux's, by path) holding the data in base64."""
    import base64
    import zipfile

    from release.build.steps import write_bill

    library = build / "_internal" / "base_library.zip"
    if library.is_file():
        with (
            zipfile.ZipFile(library, "a", compression=zipfile.ZIP_STORED) as archive,
            archive.open("mux_bench_payload.bin", "w", force_zip64=True) as out,
        ):
            while size > 0:
                out.write(os.urandom(min(size, 1 << 20)))
                size -= 1 << 20
    else:
        (package_dir,) = {p.parent for p in build.rglob("_build_info.json")}
        with (package_dir / "_bench_payload.py").open("wb") as out:
            out.write(b'"""')
            while size > 0:  # base64 text: gzip gives back about 3/4 of it
                out.write(base64.b64encode(os.urandom(min(size, 3 << 18))))
                size -= 1 << 20
            out.write(b'"""\n')
    write_bill(build, None)


# --- measuring ----------------------------------------------------------------------------


@dataclass
class Samples:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


def run_once(
    command: Sequence[str], env: Mapping[str, str], *, cwd: Path | None = None, check: bool = True
) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, children included) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(
        list(command),
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if check and result.returncode not in (0, 10, 20):
        raise SystemExit(f"{' '.join(command)} exited {result.returncode}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def interleaved(
    commands: Mapping[str, Callable[[], tuple[float, float]]], rounds: int
) -> dict[str, Samples]:
    """Run every command once per round, in order, ``rounds`` times."""
    samples = {name: Samples() for name in commands}
    for _ in range(rounds):
        for name, run in commands.items():
            wall, cpu = run()
            samples[name].wall.append(wall)
            samples[name].cpu.append(cpu)
    return samples


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    low, mid, high = statistics.quantiles(values, n=4, method="inclusive")
    return low, mid, high


def describe_seconds(values: Sequence[float]) -> str:
    """``median (IQR low-high)`` in ms or s."""
    low, mid, high = quartiles(values)
    if mid < 1:
        return f"{mid * 1000:7.1f} ms ({low * 1000:.1f}-{high * 1000:.1f})"
    return f"{mid:7.2f} s ({low:.2f}-{high:.2f})"


def ratios(samples: Samples, baseline: Samples) -> list[float]:
    return [a / b for a, b in zip(samples.wall, baseline.wall, strict=True)]


def describe_ratio(values: Sequence[float]) -> str:
    low, mid, high = quartiles(values)
    return f"{mid:5.2f}x ({low:.2f}-{high:.2f})"


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def print_table(
    title: str,
    results: Mapping[str, Samples],
    baseline: str,
    *,
    targets: Mapping[str, str] | None = None,
) -> dict[str, float]:
    """Print medians, spreads and ratios against ``baseline``; return the median ratios."""
    base = results[baseline]
    print(f"\n{title}")
    print(
        f"  {'command':50} {'wall median (IQR)':>28} {'CPU median':>11} "
        f"{'ratio (IQR of per-round ratios)':>32} {'target':>7}"
    )
    medians = {}
    for name, samples in results.items():
        ratio = ratios(samples, base)
        medians[name] = statistics.median(ratio)
        target = (targets or {}).get(name, "")
        print(
            f"  {name:50} {describe_seconds(samples.wall):>28} "
            f"{statistics.median(samples.cpu) * 1000:8.1f} ms {describe_ratio(ratio):>32} "
            f"{target:>7}"
        )
    return medians
