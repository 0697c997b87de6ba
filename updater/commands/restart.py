"""``mux server restart``: a new build in the old one's place, or the old one back.

Restarting ends the programs in a server: the user chose to lose those, never to be left
without a server. So :func:`run_restart`

1. asks the server on the address which version it runs; a loopback listener that is not
   this user's server (:mod:`updater.servers.owner`) is refused with exit 6 before anything
   is stopped. Where the old server shares its port (Linux, started by this mux), the new
   one starts beside it and the old one stops only once the new one answers
   (:mod:`updater.servers.takeover`): the port is never free, and a new build that fails
   leaves the old server serving. Otherwise:
2. holds the old version's folder in this user's install
   (:func:`updater.install.inuse.hold_version`) so that no prune removes it while no server
   runs from it, and stops the server (the shutdown request every protocol version
   understands);
3. starts this mux's own build there and waits, at most ``MUX_RESTART_TIMEOUT`` seconds
   (default 7), for a status line with this build's version and protocol
   (:func:`updater.servers.control.start`);
4. if none comes (it exits, dies, hangs, answers as another version or protocol), stops it
   with everything it started, starts the old version again and raises
   :class:`RestartFellBack` (exit 5): one line saying what failed and what runs now. The
   old version is this user's kept ``versions/<version>/mux``, checked as ``--rollback``
   checks it (its files, its smoke test), or this running build when the old server ran
   this very version: never a path the server reported, which anyone answering on the
   address can name. Something else holding the address is no failed start
   (:class:`~updater.servers.control.AddressHeld`, exit 6): nothing is recorded.

The failed start is recorded in the user's state (:mod:`updater.core.userstate`): that
version is not offered again (the check, ``mux update``, servers' background checks and
automatic installs) until a newer release or ``mux update --version X``. After
:data:`~updater.core.userstate.ROLLBACK_AFTER` failed starts of the active version, the mux
link goes back to the previous version (``mux update --rollback``'s checks included), which
the line says and the check shows. A start that succeeds forgets its version's failures.
"""

from __future__ import annotations

import contextlib
import time
from functools import partial
from pathlib import Path
from typing import NamedTuple

from updater.commands.userstate import change_state, read_state, state_path
from updater.config import buildinfo
from updater.config.buildinfo import BuildInfo
from updater.config.settings import Settings
from updater.core.userstate import (
    UserState,
    rollback_due,
    with_failed_start,
    with_rollback,
    without_failure,
)
from updater.core.verdicts import ServerReport
from updater.errors import EXIT_RESTART_FELL_BACK, MuxError, NotYoursError, PolicyError
from updater.install import inuse
from updater.install.layout import Layout, resolve_layout
from updater.servers import control, takeover
from updater.servers.status import query_server, with_executable


class RestartFellBack(MuxError):
    """The new build did not come up; the server runs its previous build again (exit 5)."""

    exit_code = EXIT_RESTART_FELL_BACK


class Restarted(NamedTuple):
    report: ServerReport  # the new server
    replaced: ServerReport | None  # the one it replaced (None: nothing answered there)


class Fallback(NamedTuple):
    """The build a failed restart starts again: chosen by the old server's version, never by
    the path it reports. ``layout`` is this user's install, which keeps that version (its
    files and smoke test are checked before it runs); None: this running build itself."""

    version: str
    protocol_version: int
    layout: Layout | None

    @property
    def folder(self) -> Path | None:
        return Path(self.layout.version_dir(self.version)) if self.layout else None


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
    display = control.as_address(address).display
    old = _running(display)
    expect = control.Expected(build.version, build.protocol_version)
    old_pid = old.status.pid if old is not None and old.status is not None else None
    if old_pid is not None and takeover.possible(address, old):
        try:
            report = takeover.take_over(
                address,
                old_pid,
                executable=executable,
                timeout=settings.restart_timeout,
                expect=expect,
            )
        except control.StartFailed as failed:  # the old server never stopped serving
            raise _fell_back(settings, build, display, failed, old, old, now) from None
        _forget(settings, build.version)
        return Restarted(report, old)
    fallback = _fallback(old, settings, build)
    with inuse.hold_version(fallback.folder if fallback else None):
        control.stop(address, timeout=control.STOP_TIMEOUT)  # (whatever answers there)
        try:
            report = control.start(
                address, executable=executable, timeout=settings.restart_timeout, expect=expect
            )
        except control.StartFailed as failed:
            again = _start_again(address, fallback, settings)
            raise _fell_back(settings, build, display, failed, old, again, now) from None
        except KeyboardInterrupt:  # interrupted while the new build starts: the old one back
            _start_again(address, fallback, settings)
            raise
    _forget(settings, build.version)
    return Restarted(report, old)


def _running(display: str) -> ServerReport | None:
    """The live server there, placed (the build it runs from), or None when none answers.
    Raises :class:`NotYoursError` (nothing is stopped) when another user's socket, or one
    that cannot prove it is this user's server, holds a TCP address."""
    report = query_server(display)
    if report.state == "not-yours":
        raise NotYoursError(
            f"will not restart {display}: it is {report.detail}; nothing was stopped",
            hint="start your server on another port (mux server start --url ...)",
        )
    if report.state != "live" or report.status is None:
        return None
    return with_executable(report)


def _fallback(old: ServerReport | None, settings: Settings, build: BuildInfo) -> Fallback | None:
    """What a failed restart starts again: the old server's version as this user's install
    keeps it, else this build when the old server ran this very version, else nothing (a
    server whose build mux does not know is never run again from the path it names)."""
    if old is None or old.status is None:
        return None
    version, protocol = old.status.version, old.status.protocol_version
    try:
        layout = resolve_layout(settings.home, settings.bin_dir, development=build.development)
    except MuxError:
        layout = None
    if layout is not None and version in layout.installed_versions():
        return Fallback(version, protocol, layout)
    if version == build.version and protocol == build.protocol_version:
        return Fallback(version, protocol, None)
    return None


def _start_again(
    address: Path | str, fallback: Fallback | None, settings: Settings
) -> ServerReport | MuxError | None:
    """The replaced server's build, checked and started again; the error when that fails
    too; None when there was nothing to go back to."""
    if fallback is None:
        return None
    expect = control.Expected(fallback.version, fallback.protocol_version)
    try:
        executable = None  # this running build
        if fallback.layout is not None:
            # deferred (+130 ms, 18 modules: the install's transaction and the smoke test,
            # hashlib and packaging with them): only a restart that failed starts a kept
            # build, and `mux server restart` that succeeds does without them
            from updater.install.transaction import kept_executable

            # deferred: the smoke test, for the same reason (a failed restart only)
            from updater.trust.smoke import run_kept_build

            executable = kept_executable(
                fallback.layout,
                fallback.version,
                run_build=partial(run_kept_build, timeout=settings.smoke_test_timeout),
            )
        return control.start(
            address, executable=executable, timeout=control.START_TIMEOUT, expect=expect
        )
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
    if failed.crowded_by is not None:  # another user's traffic: no word on the build
        return _crowded(build, display, failed, again)
    recorded, problem = _record(settings, build.version, failed.reason, when)
    rolled_to, stays = _roll_back(settings, build, recorded) if recorded else (None, None)
    failure = recorded.failure(build.version) if recorded else None
    said = f"mux {build.version} did not start on {display} ({failed.reason})"
    log = f"its log: {failed.log_path}"
    if again is old and old is not None and old.status is not None:
        line = (
            f"{said}; the mux {old.status.version} server it would have replaced still serves "
            f"there (pid {old.status.pid}): it was never stopped"
        )
    elif isinstance(again, ServerReport) and again.status is not None:
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


def _crowded(
    build: BuildInfo,
    display: str,
    failed: control.StartFailed,
    again: ServerReport | MuxError | None,
) -> MuxError:
    """A start that did not answer while other users crowded the port: not recorded as a
    failed start (their traffic, not the build, may have kept it silent)."""
    line = (
        f"mux {build.version} did not answer on {display} while other users crowded the port "
        f"({failed.crowded_by}); not recorded as a failed start, try again later"
    )
    serving = again if isinstance(again, ServerReport) else None
    if serving is not None and serving.status is not None:
        line += f"; the mux {serving.status.version} server (pid {serving.status.pid}) serves there"
        return RestartFellBack(line, hint=f"its log: {failed.log_path}")
    return MuxError(line + f"; no server runs on {display}", hint=f"its log: {failed.log_path}")


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
