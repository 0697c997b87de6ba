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

Results: every table a bench prints (``print_table``) and every figure it adds with ``record``
go into ``bench/results/<bench>.json`` when it calls ``write_results`` at its end, with the
commit, the machine and the date they were measured on; ``bench/render.py`` makes
docs/performance.md from those files. ``MUX_BENCH_MACHINE_NOTE`` adds a word on the machine
(shared with other jobs, say) to what is recorded.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
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
RESULTS = ROOT / "bench" / "results"
# Written by the benches and the renderer: not what makes a checkout "dirty" for a result.
GENERATED = ("bench/results", "docs/performance.md")

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
        *(arg for key in keys for arg in ("--public-key", key)),
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


# --- recording ----------------------------------------------------------------------------


@dataclass
class Measure:
    """One figure of a bench: a ratio against a baseline (median of per-round ratios, with
    their interquartile range), or a plain value (a size, a count) with ``ratio`` None."""

    name: str
    baseline: str = ""
    ratio: float | None = None
    spread: tuple[float, float] | None = None
    value: str = ""
    target: str = ""


_RECORDED: list[Measure] = []
_LOAD_BEFORE = os.getloadavg()


def record(measure: Measure) -> None:
    _RECORDED.append(measure)


def record_ratio(
    name: str, values: Sequence[float], baseline: str, *, value: str = "", target: str = ""
) -> None:
    """A ratio measure from its per-round ratios."""
    low, mid, high = quartiles(values)
    record(Measure(name, baseline, mid, (low, high), value, target))


def _git(*args: str) -> str:
    result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return result.stdout.strip() if result.returncode == 0 else ""


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, object]:
    uname = platform.uname()
    return {
        "uname": f"{uname.system} {uname.release} {uname.machine}",
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "load_before": [round(x, 2) for x in _LOAD_BEFORE],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "note": os.environ.get("MUX_BENCH_MACHINE_NOTE", ""),
    }


def write_results(script: str, variant: str = "") -> Path:
    """Write what this run recorded to ``bench/results/<bench>.json`` (``script``: the
    bench's ``__file__``; ``variant``: a mode that measures something else, recorded apart
    as ``<bench>-<variant>.json``) and return the path."""
    bench = Path(script).stem + (f"-{variant}" if variant else "")
    excluded = [f":(exclude){path}" for path in GENERATED]
    dirty = _git("status", "--porcelain", "--untracked-files=no", "--", ".", *excluded)
    result = {
        "schema": 1,
        "bench": bench,
        "command": " ".join(["uv run python", f"bench/{Path(script).name}", *sys.argv[1:]]),
        "commit": {"sha": _git("rev-parse", "HEAD"), "dirty": bool(dirty)},
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "measures": [
            {
                "name": m.name,
                "baseline": m.baseline,
                "ratio": None if m.ratio is None else round(m.ratio, 3),
                "spread": None if m.spread is None else [round(x, 3) for x in m.spread],
                "value": m.value,
                "target": m.target,
            }
            for m in _RECORDED
        ],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{bench}.json"
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    temporary.replace(path)
    print(f"recorded in {path.relative_to(ROOT)}")
    return path


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
        if name != baseline:
            wall = f"{describe_seconds(samples.wall).split('(')[0].strip()} median wall"
            record_ratio(f"{title}: {name}", ratio, baseline, value=wall, target=target)
        print(
            f"  {name:50} {describe_seconds(samples.wall):>28} "
            f"{statistics.median(samples.cpu) * 1000:8.1f} ms {describe_ratio(ratio):>32} "
            f"{target:>7}"
        )
    return medians
