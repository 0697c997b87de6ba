"""Bounds on a whole answer: a deadline for a small document, a minimum speed for an archive.

httpx's timeouts bound each socket operation, so a trickle outlives them; a budget is
enforced inside the sockets instead: every connection goes through a network backend of its
own (:class:`BudgetedBackend`, set on httpcore's pool) whose reads wake at the budget's
checkpoints and raise :class:`OverBudget` once it is spent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import httpcore
import httpx

T = TypeVar("T")

if TYPE_CHECKING:
    import ssl


class OverBudget(Exception):
    """A request ran out of its budget. Deliberately not an httpcore or httpx error: raised
    inside httpcore, it reaches :class:`HttpClient` untouched (never retried as a timeout)."""


class Budget:
    """No bound (an archive download without a minimum speed: only stalls end it)."""

    def next_check(self, now: float) -> float:
        """Seconds until :meth:`check` must run again, at the latest."""
        return float("inf")

    def check(self, now: float) -> None:
        """Raise :class:`OverBudget` when the request must give up."""

    def received(self, count: int) -> None:
        pass


class Deadline(Budget):
    """``MUX_HTTP_DEADLINE``: the whole answer within this many seconds."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def next_check(self, now: float) -> float:
        return self.end - now

    def check(self, now: float) -> None:
        if now >= self.end:
            raise OverBudget(f"no answer within {self.seconds:g} s (MUX_HTTP_DEADLINE)")


class MinSpeed(Budget):
    """``MUX_HTTP_MIN_SPEED`` over ``MUX_HTTP_SPEED_WINDOW``: in every window (counted from the
    start, as install.sh's watchdog does) at least speed x window bytes must arrive."""

    def __init__(self, bytes_per_second: float, window: float) -> None:
        self.speed, self.window = bytes_per_second, window
        self.window_end = time.monotonic() + window
        self.got = 0

    def next_check(self, now: float) -> float:
        return self.window_end - now

    def check(self, now: float) -> None:
        if now < self.window_end:
            return
        if self.got < self.speed * self.window:
            raise OverBudget(
                f"slower than {self.speed:g} bytes/s over {self.window:g} s "
                "(MUX_HTTP_MIN_SPEED, MUX_HTTP_SPEED_WINDOW)"
            )
        self.got, self.window_end = 0, now + self.window

    def received(self, count: int) -> None:
        self.got += count


class Budgets(threading.local):
    """The budget of the request this thread is making through one client (None: none yet)."""

    current: Budget | None = None


def within(
    budget: Budget | None, operation: Callable[[float | None], T], timeout: float | None
) -> T:
    """Run one socket operation (connect, TLS handshake, write) for at most its ``timeout`` and
    what the budget has left."""
    if budget is None:
        return operation(timeout)
    now = time.monotonic()
    budget.check(now)
    try:
        return operation(_socket_timeout(budget.next_check(now), timeout))
    except httpcore.TimeoutException:
        budget.check(time.monotonic())
        raise


def _socket_timeout(budget_wait: float, timeout: float | None) -> float | None:
    """The smaller of the two (None: no limit at all), never zero (which means non-blocking)."""
    limit = timeout if budget_wait == float("inf") else budget_wait
    if timeout is not None and limit is not None:
        limit = min(limit, timeout)
    return None if limit is None else max(limit, 0.001)


# httpcore asks its stream for 64 KiB at a time, and every block then passes through h11,
# httpcore, httpx and mux's download loop in Python. A plain connection asks the socket for up
# to 1 MiB instead: it returns what has arrived, so a fast download passes far fewer blocks
# (docs/build.md has the measurement), and h11 takes any amount. A TLS socket returns one record
# (16 KiB at most) whatever it is asked for, and would allocate the whole 1 MiB for each: its
# reads keep httpcore's size.
PLAIN_READ_SIZE = 1 << 20


class BudgetedStream(httpcore.NetworkStream):
    def __init__(
        self, stream: httpcore.NetworkStream, budgets: Budgets, *, tls: bool = False
    ) -> None:
        self._stream = stream
        self._budgets = budgets
        self._read_size = 0 if tls else PLAIN_READ_SIZE

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        """Read with ``timeout`` as the stall limit (no byte for that long), waking up at the
        budget's checkpoints in between."""
        max_bytes = max(max_bytes, self._read_size)
        budget = self._budgets.current
        if budget is None:
            return self._stream.read(max_bytes, timeout)
        started = time.monotonic()
        while True:
            now = time.monotonic()
            budget.check(now)
            wait = budget.next_check(now)
            stall_left = None if timeout is None else timeout - (now - started)
            if stall_left is not None:
                if stall_left <= 0:
                    raise httpcore.ReadTimeout("timed out")
                wait = min(wait, stall_left)
            try:
                data = self._stream.read(max_bytes, _socket_timeout(wait, None))
            except httpcore.ReadTimeout:
                if stall_left is not None and wait >= stall_left:
                    raise
                continue  # a checkpoint of the budget, not a stall: check it, then read on
            budget.received(len(data))
            return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        within(self._budgets.current, lambda t: self._stream.write(buffer, t), timeout)

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        stream = within(
            self._budgets.current,
            lambda t: self._stream.start_tls(ssl_context, server_hostname, t),
            timeout,
        )
        return BudgetedStream(stream, self._budgets, tls=True)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class BudgetedBackend(httpcore.NetworkBackend):
    def __init__(self, backend: httpcore.NetworkBackend, budgets: Budgets) -> None:
        self._backend = backend
        self._budgets = budgets

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = within(
            self._budgets.current,
            lambda t: self._backend.connect_tcp(host, port, t, local_address, socket_options),
            timeout,
        )
        return BudgetedStream(stream, self._budgets)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        stream = within(
            self._budgets.current,
            lambda t: self._backend.connect_unix_socket(path, t, socket_options),
            timeout,
        )
        return BudgetedStream(stream, self._budgets)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def budget_every_connection(client: httpx.Client, budgets: Budgets) -> None:
    """Put every connection ``client`` opens, direct or through a proxy from the environment,
    on a :class:`BudgetedBackend`.

    httpx has no public way to choose httpcore's network backend, so this sets the pool's
    (``_network_backend``, httpcore 1.x); a test fails if a new httpx moves it.
    """
    mounts: dict[Any, Any] = getattr(client, "_mounts", {})
    for transport in (getattr(client, "_transport", None), *mounts.values()):
        if transport is None:
            continue
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is None:
            raise RuntimeError("httpx/httpcore changed: no network backend to bound requests with")
        pool._network_backend = BudgetedBackend(backend, budgets)  # type: ignore[union-attr]
