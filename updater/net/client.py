"""HTTP for release sources and downloads: one client, one host policy, readable failures.

httpx is imported here and nowhere on the fast paths. Every request goes through
:class:`HttpClient`, which

* refuses plain ``http://`` except to loopback,
* follows redirects itself, checking each hop against the
  :class:`~updater.net.hosts.HostPolicy`,
* sends the GitHub token only to the hosts allowed to see it, and retries once without it
  after a 401 (stale tokens are a classic failure),
* retries connection failures and 5xx answers a bounded number of times with backoff,
* bounds what it reads: every body capped (error pages at 64 KiB), every small document within
  an overall deadline (``MUX_HTTP_DEADLINE``, tries included), every archive above a minimum
  average speed (``MUX_HTTP_MIN_SPEED`` over ``MUX_HTTP_SPEED_WINDOW``),
* turns every failure into one :class:`NetworkError` line naming the URL, the reason and the fix.

The rules it applies live beside it: :mod:`updater.net.hosts` (where a request may go),
:mod:`updater.net.refusals` (what a refusal means, rate limits kept across processes) and
:mod:`updater.net.budget` (the bounds on a whole answer, enforced inside the sockets).
"""

from __future__ import annotations

import hashlib
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, BinaryIO, NamedTuple, TypeVar
from urllib.parse import urljoin, urlsplit

import httpx

from updater.config.settings import HttpSettings, check_token
from updater.core.hints import error_words
from updater.errors import NetworkError, RateLimitError, UsageError, VerificationError
from updater.net.budget import (
    Budget,
    Budgets,
    Deadline,
    MinSpeed,
    OverBudget,
    budget_every_connection,
)
from updater.net.hosts import HostPolicy
from updater.net.refusals import ERROR_BODY_LIMIT, RateLimits, status_error
from updater.urls import shown_url

if TYPE_CHECKING:
    from updater.net.progress import Progress


USER_AGENT = "mux-updater"
MAX_REDIRECTS = 5
T = TypeVar("T")
_REDIRECT_STATUSES = (301, 302, 303, 307, 308)


def _proxy_for(url: str) -> str | None:
    """The proxy the environment gives for ``url`` (what httpx's trust_env uses), if any."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    if not proxy or bypass(parts.hostname or "", proxies):
        return None
    return proxy


def _describe_transport_error(url: str, exc: Exception) -> NetworkError:
    """One line for a failure below HTTP. ``url`` is shown without its query, and the
    exception's own text never when it may quote what mux sent (a header value)."""
    raw = _without_url(exc, url)
    text = error_words(raw)  # never Python's "[Errno 111]" or "(_ssl.c:1006)"
    url = shown_url(url)
    if isinstance(exc, httpx.LocalProtocolError):
        # h11's words quote the header it refused ("Illegal header value b'Bearer …'").
        return NetworkError(
            f"cannot send the request to {url}: one of its headers is not valid HTTP",
            hint="check MUX_GITHUB_TOKEN / GITHUB_TOKEN",
        )
    lowered = raw.lower()
    proxy = _proxy_for(url)
    if (
        isinstance(exc, httpx.ProxyError)
        or "proxy" in lowered
        or (proxy and isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)))
    ):
        return NetworkError(
            f"cannot reach {url} through the proxy {shown_url(proxy or '')}: {text}".replace(
                "  ", " "
            ),
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


class Fetched(NamedTuple):
    """A small document read whole; header names are lower case."""

    url: str
    status: int
    headers: dict[str, str]
    content: bytes


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
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.policy = policy or HostPolicy()
        self.rate_limits = rate_limits
        self.plain_loopback_only = plain_loopback_only
        # A token no header can carry is refused here too (the settings name the variable).
        self.token = check_token(token, "the GitHub token") if token else None
        settings = settings or HttpSettings()
        self.retries = settings.retries
        self._backoff = settings.backoff
        self._deadline = settings.deadline
        self._min_speed, self._speed_window = settings.min_speed, settings.speed_window
        self._budgets = Budgets()
        try:
            self._client = self._make_client(settings.timeout, plain_loopback_only, transport)
        except ValueError as exc:  # httpx's word on a proxy URL it cannot use
            raise UsageError(
                f"unusable proxy setting: {exc}",
                hint="check HTTPS_PROXY / HTTP_PROXY / ALL_PROXY",
            ) from None
        if transport is None:
            # The budgets live in the sockets; an injected transport (the tests' in-process
            # seam, as httpx.MockTransport) has none, and its rules are the client's alone.
            budget_every_connection(self._client, self._budgets)

    @staticmethod
    def _make_client(
        connect_timeout: float,
        plain_loopback_only: bool,
        transport: httpx.BaseTransport | None,
    ) -> httpx.Client:
        return httpx.Client(
            transport=transport,
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
    def _budget(self, make: Callable[[], Budget]) -> Iterator[None]:
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

    def _token_host(self, url: str) -> bool:
        """Whether the token could go to ``url`` (a refusal there may want one)."""
        return self.policy.may_see_token(url)

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
        with self._budget(lambda: Deadline(self._deadline)):
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
                            f"refusing {shown_url(current)}: this client speaks plain http only"
                        )
                    if self.rate_limits is not None:
                        waiting = self.rate_limits.blocked(
                            shown_url(current), self._credential(current, use_token)
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
                            raise NetworkError(
                                f"{shown_url(current)} redirected without a location"
                            )
                        redirected_from, current = current, urljoin(current, location)
                        continue
                    break
                else:
                    raise NetworkError(f"too many redirects starting at {shown_url(url)}")
            except NetworkError:
                raise
            except UnicodeEncodeError:
                raise UsageError(
                    "a request header holds characters HTTP cannot carry",
                    hint="check MUX_GITHUB_TOKEN / GITHUB_TOKEN",
                ) from None
            except httpx.LocalProtocolError as exc:  # what mux would send: never retried
                raise _describe_transport_error(current, exc) from None
            except (httpx.InvalidURL, ValueError) as exc:
                raise NetworkError(
                    f"invalid URL {shown_url(current)[:200]!r}: {_without_url(exc, current)}"
                ) from None
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
                error = status_error(
                    shown_url(current), response, body, token_host=self._token_host(current)
                )
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
                        raise NetworkError(
                            f"{shown_url(url)} is larger than {max_size} bytes; refusing it"
                        )
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

    def _speed_budget(self) -> Budget:
        if self._min_speed > 0:
            return MinSpeed(self._min_speed, self._speed_window)
        return Budget()

    def _download_into(
        self,
        url: str,
        out: BinaryIO,
        size: int | None,
        max_size: int,
        label: str,
        progress: Progress,
    ) -> tuple[int, str]:
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
                        f"download of {shown_url(url)} failed after {done} bytes: "
                        f"{error_words(str(exc)) or exc.__class__.__name__}",
                        hint="check the network, then retry",
                    ) from None
                failures += 1
                if failures > self.retries:
                    raise NetworkError(
                        f"download of {shown_url(url)} failed after {done} of {size} bytes: "
                        f"{exc.__class__.__name__}",
                        hint="check the network, then retry",
                    ) from None
                self._back_off_within(url, failures)
                continue
            if size is not None and done < size:
                failures += 1
                if failures > self.retries:
                    raise NetworkError(
                        f"download of {shown_url(url)} stopped at {done} of {size} bytes",
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


def _without_url(exc: Exception, url: str) -> str:
    """What an exception about ``url`` says, with the URL in it shown as messages show it."""
    return (str(exc) or exc.__class__.__name__).replace(url, shown_url(url))


def _gave_up(url: str, exc: OverBudget) -> NetworkError:
    return NetworkError(
        f"could not download {shown_url(url)}: {exc}",
        hint="check the network or the mirror, then retry (on a slow link, raise "
        "MUX_HTTP_DEADLINE or lower MUX_HTTP_MIN_SPEED)",
    )
