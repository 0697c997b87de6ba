"""Shared fixtures: an isolated environment for every mux process a test starts."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from tests.support import realbuild
from tests.support.environment import ram_dir, sandbox

# Property tests run on a loaded 2-core machine beside servers and builds: a slow example is
# load, not a bug. No per-example deadline, and no health check for slow data generation;
# what each property asserts is unchanged.
hypothesis_settings.register_profile(
    "mux", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
hypothesis_settings.load_profile("mux")

# The tests' folders (pytest's tmp_path, every tempfile) on a RAM file system where the machine
# has one, unless TMPDIR names a place: mux's behaviour does not depend on the file system, the
# suite's cost does (test_update, test_delta_update and test_staging: 91 s of CPU on ext4, 75 s
# there, 28.9 s of it the kernel's on ext4 against 17.1 s). Set here, before pytest makes its
# base folder; the workers get theirs from it.
if "TMPDIR" not in os.environ and (ram := ram_dir()) is not None:
    os.environ["TMPDIR"] = str(ram)
    tempfile.tempdir = None

# Servers the tests start check for updates in the background only when a test asks for it
# (MUX_UPDATE_CHECK_INTERVAL in that test's environment): a check child per server would
# otherwise run a few seconds into every test that keeps a server alive.
os.environ.setdefault("MUX_UPDATE_CHECK_INTERVAL", "0")
# A server looks at the mux link every second (MUX_LINK_POLL); the tests' servers, every
# twentieth of a second, so that a test waiting for a move waits for the move, not the poll
# (tests/test_watch.py checks the default in its own process).
os.environ.setdefault("MUX_LINK_POLL", "0.05")


@pytest.fixture
def sandbox_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A process environment whose HOME and XDG dirs live under tmp_path
    (:func:`tests.support.environment.sandbox`)."""
    with sandbox(tmp_path) as env:
        yield env


# -- one real build for the run, and the order tests run in ---------------------------------


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers per core. Much of the suite's wall is waiting (a server's
    schedule, a deadline, a heartbeat, a shell's download), which other workers fill:
    measured on 2 cores in fresh clones, 603 s with 2 workers, 558 s with 3 (at 6c208c6);
    405 s with 3 and 386 s with 4 (at 6741f6f), work stealing (below) in each."""
    return 2 * (os.cpu_count() or 1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest tests first (marked ``slow``), then those that use the shared real build
    (building in the background by then), then the rest: with pytest-xdist, no worker is
    left with a long test at the end while the other has nothing to do."""

    def rank(item: pytest.Item) -> int:
        if realbuild.FIXTURE in getattr(item, "fixturenames", ()):
            return 1
        return 0 if item.get_closest_marker("slow") else 2

    items.sort(key=rank)  # stable: within a rank, the files' own order


def pytest_collection_finish(session: pytest.Session) -> None:
    realbuild.start_if_needed(session.config, session.items)


@pytest.fixture
def real_build(request: pytest.FixtureRequest) -> realbuild.RealBuild:
    """The run's one real PyInstaller build (``tests/support/realbuild.py``): mux 0.4.0,
    protocol 5, repo owner/mux, trusting two keys. Copy it before changing anything in it."""
    return realbuild.wait_for(request.config)
