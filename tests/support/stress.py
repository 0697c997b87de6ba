"""``kill -9`` loops, one round at a time: start a real mux process, kill it (and what it
started) at a moment, check what must hold after; and one soak's round (a release staged
after another). The tests run a few rounds of each; ``bench/bench_stress.py`` runs many and
reports them (docs/performance.md).

The moments are fractions of a measured run's length from :func:`spread` (1/2, 1/4, 3/4,
1/8, ...): deterministic, each round lands between the earlier ones, so three rounds already
reach the start, the middle and the end of a run, and fifty cover it finely.

Every check runs the installed mux as a real process (its link, its files: the point).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.installs import Install, leftovers, snapshot
from tests.support.processes import run_mux
from tests.support.releases import Feed, make_release
from updater.commands.update import UpdateAction, run_update
from updater.config.settings import Settings
from updater.core.request import ReleaseRequest
from updater.install.layout import Layout, read_record, verify_files


def spread(index: int) -> float:
    """The ``index``-th moment (from 0) as a fraction of a run: 1/2, 1/4, 3/4, 1/8, 5/8, ...
    (the base-2 van der Corput sequence)."""
    n, fraction, scale = index + 1, 0.0, 0.5
    while n:
        fraction += scale * (n & 1)
        n >>= 1
        scale /= 2
    return fraction


def start(command: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """``command`` in a session of its own (what it starts can be killed with it)."""
    return subprocess.Popen(
        list(command),
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def kill(process: subprocess.Popen[bytes]) -> None:
    """``kill -9`` the process group and reap its leader."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@dataclass(frozen=True)
class Kill:
    """One round's kill: whether it landed mid-run, and how long the process ran from the
    moment its delay counted from (to the kill, or to its end when it finished first)."""

    landed: bool
    ran: float


def kill_after(process: subprocess.Popen[bytes], delay: float) -> Kill:
    """Wait ``delay`` seconds, then ``kill -9`` the process and what it started, unless it
    finished first."""
    started = time.monotonic()
    try:
        process.wait(timeout=delay)
        return Kill(False, time.monotonic() - started)
    except subprocess.TimeoutExpired:
        kill(process)
        return Kill(True, delay)


class Moments:
    """When to kill, round after round: :func:`spread` fractions of a run's length, measured
    once beforehand; a run that finished before its kill was shorter than that, and its
    length is the one spread from then on (the kills land on a machine whose load changes)."""

    def __init__(self, length: float) -> None:
        self.length = length
        self.count = 0

    def next(self) -> float:
        delay = spread(self.count) * self.length
        self.count += 1
        return delay

    def saw(self, kill: Kill) -> Kill:
        if not kill.landed:
            self.length = min(self.length, kill.ran)
        return kill


def kills_landed(
    moments: Moments,
    one_round: Callable[[float, str], Kill],
    *,
    wanted: int,
    runs: int,
    reset: Callable[[], None] | None = None,
    label: str = "",
) -> int:
    """Rounds of ``one_round(delay, where)`` at ``moments`` (after ``reset``, when given)
    until ``wanted`` kills landed mid-run or ``runs`` ran; how many landed."""
    killed = 0
    for run in range(runs):
        if reset is not None:
            reset()
        delay = moments.next()
        where = f"{label}run {run} ({delay:.2f} s in, of {moments.length:.2f} s)"
        killed += moments.saw(one_round(delay, where)).landed
        if killed >= wanted:
            break
    return killed


def real(install: Install, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed mux (its link) as a real process."""
    return run_mux(list(args), install.env, timeout=120, executable=[str(install.mux)])


def real_version(install: Install) -> str:
    """The version the installed mux's link runs, as it reports itself."""
    result = real(install, "version", "--json")
    assert result.returncode == 0, result.stderr
    return str(json.loads(result.stdout)["version"])


def timed(install: Install, *args: str) -> float:
    """Seconds of one ``mux ARGS`` of the installed mux, which must succeed."""
    started = time.monotonic()
    result = real(install, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    return time.monotonic() - started


# -- mux update between two versions (tests/test_update.py) ---------------------------------


def update_round(install: Install, delay: float, where: str) -> Kill:
    """``mux update`` to the version the link does not run (0.1.0 or 0.2.0), killed after
    ``delay`` seconds: after it, mux runs at one of the two and its link names a file."""
    wanted = "0.1.0" if install.active() == "0.2.0" else "0.2.0"
    command = [str(install.mux), "update", "--version", wanted, "--allow-downgrade"]
    killed = kill_after(start(command, install.env), delay)
    version = real_version(install)
    assert version in ("0.1.0", "0.2.0"), f"{where}: mux reports {version}"
    target = Path(os.readlink(install.mux))
    assert target.is_file(), f"{where}: the link points at {target}, which is gone"
    return killed


# -- staging and applying a staged copy (tests/test_staging.py) -----------------------------


def runnable_and_finishes(install: Install, where: str) -> None:
    """After a kill: the link runs a whole version, and the next mux update finishes the job
    (or removes what the kill left) with nothing left behind."""
    assert real_version(install) in ("0.1.0", "0.2.0"), where
    done = real(install, "update")
    assert done.returncode == 0, f"{where}: {done.stdout}{done.stderr}"
    assert install.active() == "0.2.0", where
    assert real_version(install) == "0.2.0", where
    assert not leftovers(install), f"{where}: {leftovers(install)}"


def staging_round(install: Install, args: Sequence[str], delay: float, where: str) -> Kill:
    """``mux update ARGS`` (``--stage``, or nothing to apply a staged copy) killed after
    ``delay`` seconds, then :func:`runnable_and_finishes`."""
    killed = kill_after(start([str(install.mux), "update", *args], install.env), delay)
    runnable_and_finishes(install, where)
    return killed


# -- a prune with a live server (tests/test_retention.py) -----------------------------------


class Prunes:
    """An install of 1.2.0 whose server runs from 1.0.0, and ``mux update --prune`` with
    old versions nothing needs (made slow to delete: many files each) to remove."""

    JUNK = ("0.9.0", "0.9.1", "0.9.2")

    def __init__(self, install: Install, pid: int, address: str) -> None:
        self.install = install
        self.pid = pid
        self.address = address
        self.versions = install.home / "versions"
        record = read_record(Layout(str(install.home), str(install.bin_dir)))
        self.expected = record["versions"]["1.0.0"]["files_sha256"]

    def add_junk(self) -> None:
        for name in self.JUNK:
            junk = self.versions / name
            if not junk.exists():
                shutil.copytree(self.versions / "1.1.0", junk)
                for i in range(1000):
                    (junk / f"extra-{i}").write_bytes(b"x")

    def trash(self) -> set[str]:
        """The versions renamed to trash so far (and left there by a killed prune)."""
        return {p.name for p in self.versions.iterdir() if p.name.startswith(".trash-")}

    def timed(self) -> float:
        """Seconds of one whole prune of the junk."""
        self.add_junk()
        return timed(self.install, "update", "--prune")

    def round(self, delay: float, *, while_deleting: bool, where: str) -> tuple[Kill, bool]:
        """One prune killed ``delay`` seconds after its start (``while_deleting``: after it
        renamed a version to trash, that is while deleting), then: a runnable mux, and the
        server's version whole and serving. The kill, and whether it landed while deleting
        (a trash folder of its own there: one a killed prune left is not)."""
        self.add_junk()
        left = self.trash()  # by a prune killed before: not this one's deleting

        def deleting() -> bool:
            return bool(self.trash() - left)

        process = start([str(self.install.mux), "update", "--prune"], self.install.env)
        if while_deleting:
            deadline = time.monotonic() + 30
            while process.poll() is None and not deleting() and time.monotonic() < deadline:
                time.sleep(0.001)
        counted_from = time.monotonic()
        was_deleting = False
        try:
            process.wait(timeout=delay)
            killed = Kill(False, time.monotonic() - counted_from)
        except subprocess.TimeoutExpired:
            was_deleting = deleting()
            kill(process)
            killed = Kill(True, delay)
        assert real_version(self.install) == "1.2.0", where
        assert verify_files(self.versions / "1.0.0", self.expected) is None, where
        status = real(self.install, "server", "status", "--json")
        assert status.returncode == 0, (where, status.stdout, status.stderr)
        assert "Traceback" not in status.stderr, where
        servers = {s["address"]: s for s in json.loads(status.stdout)["servers"]}
        assert servers[self.address]["pid"] == self.pid, where
        return killed, was_deleting


# -- an update by a delta (tests/test_delta_update.py) --------------------------------------

# The steps of an update as they show on disk, in order: a ``versions/0.2.0.partial-`` folder
# (the delta applied into it, smoke-tested, fsynced), ``versions/0.2.0`` renamed into place
# (then recorded in install.json), the bin-dir link moved to it (then the record settled).
STEPS = ("verify", "apply", "switch", "settle")


def step_on_disk(install: Install) -> str:
    """Which step an update stopped in, from what it left: before the staging folder
    (``verify``: the index, the signed documents, the delta's download), in it (``apply``),
    placed but not yet the link's (``switch``), or after the link moved (``settle``)."""
    versions = install.home / "versions"
    names = [p.name for p in versions.iterdir()] if versions.is_dir() else []
    if install.active() == "0.2.0":
        return "settle"
    if "0.2.0" in names:
        return "switch"
    if any(n.startswith("0.2.0.partial-") for n in names):
        return "apply"
    return "verify"


def when_each_step_starts(install: Install) -> dict[str, float]:
    """Runs ``mux update`` (which must succeed) and polls the install every millisecond
    meanwhile: the time (from its start) at which each step first showed, and ``exit``."""
    process = start([str(install.mux), "update"], install.env)
    started = time.monotonic()
    seen: dict[str, float] = {"verify": 0.0}

    def look() -> None:
        step = step_on_disk(install)
        if step not in seen:
            at = time.monotonic() - started
            for earlier in STEPS[: STEPS.index(step) + 1]:
                seen.setdefault(earlier, at)  # a step shorter than a poll starts with the next

    while process.poll() is None:
        look()
        time.sleep(0.001)
    look()  # the last steps can end between two looks, with the run (seen on a loaded machine)
    seen["exit"] = time.monotonic() - started
    assert process.returncode == 0 and install.active() == "0.2.0", seen
    return seen


def step_lengths(starts: Mapping[str, float]) -> dict[str, float]:
    """Each step's length from :func:`when_each_step_starts` (at least a millisecond)."""
    ends = [*[starts[s] for s in STEPS[1:]], starts["exit"]]
    return {s: max(end - starts[s], 0.001) for s, end in zip(STEPS, ends, strict=True)}


def update_json(install: Install, *args: str) -> dict[str, Any]:
    """``mux update --json ARGS`` of the installed mux, which must update."""
    result = real(install, "update", "--json", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["action"] == "updated", report
    report["stderr"] = result.stderr
    return report


def after_a_delta_kill(install: Install, pristine_kept: dict[str, str], where: str) -> None:
    """What every kill of an update by a delta must leave: a runnable mux (the version its
    link names answers), the kept 0.1.0 byte for byte as it was; and a next run that
    finishes the update (by the delta when nothing was switched; after the switch it tidies)
    and leaves nothing behind."""
    kept = install.home / "versions" / "0.1.0"
    active = install.active()
    assert active in ("0.1.0", "0.2.0"), where
    assert real_version(install) == active, where
    assert snapshot(kept) == pristine_kept, where
    if active == "0.1.0":
        report = update_json(install)
        assert report["transfer"]["method"] == "delta", (where, report["transfer"])
    else:
        assert real(install, "update").returncode == 0, where
    assert real_version(install) == "0.2.0", where
    assert leftovers(install) == [], where
    assert snapshot(kept) == pristine_kept, where


def delta_round(
    install: Install, step: str, delay: float, pristine_kept: dict[str, str], where: str
) -> tuple[Kill, str]:
    """Start ``mux update``, wait until ``step`` shows on disk, then ``delay`` seconds, and
    ``kill -9`` it; then :func:`after_a_delta_kill`. The kill, and the step the update was
    in by what it left."""
    process = start([str(install.mux), "update"], install.env)
    try:
        while process.poll() is None and STEPS.index(step_on_disk(install)) < STEPS.index(step):
            time.sleep(0.0005)
        killed = kill_after(process, delay)
        left_in = step_on_disk(install)
    finally:
        if process.poll() is None:
            kill(process)
    after_a_delta_kill(install, pristine_kept, f"{where} (aimed at {step}, left in {left_in})")
    return killed, left_in


# -- the automatic install's child (tests/test_auto_install.py) -----------------------------


def auto_install_child(install: Install) -> list[str]:
    """The child a 1.0.0 server runs to install 1.1.0 on its own."""
    return [
        str(install.home / "versions" / "1.0.0" / "mux"),
        *("server", "auto-install", "--version", "1.1.0", "--protocol", "2"),
    ]


def run_auto_install_child(install: Install) -> dict[str, Any]:
    """The child run to its end: its answer, which must be ``ok``."""
    command = auto_install_child(install)
    done = subprocess.run(command, env=install.env, capture_output=True, text=True, check=False)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer.get("ok") is True, answer
    return answer


def auto_install_round(install: Install, delay: float, where: str) -> Kill:
    """The child killed with its process group after ``delay`` seconds: mux runs at 1.0.0 or
    1.1.0, and the next run (the child again, or ``mux update`` to tidy) finishes the
    install and leaves nothing behind."""
    killed = kill_after(start(auto_install_child(install), install.env), delay)
    version = real_version(install)
    assert version in ("1.0.0", "1.1.0"), f"{where}: mux reports {version}"
    if version == "1.0.0":
        assert run_auto_install_child(install)["to"] == "1.1.0", where  # the next one finishes
    else:
        assert real(install, "update").returncode == 0, where  # the next run tidies
    assert install.active() == "1.1.0" and real_version(install) == "1.1.0", where
    assert leftovers(install) == [], where
    return killed


# -- releases in a row, each staged (tests/test_background_staging.py) ----------------------


def stage_the_next_release(install: Install, feed: Feed, loaded: Settings, version: str) -> None:
    """Publish ``version`` into ``feed`` and stage it (``mux update --stage``'s
    :func:`run_update`, in this process, with ``loaded``): it is the one version on disk
    beside the active 0.1.0 (the copy staged before it is gone), kept as staged."""
    make_release(feed.path, version, protocol_version=1, keypair=feed.keypair)
    result = run_update(ReleaseRequest.latest(), loaded, stage=True)
    assert result.action is UpdateAction.STAGED and result.to_version == version
    on_disk = sorted(p.name for p in (install.home / "versions").iterdir())
    assert on_disk == sorted(["0.1.0", version]), on_disk
    kinds = {k.version: k.kind for k in result.kept_versions}
    assert kinds == {"0.1.0": "active", version: "staged"}, kinds
