"""One real PyInstaller build per test run, shared by every test that needs one.

A real build (``mux-release build``) takes about a minute of CPU. The tests of the standalone
build, of a real build's server across updates and the quick-start rehearsal all use this one
(each re-bakes the build info it needs into a copy, as the rehearsal does for its second
release). It is started in the background as soon as the run knows a test will need it
(:func:`start_if_needed`, from ``pytest_collection_finish``), by whichever pytest-xdist worker
takes its lock first, while the workers run other tests; a test that needs it waits on that
lock, which the builder holds until it exits, however it ends (the kernel lets go of it).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.releases import TEST_PASSWORD, KeyPair, make_keypair
from updater.formats.minisign import PublicKey

VERSION = "0.4.0"
PROTOCOL = 5
REPO = "owner/mux"
FIXTURE = "real_build"  # the fixture whose tests need the build (tests/conftest.py)
_WAIT = 1800.0  # at most, for a build on a loaded 2-core machine


@dataclass(frozen=True)
class RealBuild:
    folder: Path
    seconds: float
    keys: tuple[KeyPair, KeyPair]


def shared_directory(config: pytest.Config) -> Path:
    """A folder every worker of this run sees: the run's base temp folder (under xdist, the
    parent of each worker's own)."""
    base = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _keys(directory: Path) -> tuple[KeyPair, KeyPair]:
    pairs = []
    for name in ("current", "following"):
        public = directory / f"{name}.pub"
        if not public.exists():
            make_keypair(directory, name=name)
        pairs.append(
            KeyPair(
                secret_key_path=directory / f"{name}.key",
                public_key=PublicKey.parse(public.read_text(encoding="utf-8")).to_base64(),
                password=TEST_PASSWORD,
                public_key_path=public,
            )
        )
    return pairs[0], pairs[1]


def _unavailable() -> str | None:
    if sys.platform.startswith("linux") and shutil.which("objdump") is None:
        return "PyInstaller needs objdump (Debian: apt-get install binutils)"
    return None


def start_if_needed(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the build in the background when a collected test uses the fixture and no
    worker has started it yet; the builder process holds the lock until it is done."""
    if not any(FIXTURE in getattr(item, "fixturenames", ()) for item in items):
        return
    if _unavailable():
        return
    shared = shared_directory(config) / "real-build"
    shared.mkdir(exist_ok=True)
    fd = os.open(shared / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # another worker is building it
        if (shared / "result.json").exists():
            return  # built already in this run
        current, following = _keys(shared / "keys")
        command = [
            *(sys.executable, "-m", "release", "build", "--out", str(shared / "dist")),
            *("--version", VERSION, "--protocol-version", str(PROTOCOL), "--repo", REPO),
            *("--public-key", current.public_key, "--public-key", following.public_key),
        ]
        # The child takes the locked open file with it: the lock is held until it exits.
        builder = (
            "import json, os, subprocess, sys, time\n"
            "started = time.monotonic()\n"
            "done = subprocess.run(sys.argv[2:], capture_output=True, text=True)\n"
            "result = {'returncode': done.returncode, 'stderr': done.stderr[-20000:],"
            " 'seconds': time.monotonic() - started}\n"
            "with open(sys.argv[1] + '.tmp', 'w') as out: json.dump(result, out)\n"
            "os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n"
        )
        subprocess.Popen(
            [sys.executable, "-c", builder, str(shared / "result.json"), *command],
            pass_fds=(fd,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=Path(__file__).resolve().parents[2],
            start_new_session=True,
        )
    finally:
        os.close(fd)  # the builder keeps its own copy of the locked file


def wait_for(config: pytest.Config) -> RealBuild:
    """The shared build, once the builder is done (starting it here when nothing did)."""
    reason = _unavailable()
    if reason:
        pytest.skip(reason)
    shared = shared_directory(config) / "real-build"
    if not (shared / "lock").exists():
        start_if_needed(config, [_Needs()])  # type: ignore[list-item]
    fd = os.open(shared / "lock", os.O_RDONLY | os.O_CLOEXEC)
    try:
        # The builder holds LOCK_EX until it exits; a shared lock is granted once it has.
        # Blocking in a thread bounds the wait without polling.
        taken = threading.Thread(target=fcntl.flock, args=(fd, fcntl.LOCK_SH), daemon=True)
        taken.start()
        taken.join(_WAIT)
        if taken.is_alive():
            pytest.fail(f"the shared real build took more than {_WAIT:g} s")
    finally:
        os.close(fd)
    result = json.loads((shared / "result.json").read_text(encoding="utf-8"))
    assert result["returncode"] == 0, result["stderr"]
    (folder,) = (shared / "dist").iterdir()
    return RealBuild(folder, float(result["seconds"]), _keys(shared / "keys"))


class _Needs:
    fixturenames = (FIXTURE,)
