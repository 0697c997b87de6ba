"""The kill -9 loops and soaks of the tests at their full count: rounds, kills landed, failures.

Run: uv run python bench/bench_stress.py [--only update,prune,...] [--rounds N]

Each loop is one the suite runs a few rounds of (until three kills landed), here run for the
count the suite used to run, every round the same function the test calls
(tests/support/stress.py), on stand-in builds from a loopback feed, as the tests do:

* update (50 rounds): ``mux update`` between 0.1.0 and 0.2.0 killed at a moment of its run;
  mux runs at one of the two and its link names a file (tests/test_update.py);
* staging, applying (30 rounds each): ``mux update --stage``, and the update that applies the
  staged copy, killed; the next ``mux update`` finishes and leaves nothing (test_staging.py);
* prune (20 rounds): ``mux update --prune`` of three slow-to-delete versions, killed in turn
  while deleting and anywhere, with a live server on the oldest kept version; mux runs, the
  server's version is whole and it serves (tests/test_retention.py);
* delta (30 rounds): an update by a delta killed in turn in the checks, the apply and after
  the switch; the kept version is untouched and the next run finishes by the delta
  (tests/test_delta_update.py);
* auto-install (10 rounds): the child a server runs to install a release on its own, killed;
  the next run finishes it (tests/test_auto_install.py);
* staged-in-a-row (10 rounds, no kill): a release published and staged after another, in
  this process as ``mux update --stage`` runs it; the newest is the one staged copy on disk
  (tests/test_background_staging.py).

The restart loops' full counts are bench/bench_restart.py's (a thousand restarts into a
healthy build; ``--squatter``: a hundred while another user tries to take the port).

The moments are fractions of a measured run's length (a half, a quarter, three quarters, ...:
``stress.Moments``), so that the rounds spread over the whole run, deterministically. A broken
invariant stops its loop and is printed; the script then exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from _common import Measure, load_average, record, write_results

from release.publish.delta import write_deltas
from tests.support import environment, stress
from tests.support.installs import Install, bootstrap, keep_pristine, leftovers, snapshot
from tests.support.releases import (
    default_keypair,
    make_feed,
    make_release,
    serve_directory,
    sign_release_dir,
)
from tests.support.standins import own_interpreter
from updater.config import settings


@dataclass
class Tally:
    """What one loop did: rounds run, kills that landed mid-run (by kind), the first broken
    invariant (empty when none) and its wall seconds."""

    rounds: int = 0
    landed: Counter[str] = field(default_factory=Counter)
    failure: str = ""
    seconds: float = 0.0

    def count(self, kill: stress.Kill, kind: str = "") -> None:
        self.rounds += 1
        if kill.landed:
            self.landed[kind] += 1


@contextmanager
def sandbox(tmp: Path) -> Iterator[dict[str, str]]:
    """The environment the tests' mux processes get (tests.support.environment.sandbox), with
    what tests/conftest.py sets for the whole run: no background checks, a fast link poll."""
    with environment.sandbox(tmp) as env:
        env.update(MUX_UPDATE_CHECK_INTERVAL="0", MUX_LINK_POLL="0.05")
        yield env


def installed(tmp: Path, env: dict[str, str], url: str, version: str, key: str) -> Install:
    return bootstrap(tmp, env, source=url, version=version, public_key=key)


# -- the loops -------------------------------------------------------------------------------


def update_loop(tmp: Path, env: dict[str, str], rounds: int, tally: Tally) -> None:
    feed = make_feed(tmp / "f", versions=["0.1.0", "0.2.0"], protocols={"0.2.0": 2})
    with serve_directory(feed.path) as url:
        mux = installed(tmp, env, url, "0.1.0", feed.keypair.public_key)
        durations = [
            stress.timed(mux, "update", "--version", wanted, "--allow-downgrade")
            for wanted in ("0.2.0", "0.1.0", "0.2.0")
        ]
        moments = stress.Moments(sorted(durations)[1] * 1.1)
        for run in range(rounds):
            delay = moments.next()
            tally.count(moments.saw(stress.update_round(mux, delay, f"run {run}")))
        # The next run cleans up whatever the killed ones left.
        assert stress.real(mux, "update", "--version", "0.2.0", "--allow-downgrade").returncode == 0
        assert leftovers(mux) == [], leftovers(mux)
        assert sorted(p.name for p in (mux.home / "versions").iterdir()) == ["0.1.0", "0.2.0"]


def staging_loop(moment: str) -> Callable[[Path, dict[str, str], int, Tally], None]:
    def loop(tmp: Path, env: dict[str, str], rounds: int, tally: Tally) -> None:
        feed = make_feed(tmp / "f", versions=["0.1.0", "0.2.0"])
        with serve_directory(feed.path) as url:
            mux = installed(tmp, env, url, "0.1.0", feed.keypair.public_key)
            if moment == "applying":
                staged = stress.real(mux, "update", "--stage", "--json")
                assert json.loads(staged.stdout)["action"] == "staged", staged.stderr
            reset = keep_pristine(mux, tmp / "pristine")
            args = ["--stage"] if moment == "staging" else []
            moments = stress.Moments(stress.timed(mux, "update", *args))
            for run in range(rounds):
                reset()
                delay = moments.next()
                kill = stress.staging_round(mux, args, delay, f"{moment}, run {run}")
                tally.count(moments.saw(kill))

    return loop


def prune_loop(tmp: Path, env: dict[str, str], rounds: int, tally: Tally) -> None:
    versions = ["1.0.0", "1.1.0", "1.2.0"]
    feed = make_feed(
        tmp / "f",
        versions=versions,
        protocols=dict.fromkeys(versions, 2),
        post_build=own_interpreter,
    )
    with serve_directory(feed.path) as url:
        mux = installed(tmp, env, url, "1.0.0", feed.keypair.public_key)
        assert stress.real(mux, "server", "start", "--name", "default").returncode == 0
        address = str(Path(env["XDG_RUNTIME_DIR"]) / "mux" / "default.sock")
        status = json.loads(stress.real(mux, "server", "status", "--json").stdout)
        [pid] = [s["pid"] for s in status["servers"] if s["address"] == address]
        for version in versions[1:]:
            assert stress.real(mux, "update", "--version", version).returncode == 0
        prunes = stress.Prunes(mux, pid, address)
        moments = {True: stress.Moments(0.02), False: stress.Moments(prunes.timed())}
        for run in range(rounds):
            while_deleting = run % 2 == 0
            delay = moments[while_deleting].next()
            kill, deleting = prunes.round(delay, while_deleting=while_deleting, where=f"run {run}")
            tally.count(moments[while_deleting].saw(kill), "while deleting" if deleting else "")
        final = json.loads(stress.real(mux, "update", "--prune", "--json").stdout)
        assert set(final["removed_versions"]) <= set(stress.Prunes.JUNK), final
        kept = sorted(p.name for p in (mux.home / "versions").iterdir())
        assert kept == versions, kept


def delta_loop(tmp: Path, env: dict[str, str], rounds: int, tally: Tally) -> None:
    feed = make_feed(tmp / "f", versions=["0.1.0", "0.2.0"])
    write_deltas(feed.releases["0.2.0"], [feed.releases["0.1.0"]])
    sign_release_dir(feed.releases["0.2.0"], feed.keypair)
    with serve_directory(feed.path) as url:
        mux = installed(tmp, env, url, "0.1.0", feed.keypair.public_key)
        pristine_kept = snapshot(mux.home / "versions" / "0.1.0")
        reset = keep_pristine(mux, tmp / "pristine")
        starts = stress.when_each_step_starts(mux)
        lengths = stress.step_lengths(starts)
        aims = ("verify", "apply", "settle")
        moments = {step: stress.Moments(lengths[step]) for step in aims}
        for run in range(rounds):
            step = aims[run % len(aims)]
            reset()
            delay = moments[step].next()
            kill, _ = stress.delta_round(mux, step, delay, pristine_kept, f"run {run}")
            tally.count(moments[step].saw(kill), step)


def auto_install_loop(tmp: Path, env: dict[str, str], rounds: int, tally: Tally) -> None:
    keypair = default_keypair()
    feed = tmp / "feed"
    make_release(feed, "1.0.0", protocol_version=2, keypair=keypair)
    config = Path(env["XDG_CONFIG_HOME"]) / "mux" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('auto_install = "compatible"\n')
    with serve_directory(feed) as url:
        env = {**env, "MUX_UPDATE_CHECK_INTERVAL": "1"}
        mux = installed(tmp, env, url, "1.0.0", keypair.public_key)
        make_release(feed, "1.1.0", protocol_version=2, keypair=keypair)
        reset = keep_pristine(mux, tmp / "pristine")
        started = time.monotonic()
        assert stress.run_auto_install_child(mux)["to"] == "1.1.0"
        moments = stress.Moments(time.monotonic() - started)
        for run in range(rounds):
            reset()
            delay = moments.next()
            tally.count(moments.saw(stress.auto_install_round(mux, delay, f"run {run}")))


def staged_in_a_row_loop(tmp: Path, env: dict[str, str], rounds: int, tally: Tally) -> None:
    feed = make_feed(tmp / "f", versions=["0.1.0"])
    with serve_directory(feed.path) as url:
        mux = installed(tmp, env, url, "0.1.0", feed.keypair.public_key)
        # This process stages, as the install child does: its user dirs are the sandbox's.
        mine = ("HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR", "CI")
        saved = {name: os.environ.get(name) for name in mine}
        os.environ.update({name: env[name] for name in mine if name != "CI"})
        os.environ.pop("CI", None)
        try:
            loaded = settings.load(
                mux.env,
                flags=settings.Requested(home=mux.home, trust_keys=[feed.keypair.public_key]),
                development=True,
            )
            for n in range(2, rounds + 2):
                stress.stage_the_next_release(mux, feed, loaded, f"0.{n}.0")
                tally.rounds += 1
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        assert leftovers(mux) == [], leftovers(mux)


LOOPS: dict[str, tuple[int, Callable[[Path, dict[str, str], int, Tally], None]]] = {
    "update": (50, update_loop),
    "staging": (30, staging_loop("staging")),
    "applying": (30, staging_loop("applying")),
    "prune": (20, prune_loop),
    "delta": (30, delta_loop),
    "auto-install": (10, auto_install_loop),
    "staged-in-a-row": (10, staged_in_a_row_loop),
}

KILLING = ("update", "staging", "applying", "prune", "delta", "auto-install")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help=f"a comma-separated choice of {','.join(LOOPS)}")
    parser.add_argument("--rounds", type=int, default=0, help="rounds of each loop (its default)")
    args = parser.parse_args()
    chosen = args.only.split(",") if args.only else list(LOOPS)
    unknown = set(chosen) - set(LOOPS)
    if unknown:
        parser.error(f"no loop named {', '.join(sorted(unknown))}")
    print(load_average())
    failed = False
    for name in chosen:
        default, loop = LOOPS[name]
        rounds = args.rounds or default
        tally = Tally()
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="mux-bench-stress-") as scratch:
            tmp = Path(scratch)
            with sandbox(tmp) as env:
                try:
                    loop(tmp, env, rounds, tally)
                except Exception as broken:  # a broken invariant: say it, stop this loop
                    tally.failure = f"{type(broken).__name__}: {broken}"
                    traceback.print_exc()
        tally.seconds = time.monotonic() - started
        landed = sum(tally.landed.values())
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(tally.landed.items()) if k)
        kills = f", {landed} kills landed mid-run" if name in KILLING else ""
        text = (
            f"{tally.rounds} of {rounds} rounds{kills}{f' ({kinds})' if kinds else ''}, "
            f"{tally.seconds:.0f} s"
        )
        print(f"{name:13} {text}; {tally.failure or 'no invariant broken'}", flush=True)
        what = "kill -9 loop" if name in KILLING else "soak"
        record(Measure(f"{what}: {name}", value=text, target="no invariant broken"))
        if tally.failure:
            failed = True
            record(Measure(f"{what}: {name}: broken", value=tally.failure[:200]))
    print(load_average())
    if not failed and not args.only and not args.rounds:
        write_results(__file__)  # only a whole run at the full count is recorded
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
