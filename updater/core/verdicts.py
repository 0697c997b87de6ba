"""Which live servers need a restart, now or after an update, and the command for it (pure).

The one restart rule (:func:`needs_restart`): a server must be restarted to work with a mux
that speaks another protocol; a server of another version at the same protocol keeps working
(compatible), and is told how to move when convenient.

What one server answered is a :class:`ServerReport`: :mod:`updater.servers.status` fills it,
and the verdicts here and the check's report (:mod:`updater.core.report`) read it, so the
record sits beside those users, not above them with the client that asks.
"""

from __future__ import annotations

from updater._records import NamedTuple

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, Literal

    from updater.protocol import StatusLine

    ServerState = Literal[
        "live", "stale", "hung", "garbage", "foreign", "no-protocol", "not-yours", "error"
    ]


class ServerReport(NamedTuple):
    """What one address answered: its state and, when it is a mux server, its status line.

    ``executable`` is the resolved path of the build the server runs from: what its status
    line says, else what the operating system says of the process behind the socket (the
    kernel's peer credentials of a Unix socket, or the status line's pid), else None.
    ``build_installed`` says whether that build is still on disk (None: unknown).
    """

    address: str
    state: ServerState
    status: StatusLine | None
    detail: str
    peer_pid: int | None = None  # the process listening on a Unix socket, as the kernel says
    executable: str | None = None
    executable_source: Literal["status-line", "os"] | None = None
    build_installed: bool | None = None

    @property
    def pid(self) -> int | None:
        """The server's process: the kernel's word for a Unix socket, else the status line's."""
        if self.peer_pid is not None:
            return self.peer_pid
        return self.status.pid if self.status else None

    def to_json(self) -> dict[str, Any]:
        status = self.status
        return {
            "address": self.address,
            "state": self.state,
            "detail": self.detail,
            "status": status.to_json() if status else None,
            "version": status.version if status else None,
            "protocol_version": status.protocol_version if status else None,
            "pid": self.pid,
            "executable": self.executable or "unknown",
            "executable_source": self.executable_source,
            "build_installed": self.build_installed,
        }


class ServerVerdict(NamedTuple):
    """One server's answer, and what it needs.

    ``restart_needed``: it speaks another protocol than the running (or installed) mux, or
    the build it runs from was deleted under it (it may fail at its next code path).
    ``compatible``: it runs another version that speaks the same protocol; it keeps working
    and may be restarted when convenient (not a pending restart).
    ``same_protocol``: it speaks the running (or installed) mux's protocol, whatever its
    version (None: no status line); what ``--json`` calls ``compatible``, as the watch's
    ``update-installed`` event does.
    """

    report: ServerReport
    restart_needed: bool
    restart_needed_after_update: bool  # speaks another protocol than the release on offer
    restart_command: str | None
    compatible: bool = False
    build_deleted: bool = False
    # Is the build it reports one mux knows by itself (a version of this install, or the
    # running build)? None: not asked. A restart never runs another: it starts this mux's own.
    build_known: bool | None = None
    same_protocol: bool | None = None

    @property
    def live(self) -> bool:
        return self.report.status is not None


def needs_restart(server_protocol: int, mux_protocol: int | None) -> bool:
    """The one restart rule: a server must be restarted to work with a mux that speaks
    another protocol than it does (None: that mux's protocol is not known, so nothing to say).
    A server of another version at the same protocol keeps working (compatible)."""
    return mux_protocol is not None and server_protocol != mux_protocol


def server_verdicts(
    reports: Sequence[ServerReport],
    *,
    running_protocol: int,
    offered_protocol: int | None = None,
    current_version: str | None = None,
    known_builds: frozenset[str] | None = None,
) -> tuple[ServerVerdict, ...]:
    """Which live servers speak another protocol than ``running_protocol`` (restart now) or
    than ``offered_protocol`` (restart after the update), which run a build that is gone,
    and which run another version than ``current_version`` at the same protocol
    (compatible), and, given ``known_builds`` (the resolved executables of this install's
    versions and of the running build), which run a build mux does not know. Servers that
    did not answer with a status line need nothing: there is nothing to compare."""
    verdicts = []
    for report in reports:
        status = report.status
        if report.state != "live" or status is None:
            verdicts.append(ServerVerdict(report, False, False, None))
            continue
        other_protocol = needs_restart(status.protocol_version, running_protocol)
        deleted = report.build_installed is False
        after = needs_restart(status.protocol_version, offered_protocol)
        compatible = (
            not other_protocol
            and not deleted
            and current_version is not None
            and status.version != current_version
        )
        needs_command = other_protocol or deleted or after or compatible
        verdicts.append(
            ServerVerdict(
                report,
                restart_needed=other_protocol or deleted,
                restart_needed_after_update=after,
                restart_command=restart_command_for(report.address) if needs_command else None,
                compatible=compatible,
                build_deleted=deleted,
                build_known=(None if known_builds is None else report.executable in known_builds),
                same_protocol=not other_protocol,
            )
        )
    return tuple(verdicts)


def restart_command_for(address: str) -> str:
    """``mux server restart --socket P`` (or ``--url U``) for the server at ``address``: run
    through the mux link, it is the *installed* mux that stops the old server gracefully and
    starts a new one."""
    import shlex  # (not at the top: only a server that needs a restart needs its command)

    if address.startswith("http://"):
        return f"mux server restart --url {shlex.quote(address)}"
    return f"mux server restart --socket {shlex.quote(address)}"
