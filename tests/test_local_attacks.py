"""mux against the other users of its machine, and against what may sit where its state lives.

Another local user (uid 1501, through ``setpriv``; tests/support/users.py) tries to
open, and ``flock``, every lock mux takes: ``MUX_HOME/.lock`` (the install lock, shared with
install.sh), every version's ``.mux-files`` (each mux process's shared hold) and the state
folder (feed-seq's writers). ``flock`` works on a read-only descriptor, so whoever can open
the file can hold the lock: what mux creates is private (0700 folders, 0600 files), a lock
only other users hold is never waited for, and every wait has a deadline, also when the
holder is this user's own process. Then every state file mux reads (check.json, feed-seq,
install.json, http/rate-limits.json) as a FIFO, a device, a huge file and another user's
file: one line or ignored, never a hang or a traceback. install.sh's side is in
tests/test_install_sh_attacks.py; the threat model is docs/threat-model.md ("Local users").
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.attacks import key_id, seq_file
from tests.support.github import FakeGitHub, github_env, serve_github
from tests.support.installs import Install, bootstrap
from tests.support.processes import run_mux
from tests.support.releases import Feed, make_feed, serve_directory, sign_index
from tests.support.users import (
    OTHER_UID,
    holding,
    open_sandbox,
    other_user_prefix,
    traversable_folder,
)
from updater.install.inuse import START_WAIT


@pytest.fixture
def feed(tmp_path: Path) -> Feed:
    return make_feed(tmp_path / "f", versions=["0.1.0", "0.2.0"], protocols={"0.2.0": 2})


@pytest.fixture
def served(feed: Feed) -> Iterator[str]:
    with serve_directory(feed.path) as url:
        yield url


@pytest.fixture
def shared() -> Iterator[Path]:
    with traversable_folder() as folder:
        yield folder


@pytest.fixture
def installed(shared: Path, sandbox_env: dict[str, str], feed: Feed, served: str) -> Install:
    """0.1.0 installed by mux into a home every user may look into (0755 all the way)."""
    env = open_sandbox(shared, sandbox_env)
    return bootstrap(
        shared, env, source=served, version="0.1.0", public_key=feed.keypair.public_key
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def state_folder(install: Install) -> Path:
    return seq_file(install.env).parent


def make_lax(install: Install) -> None:
    """The modes an older mux or install.sh left: every folder 0755, every file 0644."""
    for path in [install.home, *install.home.rglob("*"), state_folder(install)]:
        if path.is_symlink():
            continue
        path.chmod(0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
    (install.home / ".lock").chmod(0o644)


def raise_seq(feed: Feed) -> int:
    """Re-sign the feed's index with the next seq (so a check or update records it)."""
    return sign_index(feed.path, feed.keypair).comment.seq


# -- what mux creates, nobody else can open ----------------------------------------------------


def test_what_mux_creates_no_other_user_can_open_so_no_other_user_holds_its_locks(
    installed: Install,
) -> None:
    """The install (by mux), a check and the feed-seq state: MUX_HOME, versions/, the state
    and cache folders are 0700; .lock, .mux-files, install.json, feed-seq and check.json
    0600. The second user can open none of the three locks, so mux update proceeds."""
    other_user_prefix()
    check = installed.run("update", "--check")
    assert check.returncode == 10, check.stderr
    home, cache = installed.home, Path(installed.env["XDG_CACHE_HOME"]) / "mux"
    for folder in (
        home,
        home / "versions",
        home / "versions" / "0.1.0",
        state_folder(installed),
        cache,
    ):
        assert mode(folder) == 0o700, folder
    for file in (
        home / ".lock",
        home / "versions" / "0.1.0" / ".mux-files",
        home / "install.json",
        seq_file(installed.env),
        cache / "check.json",
    ):
        assert mode(file) == 0o600, file
    for target in (
        home / ".lock",
        home / "versions" / "0.1.0" / ".mux-files",
        state_folder(installed),
    ):
        with holding(target, as_other_user=True) as holder:
            assert not holder.held, (target, holder.answer)
    with holding(home / ".lock", as_other_user=True):
        updated = installed.run("update")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert mode(home / "versions" / "0.2.0" / ".mux-files") == 0o600


def test_a_lock_another_user_holds_never_gates_this_users_mux(
    installed: Install, feed: Feed
) -> None:
    """An install an older mux left (0755 folders, 0644 files): the second user holds the
    version's .mux-files and the state folder. mux starts without waiting for the hold, and
    a check records the new seq without waiting for the folder lock (it has no deadline on
    main: it hung). Holding .lock, the second user gets one line naming it at once (not
    "another mux update is running" after MUX_LOCK_TIMEOUT); mux update then makes the lock
    file private, and nobody else can open it again."""
    make_lax(installed)
    version_files = installed.home / "versions" / "0.1.0" / ".mux-files"
    with holding(version_files, as_other_user=True) as hold:
        assert hold.held, hold.answer
        started = time.monotonic()
        version = installed.run("version")
        took = time.monotonic() - started
    assert version.returncode == 0, version.stderr
    assert took < START_WAIT, f"mux version waited {took:.1f} s for another user's lock"

    seq = raise_seq(feed)
    with holding(state_folder(installed), as_other_user=True) as hold:
        assert hold.held, hold.answer
        check = installed.run("update", "--check", timeout=60)
    assert check.returncode == 10, check.stdout + check.stderr
    assert f"{key_id(feed.keypair)} {seq}\n" in seq_file(installed.env).read_text()
    assert mode(state_folder(installed)) == 0o700

    env = {**installed.env, "MUX_LOCK_TIMEOUT": "60"}
    with holding(installed.home / ".lock", as_other_user=True) as hold:
        assert hold.held, hold.answer
        started = time.monotonic()
        blocked = Install(installed.home, installed.bin_dir, env).run("update")
        took = time.monotonic() - started
    assert blocked.returncode == 1, blocked.stdout + blocked.stderr
    line = blocked.stderr.strip().splitlines()[-1]
    assert f"is held by another user's process (pid {hold.pid} (uid {OTHER_UID}))" in line
    assert took < 30, f"mux update waited {took:.1f} s for another user's lock"
    assert installed.active() == "0.1.0"

    updated = installed.run("update")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert mode(installed.home / ".lock") == 0o600
    with holding(installed.home / ".lock", as_other_user=True) as hold:
        assert not hold.held, hold.answer


def test_this_users_process_holding_the_state_folder_delays_an_update_only_to_a_deadline(
    installed: Install, feed: Feed
) -> None:
    """A process of this user's holds the state folder's lock and never lets go (on main,
    mux update switched the link, released its lock and then waited forever to record the
    seq). The update finishes, and records the seq anyway (re-reading before its rename, as
    install.sh's writer does)."""
    seq = raise_seq(feed)
    with holding(state_folder(installed), as_other_user=False) as hold:
        assert hold.held, hold.answer
        updated = installed.run("update", timeout=60)
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert installed.active() == "0.2.0"
    assert f"{key_id(feed.keypair)} {seq}\n" in seq_file(installed.env).read_text()


# -- state files that are not what they should be ------------------------------------------


KINDS = ["fifo", "device", "link-to-device", "huge", "other-owner"]


def plant(path: Path, kind: str, content: bytes) -> None:
    """Put ``kind`` at ``path``: a FIFO, a device node as /dev/zero is (as root), a link to
    /dev/zero, 2 MiB of JSON white space, or ``content`` as a file of another user's."""
    if kind == "device" and os.geteuid() != 0:
        pytest.skip("only root can make a device node")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "device":
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    elif kind == "link-to-device":
        path.symlink_to("/dev/zero")
    elif kind == "huge":
        path.write_bytes(b" " * (2 << 20) + content)
    else:
        path.write_bytes(content)
        os.chown(path, OTHER_UID, OTHER_UID)


def settled(result, *codes: int) -> str:
    """The run ended (no hang: the caller's timeout), with one of ``codes``, no traceback;
    its last line."""
    assert result.returncode in codes, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and "MemoryError" not in result.stderr
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[-1] if lines else ""


@pytest.mark.parametrize("kind", KINDS)
def test_a_check_cache_or_install_record_that_is_no_regular_file_of_yours_is_ignored(
    installed: Install, kind: str
) -> None:
    """check.json and install.json as a FIFO (a hang on main), /dev/zero or linked to it (a
    MemoryError on main), 2 MiB, or another user's (whose cached answer would be believed):
    the check and the update go on as without them, and write them anew."""
    if kind == "other-owner":
        other_user_prefix()
    filled = installed.run("update", "--check", "--json")
    assert filled.returncode == 10, filled.stderr
    cache = Path(installed.env["XDG_CACHE_HOME"]) / "mux" / "check.json"
    # Another user's copy says "cached", with this very key: it must not be believed.
    plant(cache, kind, cache.read_bytes())
    again = installed.run("update", "--check", "--json", "--max-age", "1h", timeout=60)
    settled(again, 10)
    assert json.loads(again.stdout)["cached"] is False
    assert cache.is_file() and not cache.is_symlink() and cache.stat().st_uid == os.getuid()

    record = installed.home / "install.json"
    plant(record, kind, record.read_bytes())
    updated = installed.run("update", timeout=120)
    settled(updated, 0)
    assert installed.active() == "0.2.0"
    assert json.loads(record.read_bytes())["active"] == "0.2.0"


@pytest.mark.parametrize("kind", KINDS)
def test_a_feed_seq_that_is_no_regular_file_of_yours_is_one_line(
    installed: Install, kind: str
) -> None:
    """feed-seq keeps the counters that refuse a rollback: one that cannot be read as a
    regular file of this user's of at most 1 MiB fails closed, with one line, for the
    check and the update (on main: a FIFO hung both)."""
    if kind == "other-owner":
        other_user_prefix()
    state = seq_file(installed.env)
    plant(state, kind, state.read_bytes())
    for args in (["update", "--check"], ["update"]):
        line = settled(installed.run(*args, timeout=60), 1)
        assert line.startswith(f"mux: error: cannot read {state}: "), line
    assert installed.active() == "0.1.0"


@pytest.mark.parametrize("kind", KINDS)
def test_a_rate_limit_file_that_is_no_regular_file_of_yours_is_ignored(
    tmp_path: Path, sandbox_env: dict[str, str], kind: str
) -> None:
    """http/rate-limits.json (what GitHub's rate limits left) as a FIFO, a device (or a link
    to one), 2 MiB,
    or another user's saying GitHub's API is closed for an hour: the check asks GitHub as
    if it were not there. The same entry in a file of this user's is obeyed."""
    if kind == "other-owner":
        other_user_prefix()
    feed = make_feed(tmp_path / "g", versions=["0.1.0", "0.2.0"])
    with serve_github(FakeGitHub(root=feed.path, repo="acme/mux")) as github:
        env = {**sandbox_env, **github_env(github)}
        until = time.time() + 3600
        closed = {"schema": 1, "limits": {}}
        closed["limits"][f"{github.api_url} anonymous"] = {"until": until, "kind": "primary"}
        limits = Path(env["XDG_CACHE_HOME"]) / "mux" / "http" / "rate-limits.json"
        limits.parent.mkdir(parents=True)
        limits.write_text(json.dumps(closed))
        args = ["update", "--check", "--pre", "--json"]  # --pre: the API's release list
        obeyed = run_mux(args, env, timeout=60)
        assert "not asking before then" in settled(obeyed, 1)  # the entry is understood
        plant(limits, kind, json.dumps(closed).encode())
        result = run_mux(args, env, timeout=60)
    settled(result, 10)
    assert json.loads(result.stdout)["latest"]["version"] == "0.2.0"
