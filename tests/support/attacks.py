"""What the attack tests of mux and of install.sh share: a mirror of a feed, the feed-seq
state file, key ids, and whether the install lock is free."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path

from tests.support.releases import (
    Feed,
    KeyPair,
)
from updater.formats.minisign import PublicKey


def mirror(feed: Feed, dest: Path, *tags: str) -> Path:
    """A copy of the feed with these releases (default: all), its list not yet re-signed."""
    dest.mkdir(parents=True)
    chosen = tags or tuple(path.name for path in feed.path.iterdir() if path.is_dir())
    for tag in chosen:
        shutil.copytree(feed.path / tag, dest / tag)
    (dest / "releases.json").write_text(
        json.dumps({"releases": [{"tag": tag, "prerelease": False} for tag in chosen]}, indent=2)
    )
    return dest


def seq_file(env: dict[str, str]) -> Path:
    """The feed-seq state both mux and install.sh read and raise."""
    return Path(env["XDG_STATE_HOME"]) / "mux" / "feed-seq"


def key_id(keypair: KeyPair) -> str:
    return PublicKey.parse(keypair.public_key).key_id


def lock_is_free(mux_home: Path) -> bool:
    """Whether nobody holds the install lock (the lock file itself is never removed)."""
    with open(mux_home / ".lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(lock, fcntl.LOCK_UN)
    return True


def max_rss(
    command: list[str], env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run ``command``; its result and the child's peak RSS in KiB (wait4's rusage)."""
    process = subprocess.Popen(
        command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    stdout, stderr = process.stdout, process.stderr
    assert stdout is not None and stderr is not None
    out, err = stdout.read(), stderr.read()  # the pipes close when it exits
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    result = subprocess.CompletedProcess(command, process.returncode, out.decode(), err.decode())
    return result, usage.ru_maxrss
