"""Start, stop and restart a mux server from another process (``mux server start|stop|restart``).

A server is started as a background child of this mux's own build
(:func:`~updater.config.buildinfo.current_mux_command` ``server run``), its log in the runtime
directory, and is waited for until it answers with its status line; stopping one is the
shutdown request every protocol version understands (:mod:`updater.protocol`). The server
itself is :mod:`updater.daemon.server`; these are the rules both sides share: where a
socket's lock and log go, which directory a socket may be made in (none that another user
can write: :func:`check_socket_folder`), and how the files beside it are opened (never
through a link, only this user's own regular file: :func:`open_own_file`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, NamedTuple

from updater.config.buildinfo import current_mux_command
from updater.core.verdicts import ServerReport, restart_command_for
from updater.errors import EXIT_NOT_YOURS, MuxError, NotYoursError, UsageError
from updater.protocol import (
    SHUTDOWN_PATH,
    StatusLine,
)
from updater.servers import owner
from updater.servers.addresses import (
    ServerAddress,
    TcpAddress,
    UnixAddress,
    connect_host,
    parse_server_address,
)
from updater.servers.proof import NotYours
from updater.servers.runtime import SOCKET_LOCK_SUFFIX, runtime_dir, tcp_secret_path
from updater.servers.status import query_server
from updater.servers.wire import DEFAULT_TIMEOUT, NotHttp, http_request

StopResult = Literal["stopped", "not-running"]
DIRECTORY_MODE = 0o700
# Started servers outlive the call; keeping their Popen objects avoids "still running"
# warnings when they would otherwise be garbage-collected.
_started: list[subprocess.Popen[bytes]] = []
# How long start() waits for a new server to answer. Only a deadline: start returns as soon
# as the server is live (a fraction of a second), but a loaded 2-core CI machine can take
# seconds to import a development mux.
START_TIMEOUT = 15.0
STOP_TIMEOUT = 5.0
ANSWERING = frozenset({"live", "hung", "garbage", "foreign", "no-protocol", "not-yours"})
# A server that fails to come up is asked to stop (SIGTERM to its whole process group), then
# killed after this long; nothing it started outlives the failure.
STOP_GRACE = 0.2
# A TCP server shares its port with later servers of the same user (SO_REUSEPORT), so that a
# restart leaves the port no moment free (updater.servers.takeover). Only where the kernel
# lets no other user join: Linux. (macOS has no such rule: there the gap remains.)
SHARES_PORT = sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")
OVERLAP_TRIES = 6  # status queries in a row while a new server listens beside the old one
FAILED_LOG_SUFFIX = ".failed"  # <name>.log.failed: the log of the last start that failed


class Expected(NamedTuple):
    """What a started server must answer to count as healthy: this version and protocol."""

    version: str
    protocol_version: int


class AddressHeld(NotYoursError):
    """A server could not start because something else holds its address (exit 6): another
    user's socket, or a process of this user's that is no mux server of this address."""


class AlreadyRunning(MuxError):
    """A live mux server already answers on the address: nothing was started there.
    ``report`` is its answer (``mux server start`` reports it and exits 0)."""

    def __init__(self, message: str, *, report: ServerReport, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.report = report


class StartFailed(MuxError):
    """A started server did not come up healthy, and was stopped with everything it started.

    ``reason`` says how in a few words ("it exited with code 1: …", "it was killed by
    SIGSEGV", "it did not answer within 8s", "it answered as mux 1.1.0, protocol 3");
    ``log_path`` is its log."""

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        log_path: Path,
        hint: str | None = None,
        exit_code: int | None = None,
    ):
        super().__init__(message, hint=hint)
        self.reason = reason
        self.log_path = log_path
        self.server_exit = exit_code  # the server's own exit code, when it exited
        # Other users' connections that crowded the port while it did not answer ("uid 1501:
        # 212 connections"): then its silence says nothing of the build (_crowded_by).
        self.crowded_by: str | None = None


def as_address(address: Path | str) -> ServerAddress:
    if isinstance(address, Path):
        return UnixAddress(str(address))
    return parse_server_address(address)


def lock_path(socket_path: Path) -> Path:
    """The ``flock`` a server holds for as long as it serves ``socket_path``."""
    return socket_path.with_name(socket_path.name + SOCKET_LOCK_SUFFIX)


def _is_mux_runtime_dir(directory: Path) -> bool:
    try:
        return directory == runtime_dir()
    except MuxError:
        return False


def ensure_private_directory(directory: Path) -> None:
    """Create ``directory`` with mode 0700; tighten mux's own runtime dir if it is looser."""
    try:
        directory.mkdir(parents=True, mode=DIRECTORY_MODE)
    except FileExistsError:
        if _is_mux_runtime_dir(directory):
            info = directory.stat()
            if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) != DIRECTORY_MODE:
                os.chmod(directory, DIRECTORY_MODE)
        return
    except OSError as exc:
        raise MuxError(f"cannot create {directory}: {exc.strerror}") from None
    os.chmod(directory, DIRECTORY_MODE)  # mkdir's mode went through the umask


def check_socket_folder(directory: Path) -> None:
    """Refuse a folder for a server's socket, lock and log that another user could put a
    file or a link in (writable by its group or by everyone, sticky or not; or another
    user's folder): a planted link would make the server write where that user wants."""
    try:
        info = os.stat(directory)
    except OSError as exc:
        raise MuxError(f"cannot use {directory} for a mux server: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise MuxError(f"cannot use {directory} for a mux server: it is not a folder")
    hint = "use a folder only you can write, such as mux's runtime dir (--name NAME)"
    if info.st_uid not in (os.geteuid(), 0):
        raise MuxError(
            f"refusing to put a mux server in {directory}: it belongs to another user "
            f"(uid {info.st_uid})",
            hint=hint,
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise MuxError(
            f"refusing to put a mux server in {directory}: other users can write to it "
            f"(mode {stat.S_IMODE(info.st_mode):o}), so they could plant links where the "
            "server writes its lock and log",
            hint=hint,
        )


def open_own_file(path: Path, *, truncate: bool = False) -> int:
    """Open ``path`` to read and write, creating it (0600): never through a symbolic link,
    and only when what was opened is a regular file of this user's with no other name (a
    hard link to someone's file is refused, not truncated). ``truncate`` empties it then."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if os.path.islink(path):
            raise MuxError(f"refusing to open {path}: it is a symbolic link") from None
        raise MuxError(f"cannot open {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise MuxError(f"refusing to open {path}: it is not a regular file")
        if info.st_uid != os.geteuid():
            raise MuxError(f"refusing to open {path}: it belongs to another user")
        if info.st_nlink != 1:
            raise MuxError(f"refusing to open {path}: it has other names (hard links)")
        if truncate:
            os.ftruncate(fd, 0)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_secret_file(port: int, secret: str) -> tuple[int, int]:
    """``secret`` as the port's secret file (0600), written to a new file and renamed into
    place, so that the file it replaces (a replaced server's, a dead one's) keeps its inode
    apart from this one; returns the new file's (device, inode). Raises ``OSError``."""
    path = tcp_secret_path(port)
    temporary = f"{path}.{os.getpid()}.new"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, secret.encode("ascii") + b"\n")
            written = os.fstat(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return written.st_dev, written.st_ino


def answering_error(report: ServerReport) -> MuxError:
    if report.state == "not-yours":
        return NotYoursError(f"{report.address} is {report.detail}; nothing was started there")
    if report.state == "live" and report.status is not None:
        status = report.status
        return AlreadyRunning(
            f"a mux server already runs on {report.address} "
            f"(pid {status.pid}, mux {status.version}, protocol {status.protocol_version})",
            report=report,
            hint=f"to replace it: {restart_command_for(report.address)}",
        )
    return MuxError(
        f"something already answers on {report.address} ({report.state}: {report.detail})"
    )


# -- controlling a server from another process ------------------------------------------


def _address_args(target: ServerAddress) -> list[str]:
    if isinstance(target, UnixAddress):
        return ["--socket", str(target.path)]
    return ["--url", target.display]


def log_path_for(target: ServerAddress) -> Path:
    """Where a started server writes its log (truncated at each start)."""
    if isinstance(target, UnixAddress):
        name = target.path.name.removesuffix(".sock") or target.path.name
        return target.path.with_name(f"{name}.log")
    return runtime_dir() / f"tcp-{target.port}.log"


def _last_log_line(path: Path) -> str:
    try:
        with path.open("rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 4096))
            tail = log.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def wait_for(condition: Callable[[], bool], deadline: float) -> bool:
    """Poll ``condition`` until it holds or ``deadline`` (monotonic) passes."""
    delay = 0.005
    while True:
        if condition():
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(delay, remaining))
        delay = min(delay * 2, 0.1)


def _listening(target: ServerAddress, timeout: float) -> bool:
    """Does anything accept connections at ``target``? (Connect only: no request.)"""
    if isinstance(target, UnixAddress):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        where: Any = str(target.path)
    else:
        family = socket.AF_INET6 if ":" in target.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        where = (target.host, target.port)
    with sock:
        sock.settimeout(timeout)
        try:
            sock.connect(where)
        except (FileNotFoundError, ConnectionRefusedError):
            return False
        except TimeoutError:
            return True  # a full backlog: someone is there
        except OSError:
            return False
        return True


def _ours_listening(target: ServerAddress) -> bool:
    """Does a socket of this user's still listen at ``target``? On a TCP port, as the kernel
    says where it does: another user's listener there is not the server that was stopped."""
    if isinstance(target, TcpAddress):
        holders = owner.listeners(connect_host(target), target.port)
        if holders is not None:
            return any(holder.uid == os.geteuid() for holder in holders)
    return _listening(target, DEFAULT_TIMEOUT)


def _lock_is_free(socket_path: Path) -> bool:
    try:
        fd = os.open(lock_path(socket_path), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return True  # no lock file: a server that does not lock, or none at all
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # also drops our shared lock at once
    return True


def _remove_stale_socket(socket_path: Path) -> None:
    """Remove a socket file nobody serves, unless a server is starting on it right now."""
    try:
        if not stat.S_ISSOCK(os.lstat(socket_path).st_mode):
            return
        check_socket_folder(socket_path.parent)
        fd = open_own_file(lock_path(socket_path))
    except (OSError, MuxError):
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if not _listening(UnixAddress(str(socket_path)), DEFAULT_TIMEOUT):
            socket_path.unlink(missing_ok=True)
    except OSError:
        pass  # locked by a starting server, or already gone
    finally:
        os.close(fd)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # (not ours any more: someone else's process got the number)
    return True


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _terminate(process: subprocess.Popen[bytes], *, grace: float = STOP_GRACE) -> None:
    """Stop a server we started and everything it started: it runs in a session of its own
    (its process group is its pid), so SIGTERM goes to the whole group, then SIGKILL to
    what is left after ``grace``; returns once the group is gone (bounded)."""
    pgid = process.pid
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    wait_for(lambda: process.poll() is not None and not _group_alive(pgid), deadline)
    _signal_group(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(5.0)
    wait_for(lambda: not _group_alive(pgid), time.monotonic() + 2.0)


def start(
    address: Path | str,
    *,
    executable: str | None = None,
    timeout: float = START_TIMEOUT,
    expect: Expected | None = None,
    replacing: int | None = None,
) -> ServerReport:
    """Start a detached server on ``address`` and wait until its status line answers.

    Runs ``<executable or current_mux_command()> server run --socket P`` (``--url U`` for a
    TCP address) in a new session, stdin from /dev/null, output to :func:`log_path_for`.
    Raises :class:`MuxError` when something already answers there, and :class:`StartFailed`
    when the server exits, dies, stays silent for ``timeout`` seconds, or answers as another
    version or protocol than ``expect`` says: it is then stopped with everything it started,
    and its log kept as ``<log>.failed``. A start that fails because something else holds
    the address is no failed start: :class:`AddressHeld` names what holds it.

    ``replacing`` (a TCP address on Linux, :mod:`updater.servers.takeover`): the pid of this
    user's server that listens there now; the new one listens beside it, and only an answer
    from another pid counts.
    """
    target = as_address(address)
    if isinstance(target, UnixAddress):
        target = UnixAddress(os.path.abspath(target.path))  # the daemon runs from /
    elif target.port == 0:
        raise UsageError("a server started in the background needs a fixed port")
    log_path = log_path_for(target)
    ensure_private_directory(log_path.parent)
    check_socket_folder(log_path.parent)  # before anything there is asked or opened
    if replacing is None:
        existing = query_server(target.display, timeout=min(timeout, DEFAULT_TIMEOUT))
        if existing.state in ANSWERING:
            raise answering_error(existing)
    command = [executable] if executable else current_mux_command()
    command += ["server", "run", *_address_args(target)]
    command += ["--replacing", str(replacing)] if replacing is not None else []
    log_fd = open_own_file(log_path, truncate=True)
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=log_fd,
            start_new_session=True,  # no controlling terminal: closing it does not stop us
            close_fds=True,
            cwd="/",  # do not pin whatever directory start was called from
        )
    except OSError as exc:
        raise MuxError(f"cannot run {command[0]}: {exc.strerror or exc}") from None
    finally:
        os.close(log_fd)
    try:
        report = _wait_until_live(target, process, log_path, timeout, expect, replacing)
    except StartFailed as failed:
        if failed.server_exit is None and isinstance(target, TcpAddress):
            failed.crowded_by = _crowded_by(target)
        _terminate(process)
        failed.log_path = _keep_failed_log(log_path)
        failed.hint = f"full log: {failed.log_path}"
        held = held_by(target) if replacing is None else None  # (else: the old one, ours)
        if held is not None or failed.server_exit == EXIT_NOT_YOURS:
            raise AddressHeld(
                f"{target.display} is held by {held or 'a socket that does not listen'}, "
                "not by a server of yours: no server was started there",
                hint=f"its log: {failed.log_path}",
            ) from None
        raise
    except BaseException:
        _terminate(process)
        raise
    _started.append(process)
    return report


CROWD = 16  # other users' connections to a port that make a server's silence unproven


def _crowded_by(target: TcpAddress) -> str | None:
    counts = owner.crowd(connect_host(target), target.port)
    if sum(counts.values()) < CROWD:
        return None
    return ", ".join(f"uid {uid}: {n} connections" for uid, n in sorted(counts.items()))


def held_by(target: ServerAddress) -> str | None:
    """Who listens on a TCP address, as the kernel says (uid, and pid where visible); None
    for a Unix socket (in this user's private folder: no one else's), or when nobody does or
    the kernel does not say. (A socket bound without listening is in no table the kernel
    shows: the server's own exit code says that one.)"""
    if not isinstance(target, TcpAddress):
        return None
    holders = owner.listeners(connect_host(target), target.port) or []
    return owner.describe(holders) if holders else None


def _keep_failed_log(log_path: Path) -> Path:
    """The failed start's log, moved aside so that the next start there does not erase it."""
    kept = log_path.with_name(log_path.name + FAILED_LOG_SUFFIX)
    try:
        os.replace(log_path, kept)
    except OSError:
        return log_path
    return kept


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


def _wait_until_live(
    target: ServerAddress,
    process: subprocess.Popen[bytes],
    log_path: Path,
    timeout: float,
    expect: Expected | None,
    replacing: int | None,
) -> ServerReport:
    deadline = time.monotonic() + timeout
    latest: list[ServerReport] = []

    def answered() -> bool:
        status = _new_answer(target, deadline, replacing, latest)
        if status is not None:
            if expect is not None and (status.version, status.protocol_version) != expect:
                said = f"mux {status.version}, protocol {status.protocol_version}"
                raise StartFailed(
                    f"the mux server on {target.display} answered as {said}, not as mux "
                    f"{expect.version}, protocol {expect.protocol_version}",
                    reason=f"it answered as {said}",
                    log_path=log_path,
                )
            return True
        code = process.poll()
        # A wrapper may exit 0 after handing over to the server it started.
        if code is not None and code != 0:
            last = _last_log_line(log_path) or "no output"
            how = _exit_text(code)
            raise StartFailed(
                f"the mux server {how} before answering on {target.display}: {last}",
                reason=f"it {how}: {last}",
                log_path=log_path,
                exit_code=code,
            )
        return False

    if not wait_for(answered, deadline):
        raise StartFailed(
            f"the mux server did not answer on {target.display} within {timeout:g}s",
            reason=f"it did not answer within {timeout:g}s",
            log_path=log_path,
        )
    return latest[0]


def _new_answer(
    target: ServerAddress, deadline: float, replacing: int | None, latest: list[ServerReport]
) -> StatusLine | None:
    """The status line of the server being started, once it answers (``latest`` keeps the
    last report). Beside the server it replaces (``replacing``), nothing is asked until the
    kernel names a second listener on the port; then each new connection reaches either
    server (the kernel spreads them), so one that reached the old one (its pid, or a 401 for
    the new secret) is asked again at once rather than after the next pause."""
    if replacing is not None and isinstance(target, TcpAddress):
        holders = owner.listeners(connect_host(target), target.port, with_pids=False)
        if holders is not None and len(holders) < 2:
            return None
    for _ in range(OVERLAP_TRIES if replacing is not None else 1):
        remaining = max(0.05, deadline - time.monotonic())
        latest[:] = [query_server(target.display, timeout=min(DEFAULT_TIMEOUT, remaining))]
        status = latest[0].status if latest[0].state == "live" else None
        if status is not None and status.pid == replacing:
            continue  # the server being replaced
        if status is not None or replacing is None or latest[0].state != "error":
            return status
    return None


def stop(address: Path | str, *, timeout: float = STOP_TIMEOUT) -> StopResult:
    """Ask the server on ``address`` to shut down and wait until it is gone.

    The shutdown request is the same for every protocol version, so this stops older and
    newer servers alike. Returns ``"not-running"`` (after removing a stale socket file)
    when nobody listens. Raises :class:`MuxError` when the server does not take the request
    or does not go away within ``timeout`` seconds.
    """
    target = as_address(address)
    display = target.display
    deadline = time.monotonic() + timeout
    try:
        code, _body = http_request(target, "POST", SHUTDOWN_PATH, timeout=timeout)
    except (FileNotFoundError, ConnectionRefusedError):
        if isinstance(target, UnixAddress):
            _remove_stale_socket(target.path)
        return "not-running"
    except TimeoutError:
        hint = "it may be hung"
        if isinstance(target, UnixAddress):
            hint += f"; find its process with: fuser {shlex.quote(display)}"
        raise MuxError(
            f"the server on {display} did not answer the shutdown request within {timeout:g}s",
            hint=hint,
        ) from None
    except NotYours as exc:
        raise NotYoursError(f"{display} is {exc}; nothing was stopped") from None
    except NotHttp as exc:
        raise MuxError(f"cannot ask the server on {display} to shut down: {exc}") from None
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        raise MuxError(f"cannot ask the server on {display} to shut down: {reason}") from None
    if not 200 <= code < 300:
        raise MuxError(
            f"the server on {display} refused the shutdown request (HTTP {code})",
            hint="`mux server status` shows what answers there",
        )
    gone = wait_for(lambda: not _ours_listening(target), deadline)
    if gone and isinstance(target, UnixAddress):
        gone = wait_for(lambda: _lock_is_free(target.path), deadline)
    if not gone:
        raise MuxError(
            f"the server on {display} accepted the shutdown request but is still there after {timeout:g}s"
        )
    return "stopped"


def restart(
    address: Path | str, *, executable: str | None = None, timeout: float = START_TIMEOUT
) -> ServerReport:
    """Stop the server on ``address`` (whatever its protocol) and start the current mux there."""
    stop(address, timeout=min(timeout, STOP_TIMEOUT))
    return start(address, executable=executable, timeout=timeout)
