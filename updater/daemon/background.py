"""A server's background update check: the same check as ``mux update --check``, on a timer.

Every ``MUX_UPDATE_CHECK_INTERVAL`` (default 6 h, with up to a tenth more of jitter so that
many servers do not ask at once; ``0`` disables it, and so does the machine policy's
``updates = "disabled"``), the server runs ``<its own build> server check-updates`` in a child
process: the child asks through the same cache as ``mux update --check`` (an answer younger
than the interval counts, whoever got it), with conditional requests, and never downloads an
archive. A child keeps the HTTP and TLS stack out of the long-lived server, can be killed at
any moment, and runs from the server's own versioned build (never the mux link, which may
point at another version by then). Nothing here blocks the status line or shutdown.

The child also says whether the release is to be installed on its own (the user's
``auto_install``, :mod:`updater.commands.autoinstall`); the server then runs a second child,
``<its build> server auto-install``, which installs it through ``mux update``'s pipeline
(every layer, the install lock, retention, kill -9 safety) within :data:`INSTALL_TIMEOUT`.
Stopping the server kills a child in flight with everything it started (its process group):
an install killed at any moment leaves a runnable mux, and the next run tidies.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlsplit

from updater.childio import OutputTooLarge, read_bounded
from updater.commands.autoinstall import eligibility
from updater.commands.check import offer_for
from updater.config import buildinfo
from updater.config.settings import load_for, require_updates
from updater.config.targets import release_target
from updater.core.request import ReleaseRequest
from updater.errors import MuxError
from updater.servers.status import strict_json
from updater.urls import is_loopback_host

if TYPE_CHECKING:
    from updater.config.settings import Settings

FIRST_CHECK_DELAY = 30.0  # at most, after the server starts
CHILD_TIMEOUT = 120.0
# An automatic install downloads an archive (MUX_HTTP_MIN_SPEED bounds a slow one on its
# own); past this the child is killed, which an install survives (the next check tries again).
INSTALL_TIMEOUT = 3600.0
MAX_OUTPUT = 64 * 1024
# The shortest interval: a check is a child process and (unless cached) a request to the
# source. A source on this machine (a folder, a loopback feed: tests, a local mirror) may be
# asked every second; anything else at most once a minute.
MIN_INTERVAL = 60.0
MIN_LOCAL_INTERVAL = 1.0


def check_interval(settings: Settings, log: Callable[[str], None] | None = None) -> float:
    """``MUX_UPDATE_CHECK_INTERVAL`` as a server uses it: 0 (off), or at least the floor for
    its source (:data:`MIN_INTERVAL`, :data:`MIN_LOCAL_INTERVAL`); ``log`` hears when the
    floor applies."""
    interval = settings.update_check_interval
    if interval <= 0:
        return 0.0
    floor = MIN_LOCAL_INTERVAL if _on_this_machine(settings.source) else MIN_INTERVAL
    if interval < floor:
        if log is not None:
            log(
                f"MUX_UPDATE_CHECK_INTERVAL={interval:g}s is below the {floor:g}s floor for "
                f"{settings.source}; checking every {floor:g}s"
            )
        return floor
    return interval


def _on_this_machine(source: str) -> bool:
    if "://" not in source:
        return source != "github"  # a feed folder

    try:
        return is_loopback_host(urlsplit(source).hostname or "")
    except ValueError:
        return False


def next_delay(interval: float, *, rng: Callable[[], float] = random.random) -> float:
    """Seconds until the next check: the interval plus up to a tenth of it (at most 30 min).

    Never less than the interval, so the cache entry of the last check has expired by then
    (unless another check refreshed it, which then counts for this one).
    """
    return interval + min(interval / 10, 1800.0) * rng()


def first_delay(interval: float, *, rng: Callable[[], float] = random.random) -> float:
    """Soon after the server starts (a quarter to half of the interval, at most 15 s): a
    fresh cache answers it without the network, and a stale one is refreshed."""
    return min(interval, FIRST_CHECK_DELAY) * (0.25 + rng() / 4)


class FollowUp(NamedTuple):
    """A second child to run after a check's answer (an automatic install), and who hears
    its answer."""

    command: Sequence[str]
    on_answer: Callable[[dict[str, Any]], None]
    timeout: float = INSTALL_TIMEOUT


class BackgroundCheck:
    """Runs ``command`` every ``interval`` seconds in a thread of its own; each answer (one JSON
    object, or an error) goes to ``on_answer`` in that thread, which may ask for a
    :class:`FollowUp` child (run next, in the same thread)."""

    def __init__(
        self,
        command: Callable[[], Sequence[str]],
        interval: float,
        on_answer: Callable[[dict[str, Any]], FollowUp | None],
        log: Callable[[str], None],
        *,
        allowed: Callable[[], bool] | None = None,
    ) -> None:
        self._command = command
        self._allowed = allowed  # asked before each check: False skips it (the policy)
        self._interval = interval
        self._on_answer = on_answer
        self._log = log
        self._stop = threading.Event()
        self._child: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="mux-update-check", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop at once: a check in flight is killed (its child never outlives the server)."""
        self._stop.set()
        with self._lock:
            child = self._child
        if child is not None and child.poll() is None:
            _kill_group(child)
        self._thread.join(2.0)

    def _run(self) -> None:
        delay = first_delay(self._interval)
        while not self._stop.wait(delay):
            try:
                if self._allowed is not None and not self._allowed():
                    delay = next_delay(self._interval)
                    continue
                answer = self._run_child(self._command(), CHILD_TIMEOUT)
                if self._stop.is_set():
                    return
                follow_up = self._on_answer(answer)
                if follow_up is not None and not self._stop.is_set():
                    follow_up.on_answer(self._run_child(follow_up.command, follow_up.timeout))
            except Exception as exc:  # a bad answer must not end the schedule
                self._log(f"background check: {exc.__class__.__name__}: {exc}")
            delay = next_delay(self._interval)

    def _run_child(self, argv: Sequence[str], timeout: float) -> dict[str, Any]:
        """Run one child and read its one JSON object (an error object when it has none)."""
        command = list(argv)
        try:
            with self._lock:
                if self._stop.is_set():
                    return {"ok": False, "error": "the server is stopping"}
                child = self._child = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    close_fds=True,
                    start_new_session=True,
                )
        except OSError as exc:
            return {"ok": False, "error": f"cannot run {command[0]}: {exc.strerror or exc}"}
        try:
            out, err = read_bounded(child, MAX_OUTPUT, time.monotonic() + timeout)
        except subprocess.TimeoutExpired:
            return {"ok": False, "error": f"the child took longer than {timeout:g}s"}
        except OutputTooLarge:
            return {"ok": False, "error": f"the child wrote more than {MAX_OUTPUT} bytes"}
        finally:
            with self._lock:
                self._child = None
        if self._stop.is_set():
            return {"ok": False, "error": "the server is stopping"}
        try:
            answer = strict_json(out)  # its offer is written back to watchers: only JSON
        except (ValueError, RecursionError):
            reason = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            return {"ok": False, "error": f"the child exited {child.returncode}: {reason[0][:300]}"}
        if not isinstance(answer, dict):
            return {"ok": False, "error": "the child answered something that is not an object"}
        return answer


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    """Kill ``child``, not yet reaped, and its process group (it runs in a session of its
    own: an attestation worker it started dies with it); then reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(5.0)


def run_check_child(argv_current: str | None, max_age: float) -> int:
    """``mux server check-updates``: one check, one JSON object on stdout (for the server).

    ``argv_current`` is the version the mux link points at (what ``mux update --check``
    run through the link compares with, so that both share a cache entry).
    """

    own = buildinfo.current()  # the build that checks: the server's, maybe not the installed
    build = own.replace(version=argv_current) if argv_current else own
    try:
        current = load_for(build)
        require_updates(current, action="check")

        offer, checked_at, cached = offer_for(
            ReleaseRequest.latest(),
            current,
            build,
            release_target(current.target, build),
            max_age=max_age,
            checker=own,
        )
        automatic = eligibility(current, own, offer, installed=build.version)
    except MuxError as exc:
        print(json.dumps({"ok": False, "error": exc.message}))
        return 0
    print(
        json.dumps(
            {
                "ok": True,
                "offer": offer.to_cache(),
                "checked_at": checked_at,
                "cached": cached,
                "checked_by": {
                    "version": buildinfo.current().version,
                    "executable": buildinfo.executable(),
                },
                "auto_install": automatic.to_json(),
            }
        )
    )
    with contextlib.suppress(OSError):
        sys.stdout.flush()
    return 0
