"""HTTP for release sources and downloads: one client, one host policy, readable failures.

httpx is imported here and nowhere on the fast paths. Every request goes through
:class:`HttpClient`, which

* refuses plain ``http://`` except to loopback,
* follows redirects itself, checking each hop against the :class:`HostPolicy`,
* sends the GitHub token only to the hosts allowed to see it, and retries once without it
  after a 401 (stale tokens are a classic failure),
* retries connection failures and 5xx answers a bounded number of times with backoff,
* bounds what it reads: every body capped (error pages at 64 KiB), every small document within
  an overall deadline (``MUX_HTTP_DEADLINE``, tries included), every archive above a minimum
  average speed (``MUX_HTTP_MIN_SPEED`` over ``MUX_HTTP_SPEED_WINDOW``),
* turns every failure into one :class:`NetworkError` line naming the URL, the reason and the fix.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple, TypeVar
from urllib.parse import urljoin, urlsplit

import httpcore
import httpx

from updater.config.settings import HttpSettings
from updater.errors import NetworkError, RateLimitError, printable
from updater.urls import check_url_scheme, url_origin

if TYPE_CHECKING:
    import ssl

    from updater.net.download import Progress

USER_AGENT = "mux-updater"
MAX_REDIRECTS = 5
ERROR_BODY_LIMIT = 64 * 1024  # of an error page, read at most this much, then the connection closes
T = TypeVar("T")
_REDIRECT_STATUSES = (301, 302, 303, 307, 308)
# A number in a header: ASCII digits only (str.isdigit() also takes "²", which float() and
# int() refuse) and short enough for int() (which refuses more than 4300 digits).
_HEADER_NUMBER = re.compile(r"[0-9]{1,20}")


class HostPolicy(NamedTuple):
    """Where requests and redirects may go, and which hosts may see the token.

    An entry ``host`` admits that host on any port; ``host:port`` admits only that port
    (configured bases such as a GitHub Enterprise server or a loopback test server).
    """

    allowed_hosts: frozenset[str] = frozenset()
    token_hosts: frozenset[str] = frozenset()
    advice: str = ""  # how a refused host can be allowed, if it can

    @staticmethod
    def _matches(url: str, entries: frozenset[str]) -> bool:
        host = (urlsplit(url).hostname or "").lower()
        return host in entries or url_origin(url) in entries

    def check(self, url: str, *, redirected_from: str | None = None) -> None:
        check_url_scheme(url)
        if self.allowed_hosts and not self._matches(url, self.allowed_hosts):
            origin = f" (redirected from {redirected_from})" if redirected_from else ""
            advice = f"; {self.advice}" if self.advice else ""
            shown = urlsplit(url)._replace(query="", fragment="").geturl()  # no signed query
            raise NetworkError(
                f"refusing to fetch {shown}: {url_origin(url)} is not an allowed release host"
                f"{origin}",
                hint="allowed: " + ", ".join(sorted(self.allowed_hosts)) + advice,
            )

    def may_see_token(self, url: str) -> bool:
        return self._matches(url, self.token_hosts)


def _proxy_for(url: str) -> str | None:
    """The proxy the environment gives for ``url`` (what httpx's trust_env uses), if any."""
    import urllib.request

    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    if not proxy or bypass(parts.hostname or "", proxies):
        return None
    return proxy


def _describe_transport_error(url: str, exc: Exception) -> NetworkError:
    text = str(exc) or exc.__class__.__name__
    lowered = text.lower()
    proxy = _proxy_for(url)
    if (
        isinstance(exc, httpx.ProxyError)
        or "proxy" in lowered
        or (proxy and isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)))
    ):
        return NetworkError(
            f"cannot reach {url} through the proxy {proxy or ''}: {text}".replace("  ", " "),
            hint="check HTTPS_PROXY / HTTP_PROXY / NO_PROXY",
        )
    if "certificate" in lowered or "ssl" in lowered or "tls" in lowered:
        return NetworkError(
            f"TLS failure for {url}: {text}",
            hint="behind an intercepting proxy, point SSL_CERT_FILE at its CA bundle",
        )
    if isinstance(exc, httpx.TimeoutException):
        return NetworkError(f"timed out talking to {url}", hint="check the network, then retry")
    if "name or service not known" in lowered or "nodename nor servname" in lowered:
        host = urlsplit(url).hostname
        return NetworkError(
            f"cannot resolve {host} for {url}", hint="check the network or DNS, then retry"
        )
    return NetworkError(f"cannot reach {url}: {text}", hint="check the network, then retry")


# -- what GitHub (or any server) said --------------------------------------------------------

SECONDARY_LIMIT_WAIT = 60.0  # GitHub: without Retry-After, wait at least a minute
# The longest wait a server's answer may impose: a lying or broken Retry-After date or reset
# time must not block every mux on the machine from that host for years.
LONGEST_RATE_LIMIT_WAIT = 7 * 86400.0


def rate_limit_of(
    response: httpx.Response, body: bytes = b"", *, now: float | None = None
) -> float | None:
    """When a rate-limited ``response`` says to try again (a Unix time); None when it is
    not a rate limit.

    GitHub answers a spent primary limit with 403 or 429 and ``x-ratelimit-remaining: 0``
    (``x-ratelimit-reset`` says when it refills), and a secondary limit with 403 or 429,
    ``Retry-After`` and a message about a "secondary rate limit" (older servers: "abuse
    detection") that never says "API rate limit". ``Retry-After`` wins; without either
    header a secondary limit means a minute.
    """
    status = response.status_code
    if status not in (403, 429):
        return None
    now = time.time() if now is None else now
    headers = response.headers
    retry_after = _retry_after(headers.get("retry-after"), now)
    spent = headers.get("x-ratelimit-remaining") == "0"
    message = github_message(body).lower()
    said = any(words in message for words in ("rate limit", "abuse detection", "too many requests"))
    if not (status == 429 or spent or retry_after is not None or said):
        return None
    reset = headers.get("x-ratelimit-reset", "")
    if retry_after is not None:
        retry_at = retry_after
    elif spent and _HEADER_NUMBER.fullmatch(reset):
        retry_at = max(now, float(reset))
    else:
        retry_at = now + SECONDARY_LIMIT_WAIT
    return min(retry_at, now + LONGEST_RATE_LIMIT_WAIT)


def _retry_after(value: str | None, now: float) -> float | None:
    """``Retry-After`` (seconds, or an HTTP date) as a Unix time."""
    if not value:
        return None
    value = value.strip()
    if _HEADER_NUMBER.fullmatch(value):
        return now + float(value)  # rate_limit_of caps the wait
    from email.utils import parsedate_to_datetime

    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def github_message(body: bytes, limit: int = 300) -> str:
    """The ``message`` of a JSON error body (GitHub's word on what went wrong), with the
    first detail of a 422's ``errors``; escaped and bounded. Empty when there is none."""
    import json

    try:
        doc = json.loads(body[:ERROR_BODY_LIMIT])
    except (ValueError, RecursionError):
        return ""
    if not isinstance(doc, dict) or not isinstance(doc.get("message"), str):
        return ""
    text = " ".join(doc["message"].split())
    errors = doc.get("errors")
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        first = errors[0]
        detail = first.get("message") if isinstance(first.get("message"), str) else None
        if detail is None:
            parts = [first.get(k) for k in ("resource", "field", "code")]
            detail = " ".join(str(part) for part in parts if isinstance(part, str))
        if detail:
            text += f" ({' '.join(detail.split())})"
    return printable(text, limit)


def _rate_limit_error(
    url: str, response: httpx.Response, body: bytes, retry_at: float
) -> RateLimitError:
    limit = response.headers.get("x-ratelimit-limit", "")
    said = github_message(body, 160)
    spent = response.headers.get("x-ratelimit-remaining") == "0"
    return rate_limit_error(
        "primary" if spent or "api rate limit" in said.lower() else "secondary",
        url,
        retry_at,
        said=said,
        per_hour=int(limit) if _HEADER_NUMBER.fullmatch(limit) else None,
        with_token="Authorization" in response.request.headers,
        status=response.status_code,
    )


def rate_limit_error(
    kind: str,
    url: str,
    retry_at: float,
    *,
    said: str = "",
    per_hour: int | None = None,
    with_token: bool = False,
    status: int | None = None,
) -> RateLimitError:
    """The one line for a rate limit: which one, for what, and when to try again."""
    when = _when(retry_at)
    if kind == "primary":
        hourly = f" ({per_hour} requests an hour)" if per_hour is not None else ""
        message = f"GitHub's API rate limit is used up{hourly} for {url}; it resets {when}"
        hint = (
            "wait until then; mux does not ask again before"
            if with_token
            else "set MUX_GITHUB_TOKEN (or GITHUB_TOKEN) to a token to raise the limit, or wait"
        )
    else:
        message = f"GitHub's secondary rate limit stopped {url}; retry {when}"
        hint = "wait until then (mux does not ask again before); many requests at once cause it"
    if said:
        message += f" (GitHub: {said})"
    return RateLimitError(message, hint=hint, status=status, retry_at=retry_at, kind=kind)


class RateLimits:
    """When servers asked mux not to ask again: one small file every mux process shares
    (``<user cache dir>/mux/http/rate-limits.json``), so that a sidebar's check, a server's
    background check and ``mux update`` all wait out a rate limit instead of asking again
    sooner in a loop (GitHub may block clients that keep asking while limited).

    An entry is per origin and per credential (a token's limit is not the anonymous one):
    setting a token after the anonymous limit ran out is not blocked.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    @staticmethod
    def key(url: str, credential: str) -> str:
        return f"{url_origin(url)} {credential}"

    def _read(self) -> dict[str, Any]:
        import json

        try:
            doc = json.loads(self.path.read_bytes())
        except (OSError, ValueError, RecursionError):
            return {}
        limits = doc.get("limits") if isinstance(doc, dict) else None
        return limits if isinstance(limits, dict) else {}

    def blocked(self, url: str, credential: str) -> RateLimitError | None:
        entry = self._read().get(self.key(url, credential))
        if not isinstance(entry, dict):
            return None
        until = entry.get("until")
        if not isinstance(until, (int, float)) or not _plausible_wait(until, time.time()):
            return None
        error = rate_limit_error(
            "primary" if entry.get("kind") == "primary" else "secondary",
            url,
            float(until),
            with_token=credential != "anonymous",
        )
        error.message += " (GitHub said so to an earlier request; not asking before then)"
        return error

    def close(self, url: str, credential: str, error: RateLimitError) -> None:
        import json

        from updater.files import atomic_write

        if error.retry_at is None:
            return
        now = time.time()
        limits = {
            key: entry
            for key, entry in self._read().items()
            if isinstance(entry, dict)
            and isinstance(entry.get("until"), (int, float))
            and _plausible_wait(entry["until"], now)
        }
        limits[self.key(url, credential)] = {"until": error.retry_at, "kind": error.kind}
        try:
            atomic_write(self.path, json.dumps({"schema": 1, "limits": limits}).encode())
        except OSError:
            pass  # a read-only cache: this process still stops; others may ask once more


def _plausible_wait(until: float, now: float) -> bool:
    """Still in force, and not beyond what any answer may impose (an entry written by an
    older mux, or edited by hand, is dropped rather than obeyed for years)."""
    return now < until <= now + LONGEST_RATE_LIMIT_WAIT + 60


def _when(at: float) -> str:
    seconds = max(0, round(at - time.time()))
    clock = datetime.fromtimestamp(at, tz=UTC)
    if seconds < 120:
        return f"at {clock:%H:%M:%S} UTC (in {seconds} s)"
    return f"at {clock:%H:%M} UTC (in {round(seconds / 60)} min)"


def status_error(url: str, response: httpx.Response, body: bytes = b"") -> NetworkError:
    """One line for an error answer (``body``: as much of it as was read): a rate limit with
    when to retry, else the status with the server's own message (escaped)."""
    retry_at = rate_limit_of(response, body)
    if retry_at is not None:
        return _rate_limit_error(url, response, body, retry_at)
    status = response.status_code
    said = github_message(body)
    with_token = "Authorization" in response.request.headers
    if status == 404:
        detail = f": {said}" if said and said.lower() != "not found" else ""
        return NetworkError(
            f"{url} was not found (HTTP 404{detail})",
            hint="check the repository (MUX_REPO), the source (--source) and --version",
            status=status,
        )
    if status in (401, 403):
        detail = f": {said}" if said else ""
        return NetworkError(
            f"{url} refused access (HTTP {status}{detail})",
            hint=(
                "check MUX_GITHUB_TOKEN / GITHUB_TOKEN (its scopes, and SSO authorization)"
                if with_token
                else "it needs a token: set MUX_GITHUB_TOKEN (or GITHUB_TOKEN)"
            ),
            status=status,
        )
    detail = f": {said}" if said else ""
    return NetworkError(f"{url} answered HTTP {status}{detail}", status=status)


class Fetched(NamedTuple):
    """A small document read whole; header names are lower case."""

    url: str
    status: int
    headers: dict[str, str]
    content: bytes


# -- bounds on a whole answer ------------------------------------------------------------------
#
# httpx's timeouts bound each socket operation, so a server that sends a byte every few
# seconds, or its headers a byte at a time, keeps a request alive forever. Every connection of
# an HttpClient goes through a network backend of its own (below) whose socket operations
# also answer to the request's *budget*: a deadline for a small document (every try, redirect
# and backoff included) or, for an archive, a minimum average speed over a window (across its
# resumed tries). Over budget, the blocked read itself ends: nothing waits for the next byte.


class OverBudget(Exception):
    """A request ran out of its budget. Deliberately not an httpcore or httpx error: raised
    inside httpcore, it reaches :class:`HttpClient` untouched (never retried as a timeout)."""


class _Budget:
    """No bound (an archive download without a minimum speed: only stalls end it)."""

    def next_check(self, now: float) -> float:
        """Seconds until :meth:`check` must run again, at the latest."""
        return float("inf")

    def check(self, now: float) -> None:
        """Raise :class:`OverBudget` when the request must give up."""

    def received(self, count: int) -> None:
        pass


class _Deadline(_Budget):
    """``MUX_HTTP_DEADLINE``: the whole answer within this many seconds."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def next_check(self, now: float) -> float:
        return self.end - now

    def check(self, now: float) -> None:
        if now >= self.end:
            raise OverBudget(f"no answer within {self.seconds:g} s (MUX_HTTP_DEADLINE)")


class _MinSpeed(_Budget):
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


class _Budgets(threading.local):
    """The budget of the request this thread is making through one client (None: none yet)."""

    current: _Budget | None = None


def _within(
    budget: _Budget | None, operation: Callable[[float | None], T], timeout: float | None
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


class _BudgetedStream(httpcore.NetworkStream):
    def __init__(
        self, stream: httpcore.NetworkStream, budgets: _Budgets, *, tls: bool = False
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
        _within(self._budgets.current, lambda t: self._stream.write(buffer, t), timeout)

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        stream = _within(
            self._budgets.current,
            lambda t: self._stream.start_tls(ssl_context, server_hostname, t),
            timeout,
        )
        return _BudgetedStream(stream, self._budgets, tls=True)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _BudgetedBackend(httpcore.NetworkBackend):
    def __init__(self, backend: httpcore.NetworkBackend, budgets: _Budgets) -> None:
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
        stream = _within(
            self._budgets.current,
            lambda t: self._backend.connect_tcp(host, port, t, local_address, socket_options),
            timeout,
        )
        return _BudgetedStream(stream, self._budgets)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        stream = _within(
            self._budgets.current,
            lambda t: self._backend.connect_unix_socket(path, t, socket_options),
            timeout,
        )
        return _BudgetedStream(stream, self._budgets)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def _budget_every_connection(client: httpx.Client, budgets: _Budgets) -> None:
    """Put every connection ``client`` opens, direct or through a proxy from the environment,
    on a :class:`_BudgetedBackend`.

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
        pool._network_backend = _BudgetedBackend(backend, budgets)  # type: ignore[union-attr]


def _read_capped(response: httpx.Response, limit: int) -> bytes:
    """At most ``limit`` bytes of a body (an error page: what it says, never all of it)."""
    chunks, total = [], 0
    try:
        for chunk in response.iter_bytes():
            chunks.append(chunk[: limit - total])
            total += len(chunks[-1])
            if total >= limit:
                break
    except httpx.HTTPError:
        pass  # the status is the news; a broken error body adds nothing
    return b"".join(chunks)


class HttpClient:
    """A small wrapper over :class:`httpx.Client` enforcing the host and token policy, and the
    bounds: every body capped, every small document within ``MUX_HTTP_DEADLINE``, every
    archive above ``MUX_HTTP_MIN_SPEED``."""

    def __init__(
        self,
        *,
        policy: HostPolicy | None = None,
        token: str | None = None,
        settings: HttpSettings | None = None,
        plain_loopback_only: bool = False,
        rate_limits: RateLimits | None = None,
    ) -> None:
        self.policy = policy or HostPolicy()
        self.rate_limits = rate_limits
        self.plain_loopback_only = plain_loopback_only
        self.token = token or None
        settings = settings or HttpSettings()
        self.retries = settings.retries
        self._backoff = settings.backoff
        self._deadline = settings.deadline
        self._min_speed, self._speed_window = settings.min_speed, settings.speed_window
        self._budgets = _Budgets()
        try:
            self._client = self._make_client(settings.timeout, plain_loopback_only)
        except ValueError as exc:  # httpx's word on a proxy URL it cannot use
            from updater.errors import UsageError

            raise UsageError(
                f"unusable proxy setting: {exc}",
                hint="check HTTPS_PROXY / HTTP_PROXY / ALL_PROXY",
            ) from None
        _budget_every_connection(self._client, self._budgets)

    @staticmethod
    def _make_client(connect_timeout: float, plain_loopback_only: bool) -> httpx.Client:
        return httpx.Client(
            follow_redirects=False,
            trust_env=True,
            # A client whose policy admits only plain-http loopback origins never speaks TLS:
            # skip loading the CA bundle (tens of milliseconds) for such a client.
            verify=not plain_loopback_only,
            timeout=httpx.Timeout(connect_timeout, read=connect_timeout),
            # Bodies as sent: a compressed one would be inflated before any cap could see it.
            headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"},
        )

    def close(self) -> None:
        self._client.close()

    def back_off(self, attempt: int) -> None:
        """Wait before retry number ``attempt`` (exponential backoff, within the budget)."""
        delay = self._backoff * 2 ** (attempt - 1)
        budget = self._budgets.current
        if budget is not None:
            now = time.monotonic()
            budget.check(now)
            delay = min(delay, max(budget.next_check(now), 0.0))
        time.sleep(delay)
        if budget is not None:
            budget.check(time.monotonic())

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def _budget(self, make: Callable[[], _Budget]) -> Iterator[None]:
        """Give this thread's requests the budget ``make`` builds, unless one is running: the
        outer budget (a download's, across its resumed tries) spans the inner requests."""
        if self._budgets.current is not None:
            yield
            return
        self._budgets.current = make()
        try:
            yield
        finally:
            self._budgets.current = None

    def _credential(self, url: str, use_token: bool) -> str:
        """Whose rate limit a request to ``url`` spends: the token's or the anonymous one."""
        if use_token and self.token and self.policy.may_see_token(url):
            return "token:" + hashlib.sha256(self.token.encode()).hexdigest()[:16]
        return "anonymous"

    def _headers(
        self, url: str, extra: Mapping[str, str] | None, use_token: bool
    ) -> dict[str, str]:
        headers = dict(extra or {})
        if use_token and self.token and self.policy.may_see_token(url):
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    @contextmanager
    def stream(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        follow_redirects: bool = True,
    ) -> Iterator[httpx.Response]:
        """Open ``url`` (after policy-checked redirects); the caller reads the body.

        Retries happen only before a response is handed out. Statuses other than 2xx/3xx/304
        become :class:`NetworkError` (after reading at most :data:`ERROR_BODY_LIMIT` bytes of
        the error page); 3xx is returned only when ``follow_redirects`` is off. Everything,
        the caller's reading included, is within the deadline (``MUX_HTTP_DEADLINE``) unless
        a download's budget already runs.
        """
        with self._budget(lambda: _Deadline(self._deadline)):
            try:
                response = self._open(url, headers, follow_redirects)
            except OverBudget as exc:
                raise _gave_up(url, exc) from None
            try:
                yield response
            except OverBudget as exc:
                raise _gave_up(url, exc) from None
            finally:
                response.close()

    def _open(
        self, url: str, headers: Mapping[str, str] | None, follow_redirects: bool
    ) -> httpx.Response:
        """The response ``url`` leads to, after redirects and retries (see :meth:`stream`)."""
        use_token = True
        attempt = 0
        while True:
            current = url
            redirected_from: str | None = None
            try:
                for _hop in range(MAX_REDIRECTS + 1):
                    self.policy.check(current, redirected_from=redirected_from)
                    if self.plain_loopback_only and not current.startswith("http://"):
                        raise NetworkError(
                            f"refusing {current}: this client speaks plain http only"
                        )
                    if self.rate_limits is not None:
                        waiting = self.rate_limits.blocked(
                            current, self._credential(current, use_token)
                        )
                        if waiting is not None:
                            raise waiting
                    request = self._client.build_request(
                        "GET", current, headers=self._headers(current, headers, use_token)
                    )
                    response = self._client.send(request, stream=True)
                    if response.status_code in _REDIRECT_STATUSES and follow_redirects:
                        location = response.headers.get("location")
                        response.close()
                        if not location:
                            raise NetworkError(f"{current} redirected without a location")
                        redirected_from, current = current, urljoin(current, location)
                        continue
                    break
                else:
                    raise NetworkError(f"too many redirects starting at {url}")
            except NetworkError:
                raise
            except UnicodeEncodeError:
                from updater.errors import UsageError

                raise UsageError(
                    "the GitHub token has characters HTTP headers cannot carry",
                    hint="check MUX_GITHUB_TOKEN / GITHUB_TOKEN",
                ) from None
            except (httpx.InvalidURL, ValueError) as exc:
                raise NetworkError(f"invalid URL {current[:200]!r}: {exc}") from None
            except httpx.HTTPError as exc:
                attempt += 1
                if attempt > self.retries:
                    raise _describe_transport_error(current, exc) from None
                self.back_off(attempt)
                continue
            status = response.status_code
            if status == 401 and use_token and "Authorization" in response.request.headers:
                response.close()
                use_token = False  # a stale token must not break what works anonymously
                continue
            if status >= 500 and attempt < self.retries:
                response.close()
                attempt += 1
                self.back_off(attempt)
                continue
            if status >= 400:
                try:
                    body = _read_capped(response, ERROR_BODY_LIMIT)
                finally:
                    response.close()
                error = status_error(current, response, body)
                if isinstance(error, RateLimitError) and self.rate_limits is not None:
                    self.rate_limits.close(current, self._credential(current, use_token), error)
                raise error
            return response

    def get(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        follow_redirects: bool = True,
        max_size: int = 16 * 1024 * 1024,
    ) -> Fetched:
        """GET a small document fully into memory, capped at ``max_size`` bytes, within the
        deadline (``MUX_HTTP_DEADLINE``)."""
        with self.stream(url, headers=headers, follow_redirects=follow_redirects) as response:
            chunks = []
            total = 0
            try:
                for chunk in response.iter_bytes():
                    total += len(chunk)
                    if total > max_size:
                        raise NetworkError(f"{url} is larger than {max_size} bytes; refusing it")
                    chunks.append(chunk)
            except httpx.HTTPError as exc:
                raise _describe_transport_error(url, exc) from None
            return Fetched(
                url=str(response.url),
                status=response.status_code,
                headers=dict(response.headers),
                content=b"".join(chunks),
            )

    def download_into(
        self,
        url: str,
        out: BinaryIO,
        *,
        size: int | None,
        max_size: int,
        label: str,
        progress: Progress,
    ) -> tuple[int, str]:
        """Stream ``url`` into ``out``, hashing it; returns (bytes, sha256 hex).

        With a known ``size`` a dropped connection or a stall is resumed with ``Range`` (from
        the first byte again when the server ignores it) up to ``retries`` times, and the body
        must be exactly that long. Without one the body is read once, to its end. Either way
        it never grows past ``max_size`` (:class:`VerificationError`), and it gives up when
        less than ``MUX_HTTP_MIN_SPEED`` bytes/s arrive over ``MUX_HTTP_SPEED_WINDOW``
        (across its tries).
        """
        with self._budget(self._speed_budget):
            return self._download_into(url, out, size, max_size, label, progress)

    def _speed_budget(self) -> _Budget:
        if self._min_speed > 0:
            return _MinSpeed(self._min_speed, self._speed_window)
        return _Budget()

    def _download_into(
        self,
        url: str,
        out: BinaryIO,
        size: int | None,
        max_size: int,
        label: str,
        progress: Progress,
    ) -> tuple[int, str]:
        from updater.errors import VerificationError

        def too_large() -> VerificationError:
            limit = (
                f"the {size} bytes it should have"
                if size is not None
                else (f"the {max_size}-byte limit")
            )
            return VerificationError(f"{label} is larger than {limit}; refusing it")

        cap = min(size, max_size) if size is not None else max_size
        digest = hashlib.sha256()
        done = 0
        failures = 0
        while True:
            headers = {"Range": f"bytes={done}-"} if done else {}
            try:
                with self.stream(url, headers=headers) as response:
                    if done and response.status_code != 206:
                        # The server ignored the Range: start again from the first byte.
                        out.seek(0)
                        out.truncate()
                        digest = hashlib.sha256()
                        done = 0
                    for block in response.iter_bytes():
                        if done + len(block) > cap:
                            raise too_large()
                        out.write(block)
                        digest.update(block)
                        done += len(block)
                        progress.advance(done)
            except (httpx.TransportError, httpx.StreamError) as exc:
                if size is None:  # no length to resume towards: never a partial file
                    raise NetworkError(
                        f"download of {url} failed after {done} bytes: "
                        f"{exc or exc.__class__.__name__}",
                        hint="check the network, then retry",
                    ) from None
                failures += 1
                if failures > self.retries:
                    raise NetworkError(
                        f"download of {url} failed after {done} of {size} bytes: "
                        f"{exc.__class__.__name__}",
                        hint="check the network, then retry",
                    ) from None
                self._back_off_within(url, failures)
                continue
            if size is not None and done < size:
                failures += 1
                if failures > self.retries:
                    raise NetworkError(
                        f"download of {url} stopped at {done} of {size} bytes",
                        hint="retry; if it persists the release file is truncated on the server",
                    )
                self._back_off_within(url, failures)
                continue
            return done, digest.hexdigest()

    def _back_off_within(self, url: str, attempt: int) -> None:
        try:
            self.back_off(attempt)
        except OverBudget as exc:
            raise _gave_up(url, exc) from None


def _gave_up(url: str, exc: OverBudget) -> NetworkError:
    return NetworkError(
        f"could not download {url}: {exc}",
        hint="check the network or the mirror, then retry (on a slow link, raise "
        "MUX_HTTP_DEADLINE or lower MUX_HTTP_MIN_SPEED)",
    )
