"""``mux server restart``: a new build in the old one's place, or the old one back.

Restarting ends the programs in a server: the user chose to lose those, never to be left
without a server. So :func:`run_restart`

1. asks the server on the socket which build it runs (its status line's ``executable``, else
   what the OS says of the process behind the socket), and holds that build's version
   folder (:func:`updater.install.inuse.hold_version`) so that no prune can remove it
   while no server runs from it;
2. stops it (the shutdown request every protocol version understands);
3. starts this mux's own build there and waits, at most ``MUX_RESTART_TIMEOUT`` seconds
   (default 7), for a status line with this build's version and protocol
   (:func:`updater.servers.control.start`);
4. if none comes (it exits, dies, hangs, answers as another version or protocol), stops it
   with everything it started, starts the server again from the build it was running, and
   raises :class:`RestartFellBack` (exit 5): one line saying what failed and what runs now.

The failed start is recorded in the user's state (:mod:`updater.core.userstate`): that
version is not offered again (the check, ``mux update``, servers' background checks and
automatic installs) until a newer release or ``mux update --version X``. After
:data:`~updater.core.userstate.ROLLBACK_AFTER` failed starts of the active version, the mux
link goes back to the previous version (``mux update --rollback``'s checks included), which
the line says and the check shows. A start that succeeds forgets its version's failures.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from updater.commands.userstate import change_state, read_state, state_path
from updater.config import buildinfo
from updater.config.buildfolder import build_info_in
from updater.config.buildinfo import BuildInfo
from updater.config.settings import Settings
from updater.core.userstate import (
    UserState,
    rollback_due,
    with_failed_start,
    with_rollback,
    without_failure,
)
from updater.errors import EXIT_RESTART_FELL_BACK, MuxError, PolicyError
from updater.install import inuse
from updater.install.layout import resolve_layout
from updater.servers import control
from updater.servers.client import ServerReport, query_server, with_executable


class RestartFellBack(MuxError):
    """The new build did not come up; the server runs its previous build again (exit 5)."""

    exit_code = EXIT_RESTART_FELL_BACK


class Restarted(NamedTuple):
    report: ServerReport  # the new server
    replaced: ServerReport | None  # the one it replaced (None: nothing answered there)


def run_restart(
    address: Path | str,
    settings: Settings,
    *,
    build: BuildInfo | None = None,
    executable: str | None = None,
    now: float | None = None,
) -> Restarted:
    """Restart the server on ``address`` into ``build`` (default: this mux, which runs
    ``executable`` or its own build), falling back to the build it ran (module docstring)."""
    build = build or buildinfo.current()
    target = control.as_address(address)
    display = target.display
    old = _running(display)
    expect = control.Expected(build.version, build.protocol_version)
    fallback = _build_of(old)
    with _holding(fallback):
        control.stop(address, timeout=control.STOP_TIMEOUT)  # (whatever answers there)
        try:
            report = control.start(
                address, executable=executable, timeout=settings.restart_timeout, expect=expect
            )
        except control.StartFailed as failed:
            again = _start_again(address, fallback)
            raise _fell_back(settings, build, display, failed, old, again, now) from None
        except KeyboardInterrupt:  # interrupted while the new build starts: the old one back
            _start_again(address, fallback)
            raise
    _forget(settings, build.version)
    return Restarted(report, old)


def _running(display: str) -> ServerReport | None:
    """The live server there, placed (the build it runs from), or None when none answers."""
    report = query_server(display)
    if report.state != "live" or report.status is None:
        return None
    return with_executable(report)


def _build_of(report: ServerReport | None) -> str | None:
    """The executable the replaced server ran from, if it is a mux build that can be run
    again (a development checkout's server runs the Python interpreter: no build to go back
    to)."""
    if report is None or not report.executable:
        return None
    executable = report.executable
    if not os.path.isfile(executable) or build_info_in(os.path.dirname(executable)) is None:
        return None
    return executable


@contextmanager
def _holding(executable: str | None) -> Iterator[None]:
    """Hold the version folder of ``executable`` (if it is an installed version) while no
    server runs from it: retention keeps what servers run from, and this is the gap."""
    with inuse.hold_version(Path(executable).parent if executable else None):
        yield


def _start_again(address: Path | str, executable: str | None) -> ServerReport | MuxError | None:
    """The replaced server's build, started again; the error when that fails too; None when
    there was nothing to go back to."""
    if executable is None:
        return None
    try:
        return control.start(address, executable=executable, timeout=control.START_TIMEOUT)
    except MuxError as exc:
        return exc


def _fell_back(
    settings: Settings,
    build: BuildInfo,
    display: str,
    failed: control.StartFailed,
    old: ServerReport | None,
    again: ServerReport | MuxError | None,
    now: float | None,
) -> MuxError:
    """Record the failed start, move the link back when it is due, and say it in one line."""
    when = time.time() if now is None else now
    recorded, problem = _record(settings, build.version, failed.reason, when)
    rolled_to, stays = _roll_back(settings, build, recorded) if recorded else (None, None)
    failure = recorded.failure(build.version) if recorded else None
    said = f"mux {build.version} did not start on {display} ({failed.reason})"
    log = f"its log: {failed.log_path}"
    if isinstance(again, ServerReport) and again.status is not None:
        status = again.status
        line = (
            f"{said}; the mux {status.version} server it replaced runs there again "
            f"(pid {status.pid})"
        )
    elif isinstance(again, MuxError):
        line = f"{said}, and starting the mux it replaced again failed too ({again.message}): no server runs on {display}"
    else:
        nothing = (
            "no server ran there before"
            if old is None
            else "the build of the server it replaced cannot be started again"
        )
        line = f"{said}; {nothing}, so no server runs on {display}"
    if rolled_to is not None and failure is not None:
        line += f"; after {failure.starts} failed starts the mux link is back on {rolled_to}"
    elif stays:
        line += f"; the mux link stays on {build.version} ({stays})"
    if recorded is not None:
        line += (
            f"; mux {build.version} is not offered again until a newer release "
            f"(mux update --version {build.version} tries it again)"
        )
    if problem:
        line += f"; {problem}"
    error_class = RestartFellBack if isinstance(again, ServerReport) else MuxError
    return error_class(line, hint=log)


def _record(
    settings: Settings, version: str, reason: str, when: float
) -> tuple[UserState | None, str | None]:
    try:
        path = state_path(settings)
        return change_state(path, lambda s: with_failed_start(s, version, when, reason)), None
    except MuxError as exc:
        return None, f"the failure could not be recorded: {exc.message}"


def _roll_back(
    settings: Settings, build: BuildInfo, state: UserState
) -> tuple[str | None, str | None]:
    """After the second failed start of the active version, ``mux update --rollback`` (its
    checks: the previous version's files and smoke test). Returns the version the link went
    back to, or why it stays when a rollback was due and could not be made."""
    if build.development and settings.home is None:
        return None, None  # a checkout is no install: there is no link to move
    try:
        layout = resolve_layout(settings.home, settings.bin_dir, development=build.development)
    except MuxError:
        return None, None
    if not rollback_due(state, build.version, active=layout.active_version()):
        return None, None
    # deferred (+430 ms, 357 modules): the update machinery and the HTTP stack, which a
    # restart that succeeds, and every other `mux server` command, does without
    from updater.commands.update import run_rollback

    try:
        done = run_rollback(settings._replace(home=layout.home), build=build)
    except PolicyError:
        return None, "the machine policy manages this install"
    except MuxError as exc:
        return None, f"it could not go back: {exc.message}"
    back = str(done.to_version)
    with contextlib.suppress(MuxError):
        change_state(state_path(settings), lambda s: with_rollback(s, build.version, back))
    return back, None


def _forget(settings: Settings, version: str) -> None:
    """A start that succeeded: the version works here, its earlier failures are forgotten."""
    path = state_path(settings)
    with contextlib.suppress(MuxError):  # an unreadable state file: the check reports it
        if read_state(path).failure(version) is not None:
            change_state(path, lambda s: without_failure(s, version))
