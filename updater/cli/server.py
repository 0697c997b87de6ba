"""``mux server``: start, stop, restart and inspect mux servers (mounted by :mod:`updater.cli.app`).

The server these commands run is mux's control surface (:mod:`updater.daemon.server`): it
serves the status line and a shutdown request, and hosts no terminal sessions.
Every failure is one line on stderr with the exit code of its :class:`MuxError`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from updater.cli import helptext
from updater.cli.render import (
    describe_live,
    error_line,
    report_error,
    server_line,
    server_status_lines,
    servers_document,
    to_json_line,
    verdict_document,
)
from updater.commands.autoinstall import run_auto_install
from updater.commands.restart import run_restart
from updater.config import buildinfo
from updater.config.settings import Settings, load, load_for, user_config_path
from updater.core.verdicts import ServerReport, ServerVerdict, server_verdicts
from updater.daemon.background import run_check_child
from updater.errors import MuxError, PolicyError, UsageError
from updater.install.layout import resolve_layout
from updater.servers.addresses import (
    SERVER_URL_ENV,
    UnixAddress,
    every_server_address,
    parse_server_address,
)
from updater.servers.control import AlreadyRunning, start, stop
from updater.servers.runtime import DEFAULT_SOCKET_NAME, default_socket_path, runtime_dir
from updater.servers.status import NO_SOCKET, query_all
from updater.servers.watch import (
    READ_TIMEOUT,
    StreamEnded,
    first_line,
    open_watch,
    server_event,
)
from updater.timestamps import rfc3339

server_app = typer.Typer(
    name="server",
    help=(
        "Run and inspect mux servers. This repository's server is mux's control surface: "
        "it answers the status line and a shutdown request, and hosts no terminal sessions."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings=helptext.CONTEXT_SETTINGS,
    epilog=helptext.SERVER,
)

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")
T = TypeVar("T")

NameOption = Annotated[
    str | None,
    typer.Option(
        "--name",
        metavar=helptext.NAME,
        help="The server runtime_dir/NAME.sock (default: 'default').",
    ),
]
SocketOption = Annotated[
    Path | None, typer.Option("--socket", metavar=helptext.SOCKET, help="The server's Unix socket.")
]
UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        metavar=helptext.SERVER_URL,
        help="unix:///path.sock or a loopback http://127.0.0.1:PORT.",
    ),
]
QuietOption = Annotated[
    bool, typer.Option("--quiet", "-q", help="Print nothing but errors (the exit code tells).")
]


def _say(line: str, *, quiet: bool) -> None:
    """One line of a verb's report (it quotes what a server said), unless ``-q``."""
    if not quiet:
        print(server_line(line))


def _run(action: Callable[[], T], *, as_json: bool = False) -> T:
    """Run one library call; a MuxError becomes one line on stderr and its exit code."""
    try:
        return action()
    except MuxError as exc:
        raise typer.Exit(report_error(exc, as_json=as_json)) from None


def _server_address(name: str | None, socket: Path | None, url: str | None) -> Path | str:
    given = [
        flag for flag, value in (("--name", name), ("--socket", socket), ("--url", url)) if value
    ]
    if len(given) > 1:
        raise UsageError(f"give only one of {', '.join(given)}")
    if socket is not None:
        return Path(os.path.abspath(socket))  # a started server runs from /
    if url is not None:
        address = parse_server_address(url)
        if isinstance(address, UnixAddress):
            return Path(os.path.abspath(address.path))
        return address.display
    if name is not None:
        if not _NAME.fullmatch(name):
            raise UsageError(
                f"invalid server name {name!r}: use letters, digits, '.', '_' and '-' (at most 64)"
            )
        return default_socket_path(name)
    return default_socket_path(DEFAULT_SOCKET_NAME)


@server_app.command("run", hidden=True)
def run_command(
    name: NameOption = None,
    socket: SocketOption = None,
    url: UrlOption = None,
    replacing: Annotated[
        int | None,
        typer.Option("--replacing", help="The pid of this user's server a restart replaces."),
    ] = None,
) -> None:
    """Serve in the foreground (what `mux server start` runs in the background)."""
    # deferred (+33 ms, 13 modules): the server itself, for `mux server run` only
    from updater.daemon.server import serve

    _run(lambda: serve(_server_address(name, socket, url), replacing=replacing))


@server_app.command("start", epilog=helptext.SERVER_START)
def start_command(
    name: NameOption = None,
    socket: SocketOption = None,
    url: UrlOption = None,
    quiet: QuietOption = False,
) -> None:
    """Start a server in the background and wait until it answers."""

    address = _run(lambda: _server_address(name, socket, url))
    try:
        report = start(address)
    except AlreadyRunning as running:  # what was asked is true already: exit 0, as stop does
        live = running.report
        _say(f"a mux server already runs on {live.address}: {describe_live(live)}", quiet=quiet)
        if not _speaks_this_protocol(live):
            _say(f"it speaks another protocol than this mux; {running.hint}", quiet=quiet)
        return
    except MuxError as exc:
        raise typer.Exit(report_error(exc, as_json=False)) from None
    _say(f"started a mux server on {report.address}: {describe_live(report)}", quiet=quiet)


def _speaks_this_protocol(report: ServerReport) -> bool:
    status = report.status
    return status is None or status.protocol_version == buildinfo.current().protocol_version


@server_app.command("stop", epilog=helptext.SERVER_STOP)
def stop_command(
    name: NameOption = None,
    socket: SocketOption = None,
    url: UrlOption = None,
    quiet: QuietOption = False,
) -> None:
    """Ask a server to shut down (works whatever protocol it speaks)."""

    address = _run(lambda: _server_address(name, socket, url))
    result = _run(lambda: stop(address))
    if result == "stopped":
        _say(f"stopped the mux server on {address}", quiet=quiet)
    else:
        _say(f"no mux server runs on {address}", quiet=quiet)


@server_app.command(
    "restart",
    epilog=helptext.SERVER_RESTART,
    short_help="Start this mux's server in place of a running one.",
)
def restart_command_(
    name: NameOption = None,
    socket: SocketOption = None,
    url: UrlOption = None,
    quiet: QuietOption = False,
) -> None:
    """Stop a server (whatever its protocol) and start this mux's server in its place; if the
    new build does not answer with its version and protocol, start the old build again."""

    address = _run(lambda: _server_address(name, socket, url))
    settings = _run(_restart_settings)
    done = _run(lambda: run_restart(address, settings))
    report = done.report
    if done.replaced is None:  # nothing answered there: a restart of nothing starts one
        said = f"no mux server ran on {report.address}; started one"
    else:
        said = f"restarted the mux server on {report.address}"
    _say(f"{said}: {describe_live(report)}", quiet=quiet)


def _restart_settings() -> Settings:
    """The settings of a restart. A machine policy that cannot be read stops every update,
    not the user's own servers: the restart then runs as if updates were disabled (its
    failure is still recorded, and the link is never moved back)."""
    build = buildinfo.current()
    try:
        return load_for(build)
    except PolicyError:
        unpolicied = load(build_repo=build.repo, config_file=user_config_path())
        return unpolicied._replace(updates="disabled")


def server_verdicts_of(reports: list[ServerReport]) -> tuple[ServerVerdict, ...]:
    """Servers judged against this mux (the installed one, when run through the link), for
    ``mux server status``, ``mux server watch`` and ``mux status``."""

    info = buildinfo.current()
    return server_verdicts(
        reports,
        running_protocol=info.protocol_version,
        current_version=info.version,
        known_builds=_known_builds(info),
    )


def _known_builds(info: buildinfo.BuildInfo) -> frozenset[str]:
    """The builds mux knows by itself: the running one and each version of this install."""
    known = {buildinfo.executable()}
    with contextlib.suppress(MuxError):
        home = os.environ.get("MUX_HOME") or None  # as the settings read it: --home is update's
        layout = resolve_layout(home, None, development=info.development)
        known.update(
            os.path.realpath(os.path.join(layout.version_dir(version), "mux"))
            for version in layout.installed_versions()
        )
    return frozenset(known)


@server_app.command(
    "status", epilog=helptext.SERVER_STATUS, short_help="Print every mux server this mux knows."
)
def status_command(
    name: NameOption = None,
    socket: SocketOption = None,
    url: UrlOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait for each server.", hidden=True)
    ] = 1.0,
) -> None:
    """Print every mux server this mux knows (each socket in the runtime dir and the one
    MUX_SERVER_URL names): its version, protocol, the build it runs from and whether that
    build is still installed. --name, --socket or --url: only that server."""
    addresses = _run(lambda: _listed_addresses(name, socket, url), as_json=as_json)
    reports = _run(lambda: query_all(addresses, timeout=timeout), as_json=as_json)
    if len(addresses) == 1 and (name or socket or url):
        reports = [r for r in reports if not (r.state == "stale" and r.detail == NO_SOCKET)]
    verdicts = server_verdicts_of(reports)
    if as_json:
        print(to_json_line(servers_document(verdicts)))
        return
    if not reports:
        print(
            server_line(f"no mux server found (looked in {_where(addresses, name, socket, url)})")
        )
        return
    info = buildinfo.current()
    for line in server_status_lines(verdicts, info.protocol_version, info.version):
        print(line)


def _listed_addresses(name: str | None, socket: Path | None, url: str | None) -> list[str]:
    """The one server the options name, or every server this mux knows."""
    if name or socket or url:
        return [str(_server_address(name, socket, url))]
    return every_server_address(os.environ.get(SERVER_URL_ENV))


def _where(addresses: list[str], name: str | None, socket: Path | None, url: str | None) -> str:
    if name or socket or url:
        return addresses[0]
    named = os.environ.get(SERVER_URL_ENV)
    where = str(_run(runtime_dir))
    return f"{where} and {SERVER_URL_ENV}={named}" if named else where


@server_app.command(
    "watch",
    epilog=helptext.SERVER_WATCH,
    short_help="Print a server's status line, then its events (JSON lines).",
)
def watch_command(
    name: NameOption = None,
    socket: SocketOption = None,
    url: UrlOption = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait for the first line.", hidden=True)
    ] = 5.0,
    read_timeout: Annotated[
        float | None,
        typer.Option("--read-timeout", help="Seconds of silence that mean hung.", hidden=True),
    ] = None,
) -> None:
    """Print a server's status line, then its events as they happen, one JSON object per line.

    The first line is the server's status line (service, protocol_version, version, pid,
    ...); the second a "server" event with the server as `mux server status --json` lists it.
    Events: update-available (from the server's background check, every
    MUX_UPDATE_CHECK_INTERVAL, default 6h, 0 disables), update-staged, update-installed,
    restart-needed; readers skip types they do not know. Ends when the server stops (exit
    0), or when it goes away, drops this watcher or sends nothing for 45s, heartbeats
    included (exit 1, one line on stderr). See docs/scripting.md.
    """

    address = _run(lambda: _server_address(name, socket, url))
    silence = READ_TIMEOUT if read_timeout is None else read_timeout
    stream = _run(lambda: open_watch(str(address), timeout=timeout, read_timeout=silence))
    try:
        # The server's status line itself, as it sent it; then what this mux makes of the
        # server (its entry in `mux server status --json`) as an event readers may skip.
        print(to_json_line(first_line(stream.status.to_json())), flush=True)
        [entry] = server_verdicts_of([stream.report])
        print(to_json_line(server_event(verdict_document(entry), rfc3339())), flush=True)
        for event in stream.events():
            print(to_json_line(event.to_json()), flush=True)
    except StreamEnded as ended:
        if ended.clean:
            return
        print(error_line(f"watching {stream.address}: {ended.reason}"), file=sys.stderr)
        raise typer.Exit(1) from None
    except BrokenPipeError:  # the reader went away: so do we, quietly
        sys.stderr.close()
        raise typer.Exit(0) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    finally:
        stream.close()
    print(error_line(f"watching {stream.address}: the stream ended"), file=sys.stderr)
    raise typer.Exit(1)


@server_app.command("check-updates", hidden=True)
def check_updates_command(
    current: Annotated[str | None, typer.Option("--current")] = None,
    max_age: Annotated[float, typer.Option("--max-age")] = 0.0,
) -> None:
    """One background check for a server (it runs this in a child process)."""

    raise typer.Exit(run_check_child(current, max_age))


@server_app.command("auto-install", hidden=True)
def auto_install_command(
    version: Annotated[str, typer.Option("--version")],
    protocol: Annotated[int, typer.Option("--protocol")],
) -> None:
    """One automatic install for a server (it runs this in a child process, after a check
    said the release is due): one JSON object on stdout."""

    try:
        settings = load_for(buildinfo.current())
    except MuxError as exc:
        print(json.dumps({"ok": False, "error": exc.message, "version": version}))
        return
    answer = run_auto_install(version, protocol, settings, buildinfo.current())
    print(json.dumps(answer), flush=True)
