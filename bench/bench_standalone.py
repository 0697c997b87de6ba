"""Standalone builds compared: start-up, where it goes, and the size of what users download.

Run: uv run python bench/bench_standalone.py [--rounds 15] [--alt NAME=FOLDER ...]

The PyInstaller build of this checkout (`mux-release build`, made once for the run) is always
measured; `--alt` adds any other build folder of the same layout (`mux` at its top, the
build info below), e.g. one made another way (docs/build.md says how the alternatives were
assembled) or the build of another commit. For each build:

* start-up of `mux version`, `mux version --json` and a cached `mux update --check --max-age
  1h`, interleaved with `python -c pass` (this interpreter) in every round: wall medians with
  their interquartile range, CPU time, and ratios to the baseline;
* instructions executed (valgrind's callgrind, children and re-executions included), which a
  busy machine does not change: what decisions are made on;
* how many times the program is executed (`strace -f`, execve calls);
* for a PyInstaller build, the same binary with its bootloader's self re-execution skipped
  (the environment the restarted process would get): what that second execve costs;
* size: unpacked, and the release archive as `mux-release package` writes it (tar + gzip -6),
  with the same tar compressed by gzip -9 and xz -6 / -9e, and the CPU time each takes to
  unpack with stock tools (GNU tar, BusyBox tar, Python's tarfile).
"""

from __future__ import annotations

import argparse
import gzip
import io
import lzma
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from functools import partial
from pathlib import Path

from _common import (
    clean_env,
    interleaved,
    load_average,
    print_table,
    quartiles,
    real_build,
    run_once,
    write_results,
)


def instructions(command: list[str], env: dict[str, str]) -> int | None:
    """Instructions executed by ``command`` and every image it execs, or None without valgrind."""
    if shutil.which("valgrind") is None:
        return None
    with tempfile.TemporaryDirectory(prefix="mux-callgrind-") as out:
        result = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--trace-children=yes",
                f"--callgrind-out-file={out}/cg.%p.%n",
                *command,
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    counts = re.findall(r"Collected : (\d+)", result.stderr)
    return sum(int(c) for c in counts) if counts else None


def execve_count(command: list[str], env: dict[str, str]) -> int | None:
    if shutil.which("strace") is None:
        return None
    result = subprocess.run(
        ["strace", "-f", "-qq", "-e", "trace=execve", *command],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    return sum(1 for line in result.stderr.splitlines() if "execve(" in line and "= 0" in line)


def until_second_exec(command: list[str], env: dict[str, str], runs: int) -> list[float]:
    """Seconds from the first execve to the second, per run (strace -ttt, seccomp filtered so
    only execve stops the process): what a self re-execution costs before the program runs."""
    if shutil.which("strace") is None:
        return []
    samples = []
    with tempfile.TemporaryDirectory(prefix="mux-strace-") as out:
        log = Path(out) / "trace"
        strace = ["strace", "-f", "-qq", "-ttt", "--seccomp-bpf", "-e", "trace=execve"]
        for _ in range(runs):
            subprocess.run(
                [*strace, "-o", str(log), *command],
                env=env,
                stdout=subprocess.DEVNULL,
                check=False,
            )
            stamps = [
                float(line.split()[1])
                for line in log.read_text().splitlines()
                if "execve(" in line and "= 0" in line
            ]
            if len(stamps) >= 2:
                samples.append(stamps[1] - stamps[0])
    return samples


def without_restart(folder: Path, env: dict[str, str]) -> dict[str, str] | None:
    """The environment a PyInstaller onedir bootloader gives its re-executed self (Linux)."""
    internal = folder / "_internal"
    if not sys.platform.startswith("linux") or not internal.is_dir():
        return None
    return {
        **env,
        "_PYI_ARCHIVE_FILE": str(folder / "mux"),
        "_PYI_PARENT_PROCESS_LEVEL": "0",
        "_PYI_LINUX_PROCESS_NAME": "mux",
        "LD_LIBRARY_PATH": str(internal),
    }


def folder_size(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]
    return sum(p.stat().st_size for p in files), len(files)


def cpu_of(command: list[str], cwd: Path) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, cwd=cwd, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def unpack_cpu(archive: Path, tool: str, work: Path) -> float | None:
    """Median CPU seconds of unpacking ``archive`` with ``tool`` (3 runs), None if missing."""
    flag = "-xzf" if archive.suffix == ".gz" else "-xJf"
    commands = {
        "GNU tar": ["tar", flag, str(archive)],
        "BusyBox tar": ["busybox", "tar", flag, str(archive)],
        "Python tarfile": [
            sys.executable,
            "-c",
            "import sys, tarfile; tarfile.open(sys.argv[1]).extractall('.', filter='data')",
            str(archive),
        ],
    }
    command = commands[tool]
    if shutil.which(command[0]) is None:
        return None
    samples = []
    for _ in range(3):
        target = work / "unpack"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir()
        try:
            samples.append(cpu_of(command, target))
        except subprocess.CalledProcessError:
            return None
    shutil.rmtree(work / "unpack", ignore_errors=True)
    return statistics.median(samples)


def archive_sizes(folder: Path, work: Path) -> None:
    from release.folder.archive import write_archive
    from release.folder.layout import read_build_info

    target = read_build_info(folder).target
    work.mkdir(parents=True, exist_ok=True)
    shipped = work / f"mux-{target}.tar.gz"
    write_archive(folder, target, shipped)
    raw = gzip.decompress(shipped.read_bytes())
    variants = {"gzip -6 (mux-release package)": shipped}
    gz9 = work / "gzip9.tar.gz"
    with gzip.GzipFile(filename="", mode="wb", fileobj=gz9.open("wb"), mtime=0) as out:
        out.write(raw)
    variants["gzip -9"] = gz9
    for name, preset in (("xz -6", 6), ("xz -9e", 9 | lzma.PRESET_EXTREME)):
        path = work / f"{name.replace(' ', '').replace('-', '')}.tar.xz"
        path.write_bytes(lzma.compress(raw, preset=preset))
        variants[name] = path
    tools = ("GNU tar", "BusyBox tar", "Python tarfile")
    print(
        f"  {'archive':32} {'size':>10} {'vs gzip -6':>10}  " + "  ".join(f"{t:>14}" for t in tools)
    )
    base = shipped.stat().st_size
    for name, path in variants.items():
        size = path.stat().st_size
        cpus = [unpack_cpu(path, tool, work) for tool in tools]
        cells = "  ".join(f"{(f'{c * 1000:.0f} ms' if c is not None else 'n/a'):>14}" for c in cpus)
        print(f"  {name:32} {size / (1 << 20):7.2f} MiB {size / base:9.2f}x  {cells}")
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        members = len(tar.getmembers())
    print(f"  (unpack: CPU time, median of 3; {members} archive members)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--alt", action="append", default=[], metavar="NAME=FOLDER")
    parser.add_argument(
        "--no-instructions", action="store_true", help="skip the callgrind runs (slow)"
    )
    args = parser.parse_args()
    from tests.support.releases import make_feed

    print(load_average())
    with tempfile.TemporaryDirectory(prefix="mux-bench-") as scratch:
        tmp = Path(scratch)
        feed = make_feed(tmp, versions=["0.1.0", "9.0.0"])
        builds = {
            "PyInstaller (mux-release build)": real_build(
                tmp / "build",
                version="0.1.0",
                protocol_version=1,
                repo="acme/mux",
                keys=[feed.keypair.public_key],
            )
        }
        for alt in args.alt:
            name, _, path = alt.partition("=")
            builds[name] = Path(path).resolve()
        for index, (name, folder) in enumerate(builds.items()):
            work = tmp / f"env-{index}"
            work.mkdir()
            env = {**clean_env(work), "MUX_UPDATE_SOURCE": str(feed.path)}
            mux = [str(folder / "mux")]
            version = [*mux, "version"]
            cached = [*mux, "update", "--check", "--max-age", "1h"]
            filled = subprocess.run([*mux, "update", "--check"], env=env, capture_output=True)
            commands = {
                "python -c pass": partial(run_once, [sys.executable, "-c", "pass"], env),
                "mux version": partial(run_once, version, env),
                "mux version --json": partial(run_once, [*mux, "version", "--json"], env),
            }
            if filled.returncode in (0, 10):
                commands["mux update --check --max-age 1h (cached)"] = partial(
                    run_once, cached, env
                )
            skipped = without_restart(folder, env)
            if skipped is not None:
                commands["mux version, bootloader restart skipped"] = partial(
                    run_once, version, skipped
                )
            results = interleaved(commands, args.rounds)
            print_table(f"{name}: {folder}", results, "python -c pass")
            if not args.no_instructions:
                base = instructions([sys.executable, "-c", "pass"], env)
                print(
                    f"  instructions: python -c pass {base / 1e6 if base else float('nan'):.1f} M"
                )
                for label, command, command_env in (
                    ("mux version", version, env),
                    ("mux update --check --max-age 1h (cached)", cached, env),
                    ("mux version, bootloader restart skipped", version, skipped),
                ):
                    if command_env is None or (
                        label.startswith("mux update") and filled.returncode not in (0, 10)
                    ):
                        continue
                    count = instructions(command, command_env)
                    if count and base:
                        print(f"  instructions: {label} {count / 1e6:.1f} M ({count / base:.2f}x)")
            executions = execve_count(version, env)
            size, files = folder_size(folder)
            print(f"  execve calls for `mux version`: {executions}")
            if executions and executions > 1:
                first = until_second_exec(version, env, args.rounds)
                if first:
                    low, mid, high = quartiles(first)
                    print(
                        f"  from the first execve to the second: {mid * 1000:.2f} ms "
                        f"(IQR {low * 1000:.2f}-{high * 1000:.2f})"
                    )
            print(f"  unpacked: {size / (1 << 20):.1f} MiB in {files} files")
            archive_sizes(folder, work / "archives")
    print()
    print(load_average())
    write_results(__file__)


if __name__ == "__main__":
    main()
