"""Ask mux servers for their status lines (the client side of the server status contract).

:func:`query_server` asks one address and classifies the answer (live, stale, hung, garbage,
foreign, no-protocol, not-yours, error) into a :class:`~updater.core.verdicts.ServerReport`,
with the build it runs from (:func:`with_executable`); :func:`query_all` asks many at once,
:func:`retention_reports` every server retention must know of. The parts it stands on, one
job each: :mod:`updater.servers.addresses` (which servers, by name),
:mod:`updater.servers.runtime` (the runtime dir and a loopback server's secret),
:mod:`updater.servers.peer` (the OS's word on the process behind a socket),
:mod:`updater.servers.proof` (a loopback listener proved to be this user's) and
:mod:`updater.servers.wire` (the little HTTP, over a plain socket).

This module and those are on the fast path of ``mux update --check --max-age`` (a sidebar
runs it every few minutes), so they use the standard library only and import ``socket`` and
the protocol only when there is a server to ask (tests/test_imports.py holds them to it).

What a server answers is read as strict JSON (:func:`strict_json`): ``NaN``, ``Infinity``
and numbers no float holds are refused, so nothing mux writes back is anything but JSON.
"""

from __future__ import annotations

import json
import os
import time

from updater.core.verdicts import ServerReport
from updater.errors import UsageError
from updater.servers.addresses import (
    TcpAddress,
    UnixAddress,
    discover_server_addresses,
    every_server_address,
    parse_server_address,
)
from updater.servers.peer import Peer, process_executable, socket_lock_holder
from updater.servers.proof import NotYours, refused_detail
from updater.servers.wire import DEFAULT_TIMEOUT, MAX_STATUS_BYTES, NotHttp, http_request

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any

    from updater.core.verdicts import ServerState
    from updater.protocol import StatusLine
    from updater.servers.addresses import ServerAddress


NO_SOCKET = "no such socket"  # a stale report's detail when nothing is there at all


class NonStandardJson(ValueError):
    """JSON that a strict parser refuses: ``NaN``, ``Infinity``, a number no float holds."""


def _no_constant(name: str) -> Any:
    raise NonStandardJson(f"{name} is not standard JSON")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise NonStandardJson(f"the number {text[:20]} is too large for standard JSON")
    return value


def strict_json(raw: bytes | str) -> Any:
    """``json.loads`` that refuses non-standard JSON (:class:`NonStandardJson`, a
    ``ValueError``), as a strict parser would: what mux reads from a server it may write back
    (``--json``, ``mux server watch``), and it writes only standard JSON."""
    return json.loads(raw, parse_constant=_no_constant, parse_float=_finite)


def query_server(address: str, timeout: float = DEFAULT_TIMEOUT) -> ServerReport:
    """``GET /api/status`` from one server and classify the answer. Never raises."""
    try:
        target = parse_server_address(address)
    except UsageError as exc:
        return ServerReport(address, "error", None, exc.message)
    return with_executable(_ask_status(target, timeout))


def _ask_status(target: ServerAddress, timeout: float) -> ServerReport:
    display = target.display
    # deferred (+0.6 ms, 1 module, on the cached check): only now that there is a server to
    # ask, the protocol (its records); tests/test_imports.py holds it to that
    from updater.protocol import STATUS_PATH, StatusLineError, parse_status_line

    peer = Peer()

    def report(state: ServerState, detail: str, status: StatusLine | None = None) -> ServerReport:
        return ServerReport(display, state, status, detail, peer_pid=peer.pid)

    deadline = time.monotonic() + timeout
    try:
        code, body = http_request(target, "GET", STATUS_PATH, timeout=timeout, peer=peer)
        if code == 503 and b'"stopping": true' in body and time.monotonic() < deadline:
            # A server that stopped as we asked, as a restart's new one takes over beside
            # it: a new connection reaches the new one (or nobody).
            left = deadline - time.monotonic()
            code, body = http_request(target, "GET", STATUS_PATH, timeout=left, peer=peer)
    except TimeoutError:
        return report("hung", f"no answer within {timeout:g}s")
    except BlockingIOError:
        # A Unix socket whose listen queue is full refuses at once (EAGAIN): someone listens
        # and does not accept, which is a hung server, never a dead one. No connection means
        # no peer credentials: the process that holds the socket's lock is the server.
        if isinstance(target, UnixAddress):
            peer.pid = socket_lock_holder(target.path)
        return report("hung", "its listen queue is full: it accepts no connection")
    except FileNotFoundError:
        return report("stale", NO_SOCKET)
    except ConnectionRefusedError:
        return report("stale", "nobody listens")
    except NotYours as exc:
        return report("not-yours", str(exc))
    except NotHttp as exc:
        return report("garbage", f"answer is not HTTP ({exc})")
    except OSError as exc:
        return report("error", exc.strerror or str(exc))
    except Exception as exc:  # never let a strange server crash a status query
        return report("error", f"{exc.__class__.__name__}: {exc}")
    if code in (401, 403) and isinstance(target, TcpAddress):
        return report("error", refused_detail(target, code, STATUS_PATH))
    if code != 200:
        return report("garbage", f"HTTP {code} for {STATUS_PATH}")
    if len(body) > MAX_STATUS_BYTES:
        return report("garbage", "status line is larger than 64 KiB")
    try:
        strict_json(body)
    except NonStandardJson as exc:
        return report("garbage", f"not JSON ({exc})")
    except (ValueError, UnicodeDecodeError, RecursionError):
        pass  # parse_status_line says what is wrong with it
    try:
        line = parse_status_line(body)
    except StatusLineError as exc:
        state: ServerState = "garbage"
        if exc.kind == "foreign":
            state = "foreign"
        elif exc.kind == "no-protocol":
            state = "no-protocol"
        return report(state, str(exc))
    return report("live", f"mux {line.version}, protocol {line.protocol_version}", line)


def with_executable(report: ServerReport) -> ServerReport:
    """Fill in which build the server runs from: its status line's word, else the OS's."""
    status = report.status
    if status is not None and status.executable:
        exists = os.path.exists(status.executable)
        return report._replace(
            executable=status.executable,
            executable_source="status-line",
            build_installed=exists,
        )
    pid = report.pid
    if pid is None or report.state in ("stale", "error"):
        return report
    found = process_executable(pid)
    if found is None:
        return report
    path, exists = found
    return report._replace(executable=path, executable_source="os", build_installed=exists)


def query_all(
    addresses: Iterable[str] | None = None, timeout: float = DEFAULT_TIMEOUT
) -> list[ServerReport]:
    """Query every address at once (one thread each): N hung servers cost one timeout.

    ``addresses`` defaults to :func:`~updater.servers.addresses.discover_server_addresses`
    (which may raise :class:`UsageError` for a malformed ``MUX_SERVER_URL``). Reports keep the
    input order.
    """
    targets = discover_server_addresses() if addresses is None else list(addresses)
    if len(targets) <= 1:
        return [query_server(address, timeout) for address in targets]
    # deferred: this module is on a fast path (docs/build.md)
    import threading

    reports: list[ServerReport | None] = [None] * len(targets)

    def run(index: int, address: str) -> None:
        reports[index] = query_server(address, timeout)

    threads = [
        threading.Thread(target=run, args=(i, address), daemon=True, name=f"mux-status-{i}")
        for i, address in enumerate(targets)
    ]
    for thread in threads:
        thread.start()
    # Each query bounds itself; the slack only covers thread scheduling.
    deadline = time.monotonic() + timeout + 0.5
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [
        report
        if report is not None
        else ServerReport(address, "hung", None, f"no answer within {timeout:g}s")
        for address, report in zip(targets, reports, strict=True)
    ]


def query_reusing(
    addresses: Sequence[str], known: Iterable[ServerReport], *, timeout: float = DEFAULT_TIMEOUT
) -> list[ServerReport]:
    """The servers at ``addresses``, in that order: ``known`` reports are reused, the rest
    are asked at once (:func:`query_all`)."""
    reused = {report.address: report for report in known}
    missing = [address for address in addresses if address not in reused]
    fresh = dict(zip(missing, query_all(missing, timeout), strict=True))
    return [reused.get(address) or fresh[address] for address in addresses]


def retention_reports(
    server_url: str | None,
    *,
    known: Iterable[ServerReport] = (),
    timeout: float = DEFAULT_TIMEOUT,
) -> list[ServerReport]:
    """The one answer to "which servers does retention ask": every server of
    :func:`~updater.servers.addresses.every_server_address`, asked at once; ``known`` reports (read moments ago for
    another purpose) are reused, not asked again. Raises :class:`MuxError` when the servers
    cannot be listed."""
    return query_reusing(every_server_address(server_url), known, timeout=timeout)
