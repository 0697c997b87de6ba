"""A restart that never leaves a loopback port free: the new server listens beside the old one.

Stopping a TCP server before starting its successor leaves its port free for a moment, and
any user of the machine may bind a free port: another user who takes it then holds the
address the user's clients and status lines name. So where the kernel lets a port be shared
by one user's sockets only (Linux's ``SO_REUSEPORT``: a socket of another uid cannot join),
a server started by this mux shares its port (:data:`updater.servers.control.SHARES_PORT`),
and a restart

1. checks that the old server shares it (:func:`possible`: a socket of ours binds beside it;
   a server started by an older mux never set the option, and is stopped first as before);
2. starts the new server beside the old one (``server run --replacing OLD_PID``) and waits
   for an answer from another pid than the old one's; the new server writes a new secret,
   which the old one does not know, so the old one refuses every request from then on;
3. stops the old server with SIGTERM, which it takes as a shutdown request, once the kernel
   names that pid as a listener of this user's on the port.

If the new server does not come up, it is stopped as any failed start is, the old one never
stopped serving, and its secret is written back (the new server replaced the file).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from pathlib import Path

from updater.core.verdicts import ServerReport
from updater.errors import MuxError
from updater.servers import control, owner
from updater.servers.addresses import TcpAddress, connect_host
from updater.servers.runtime import read_tcp_secret

REPLACED_LOG_SUFFIX = ".replaced"  # <log>.replaced: the log of the server a restart replaced


def possible(address: Path | str, old: ServerReport | None) -> bool:
    """Can a new server listen beside ``old`` on ``address``? (Linux, a TCP address, a live
    server of this user's that shares its port.)"""
    target = control.as_address(address)
    if not control.SHARES_PORT or not isinstance(target, TcpAddress):
        return False
    if old is None or old.status is None:
        return False
    host = connect_host(target)
    if owner.listeners(host, target.port, with_pids=False) is None:
        return False  # no kernel tables to tell the two servers apart, or to find the old one
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            probe.bind((host, target.port))  # no listen: nothing is ever accepted here
        except OSError:
            return False
    return True


def take_over(
    address: Path | str,
    old_pid: int,
    *,
    executable: str | None,
    timeout: float,
    expect: control.Expected,
) -> ServerReport:
    """Start this mux's server beside the one (``old_pid``) on ``address``, then stop that
    one. Raises :class:`~updater.servers.control.StartFailed` (the old server still runs,
    with its secret) when the new one does not come up."""
    target = control.as_address(address)
    assert isinstance(target, TcpAddress)
    secret = read_tcp_secret(target.port)
    # The old server writes to its log until it stops: the new one starts a log of its own
    # rather than truncating a file the old one still writes to at its own offset.
    log = control.log_path_for(target)
    replaced_log = log.with_name(log.name + REPLACED_LOG_SUFFIX)
    moved = _move(log, replaced_log)
    try:
        report = control.start(
            address, executable=executable, timeout=timeout, expect=expect, replacing=old_pid
        )
    except BaseException:
        if secret is not None:
            restore_secret(target.port, secret)
        if moved:
            _move(replaced_log, log)
        raise
    retire(target, old_pid)
    return report


def _move(source: Path, destination: Path) -> bool:
    try:
        os.replace(source, destination)
    except OSError:
        return False
    return True


def retire(target: TcpAddress, pid: int, *, timeout: float = control.STOP_TIMEOUT) -> None:
    """Stop the replaced server: SIGTERM to ``pid`` once the kernel names it as a listener of
    this user's on the port (never a signal to a pid it does not), then wait until it is gone."""
    if not _listens_here(target, pid):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if not control.wait_for(lambda: not _listens_here(target, pid), time.monotonic() + timeout):
        raise MuxError(
            f"the new server answers on {target.display}, but the one it replaced "
            f"(pid {pid}) still listens there after {timeout:g}s",
            hint=f"stop it with: kill {pid}",
        )


def _listens_here(target: TcpAddress, pid: int) -> bool:
    holders = owner.listeners(connect_host(target), target.port, with_pids=False) or []
    ours = {holder.inode for holder in holders if holder.uid == os.geteuid()}
    return bool(ours) and owner.holds(pid, ours)


def restore_secret(port: int, secret: str) -> None:
    """Write ``secret`` back as the port's secret file: the replaced server still uses it."""
    with contextlib.suppress(OSError):
        control.write_secret_file(port, secret)
