"""``mux server watch``, the client side: the stream's vocabulary, and the reader that prints it.

:func:`open_watch` connects to a server's ``GET /api/watch`` and reads its first line (the
server's status line); :meth:`WatchStream.events` then yields each event as it comes
(heartbeats are consumed, not passed on), bounded in size and in silence
(:data:`READ_TIMEOUT`). ``mux server watch`` prints them re-encoded, so nothing a server
sends reaches a terminal unescaped. The server side is :mod:`updater.daemon.hub`.
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from typing import IO, Any

from updater.core.verdicts import ServerReport, restart_command_for
from updater.errors import MuxError
from updater.protocol import (
    MAX_WATCH_LINE,
    WATCH_PATH,
    StatusLineError,
    WatchEvent,
    parse_status_line,
    parse_watch_event,
)
from updater.servers.addresses import TcpAddress, parse_server_address
from updater.servers.peer import Peer
from updater.servers.proof import PROOF_HEADER, NotYours, Proof, refused_detail
from updater.servers.status import NonStandardJson, query_server, strict_json, with_executable
from updater.servers.wire import Watchdog, open_connection

EVENT_SERVER_STOPPING = "server-stopping"
EVENT_WATCH_DROPPED = "watch-dropped"
EVENT_HEARTBEAT = "heartbeat"  # "still here": readers skip it like any type they do not know
# What `mux server watch` prints second, after the status line: the server as this mux sees
# it (its `mux server status --json` entry). Not sent by servers: the client adds it.
EVENT_SERVER = "server"
# The first line's type: the server's status line, as the first line of the stream.
EVENT_STATUS = "status"
# The stream's schema, said by its first line. 2: the first line has `type` and `schema`,
# every event an `at`; a first line without `schema` is schema 1's (an older server).
WATCH_SCHEMA = 2
HEARTBEAT = 15.0  # an idle stream sends a heartbeat line this often
READ_TIMEOUT = 3 * HEARTBEAT  # a client that gets no line for this long gives up: hung


class StreamEnded(Exception):
    """The stream ended; ``clean`` when the server said it was stopping."""

    def __init__(self, reason: str, *, clean: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.clean = clean


def first_line(status: dict[str, Any]) -> dict[str, Any]:
    """The stream's first line: ``status`` (a status line's fields) typed ``status``, with
    the schema it says (schema 1 when it says none: an older server's)."""
    schema = status.get("schema")
    known = isinstance(schema, int) and not isinstance(schema, bool)
    return {**status, "type": EVENT_STATUS, "schema": schema if known else 1}


def server_event(entry: dict[str, Any], at: str) -> dict[str, Any]:
    """The ``server`` event ``mux server watch`` prints after the status line: ``entry`` (the
    server's ``mux server status --json`` entry) without the status line it nests, which
    the first line already is. ``at``: when it was made."""
    return {
        "type": EVENT_SERVER,
        "data": {k: v for k, v in entry.items() if k != "status"},
        "at": at,
    }


def _refuse_non_standard(line: bytes) -> None:
    """Raise :class:`StatusLineError` for a line a strict JSON parser refuses (NaN,
    Infinity); what else is wrong with it the protocol's parsers say."""
    try:
        strict_json(line)
    except NonStandardJson as exc:
        raise StatusLineError(f"not JSON ({exc})", "garbage") from None
    except (ValueError, UnicodeDecodeError, RecursionError):
        pass


def read_lines(stream: IO[bytes]) -> Iterator[bytes]:
    """Complete lines from ``stream``, each at most :data:`MAX_WATCH_LINE` bytes."""
    while True:
        line = stream.readline(MAX_WATCH_LINE + 1)
        if not line:
            return
        if not line.endswith(b"\n"):
            if len(line) > MAX_WATCH_LINE:
                raise StreamEnded("the server sent a line longer than 64 KiB", clean=False)
            raise StreamEnded("the stream was cut in the middle of a line", clean=False)
        yield line


class WatchStream:
    """An open ``GET /api/watch``: the server's status line, then its event lines."""

    def __init__(
        self,
        address: str,
        status: Any,
        report: Any,
        response: Any,
        connection: Any,
        read_timeout: float = READ_TIMEOUT,
    ):
        self.address = address
        self.status = status  # protocol.StatusLine
        self.report = report  # servers.ServerReport of the first line
        self._response = response
        self._connection = connection
        self._read_timeout = read_timeout

    def events(self) -> Iterator[WatchEvent]:
        """Each event as it comes (heartbeats are not passed on); raises
        :class:`StreamEnded` when the stream ends, or when no line came for the read
        timeout (a server that is alive sends a heartbeat at least every 15 s)."""

        last: WatchEvent | None = None
        lines = read_lines(self._response)
        while True:
            try:
                line = next(lines, None)
            except TimeoutError:
                raise StreamEnded(
                    f"no line from the server for {self._read_timeout:g}s: it may be hung",
                    clean=False,
                ) from None
            except OSError as exc:
                raise StreamEnded(
                    f"the connection failed: {exc.strerror or exc.__class__.__name__}",
                    clean=False,
                ) from None
            if line is None:
                break
            try:
                _refuse_non_standard(line)
                event = parse_watch_event(line)
            except StatusLineError as exc:
                raise StreamEnded(
                    f"the server sent a line that is not an event: {exc}", clean=False
                ) from None
            if event.type == EVENT_HEARTBEAT:
                continue
            last = event
            yield event
            if event.type in (EVENT_SERVER_STOPPING, EVENT_WATCH_DROPPED):
                break
        if last is not None and last.type == EVENT_SERVER_STOPPING:
            raise StreamEnded(str(last.data.get("reason", "the server stopped")), clean=True)
        if last is not None and last.type == EVENT_WATCH_DROPPED:
            reason = str(last.data.get("reason", "no reason given"))
            raise StreamEnded(f"the server dropped this watcher: {reason}", clean=False)
        raise StreamEnded("the server closed the stream without saying why", clean=False)

    def close(self) -> None:
        self._response.close()
        self._connection.close()


def open_watch(address: str, *, timeout: float, read_timeout: float = READ_TIMEOUT) -> WatchStream:
    """Connect to a server's watch endpoint and read its first line within ``timeout``; then
    each line within ``read_timeout`` (:meth:`WatchStream.events`).

    Raises :class:`~updater.errors.MuxError` when nothing answers, when the server has no
    watch endpoint (protocol 1: the error names the restart command), or when its first
    line is not a status line.
    """

    target = parse_server_address(address)
    display = target.display
    peer = Peer()
    connection = open_connection(target, timeout, peer)
    try:
        with Watchdog(connection, timeout) as watchdog:
            try:
                connection.connect()
                sock = connection.sock  # the response keeps it; the connection lets go of it
                headers = {"Accept": "application/x-ndjson"}
                proof = Proof.for_connection(target, sock, "GET", WATCH_PATH)
                headers.update(proof.headers if proof else {})
                connection.request("GET", WATCH_PATH, headers=headers)
                response = connection.getresponse()
                if proof is not None:
                    proof.check(target, response.getheader(PROOF_HEADER))
                first = response.readline(MAX_WATCH_LINE + 1) if response.status == 200 else b""
            except (FileNotFoundError, ConnectionRefusedError):
                raise MuxError(f"no mux server runs on {display}") from None
            except NotYours as exc:
                raise MuxError(f"will not watch {display}: {exc}") from None
            except (OSError, http.client.HTTPException) as exc:
                if watchdog.fired:
                    raise MuxError(
                        f"the server on {display} did not answer within {timeout:g}s"
                    ) from None
                raise MuxError(
                    f"cannot watch the server on {display}: {exc.__class__.__name__}"
                ) from None
            if watchdog.fired:
                raise MuxError(f"the server on {display} did not answer within {timeout:g}s")
        if response.status in (401, 403) and isinstance(target, TcpAddress):
            raise MuxError(
                f"the server on {display} refused to be watched: "
                + refused_detail(target, response.status, WATCH_PATH)
            )
        if response.status != 200:
            report = query_server(display)
            if response.status == 404 and report.status is not None:
                raise MuxError(
                    f"the server on {display} (mux {report.status.version}, protocol "
                    f"{report.status.protocol_version}) has no watch endpoint",
                    hint=f"restart it with the current mux: {restart_command_for(report.address)}",
                )
            raise MuxError(
                f"the server on {display} refused to be watched (HTTP {response.status})"
            )
        try:
            _refuse_non_standard(first)
            status = parse_status_line(first)
        except StatusLineError as exc:
            raise MuxError(
                f"the server on {display} did not start its stream with a status line: {exc}"
            ) from None
        report = with_executable(
            ServerReport(
                display,
                "live",
                status,
                f"mux {status.version}, protocol {status.protocol_version}",
                peer_pid=peer.pid,
            )
        )
        # Events may be hours apart, but heartbeats are not: silence means a hung server.
        sock.settimeout(read_timeout)
    except BaseException:
        connection.close()
        raise
    return WatchStream(display, status, report, response, connection, read_timeout)
