"""The two commands as real processes: ``mux`` (:func:`run_mux`) and ``mux-release``
(:func:`mux_release`), each run from this checkout with the test's Python unless told
otherwise, output captured as text, never waiting on standard input."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, cast

from tests.support.inprocess import run_release_in_process
from tests.support.releases import TEST_PASSWORD, Feed

if TYPE_CHECKING:  # tests.support.tuf imports installs, which imports this module
    from tests.support.tuf import TufFeed


def run_mux(
    args: list[str],
    env: Mapping[str, str],
    *,
    timeout: float = 60,
    executable: list[str] | None = None,
    cwd: Path | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run mux as a real process (the development entry point unless ``executable`` names
    another, such as a build's ``mux``)."""
    command = (executable or [sys.executable, "-m", "updater"]) + args
    return subprocess.run(
        command,
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
        preexec_fn=preexec_fn,
    )


def mux_release(
    *args: str | Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stdin: str = "",
    timeout: float = 300,
    process: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``mux-release``; ``env`` is its whole environment (this process's when None),
    ``stdin`` what it reads. In this process (:func:`~tests.support.inprocess.run_release_in_process`)
    unless ``process`` asks for a real one (``python -m release``): where the process is the
    point (its entry, its exit, a timeout)."""
    if not process:
        return run_release_in_process(
            [str(arg) for arg in args],
            env if env is not None else dict(os.environ),
            cwd=cwd,
            stdin=stdin,
        )
    return subprocess.run(
        [sys.executable, "-m", "release", *map(str, args)],
        env=dict(env) if env is not None else None,
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


_TUF_KEY_OPTIONS = {"release": "--tuf-release-private-key", "online": "--tuf-online-private-key"}


def feed_verb(
    feed: Feed, verb: str, *rest: str, tuf_keys: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """``mux-release VERB <feed> --private-key-file K …`` as the feed workflow runs it; ``tuf_keys``
    names the TUF keys of a :class:`~tests.support.tuf.TufFeed` it is given too
    (``"release"``, ``"online"``)."""
    tuf: list[str] = []
    for name in tuf_keys:
        tuf += [_TUF_KEY_OPTIONS[name], cast("TufFeed", feed).keys.uri(name)]
    return mux_release(
        verb,
        feed.path,
        "--private-key-file",
        feed.keypair.secret_key_path,
        *tuf,
        *rest,
        env={**os.environ, "MINISIGN_PASSWORD": TEST_PASSWORD},
        timeout=120,
    )
