"""HTTP for release sources and downloads: one client, one host policy, readable failures.

httpx is imported here and nowhere on the fast paths. Every request goes through
:class:`HttpClient`, which

* refuses plain ``http://`` except to loopback,
* follows redirects itself, checking each hop against the :class:`HostPolicy`,
* sends the GitHub token only to the hosts allowed to see it, and retries once without it
  after a 401 (stale tokens are a classic failure),
* retries connection failures and 5xx answers a bounded number of times with backoff,
* turns every failure into one :class:`NetworkError` line naming the URL, the reason and the fix.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, BinaryIO
from urllib.parse import urljoin, urlsplit

import httpx

from .errors import NetworkError, RateLimitError
from .settings import HttpSettings
from .urls import check_url_scheme, url_origin

if TYPE_CHECKING:
    from .download import Progress

USER_AGENT = "mux-updater"
MAX_REDIRECTS = 5
_REDIRECT_STATUSES = (301, 302, 303, 307, 308)


@dataclass(frozen=True)
class HostPolicy:
    """Where requests and redirects may go, and which hosts may see the token.

    An entry ``host`` admits that host on any port; ``host:port`` admits only that port
    (configured bases such as a GitHub Enterprise server or a loopback test server).
    """

    allowed_hosts: frozenset[str] = field(default_factory=frozenset)
    token_hosts: frozenset[str] = field(default_factory=frozenset)
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


def _rate_limit_error(url: str, response: httpx.Response) -> RateLimitError:
    reset = response.headers.get("x-ratelimit-reset")
    retry_after = response.headers.get("retry-after")
    when = "later"
    if reset and reset.isdigit():
        at = datetime.fromtimestamp(int(reset), tz=UTC)
        minutes = max(0, round((at - datetime.now(tz=UTC)).total_seconds() / 60))
        when = f"at {at:%H:%M} UTC (in {minutes} min)"
    elif retry_after and retry_after.isdigit():
        when = f"in {retry_after} s"
    return RateLimitError(
        f"GitHub rate limit reached for {url}; it resets {when}",
        hint="set MUX_GITHUB_TOKEN (or GITHUB_TOKEN) to a token to raise the limit",
        status=response.status_code,
    )


def _is_rate_limited(response: httpx.Response) -> bool:
    if response.status_code == 429:
        return True
    return response.status_code == 403 and (
        response.headers.get("x-ratelimit-remaining") == "0"
        or "rate limit" in response.text[:500].lower()
    )


def status_error(url: str, response: httpx.Response) -> NetworkError:
    if _is_rate_limited(response):
        return _rate_limit_error(url, response)
    status = response.status_code
    if status == 404:
        return NetworkError(
            f"{url} was not found (HTTP 404)",
            hint="check the repository (MUX_REPO), the source (--source) and --version",
            status=status,
        )
    if status in (401, 403):
        return NetworkError(
            f"{url} refused access (HTTP {status})",
            hint="check MUX_GITHUB_TOKEN / GITHUB_TOKEN",
            status=status,
        )
    return NetworkError(f"{url} answered HTTP {status}", status=status)


@dataclass(frozen=True)
class Fetched:
    """A small document read whole; header names are lower case."""

    url: str
    status: int
    headers: dict[str, str]
    content: bytes


class HttpClient:
    """A small wrapper over :class:`httpx.Client` enforcing the host and token policy."""

    def __init__(
        self,
        *,
        policy: HostPolicy | None = None,
        token: str | None = None,
        settings: HttpSettings | None = None,
        plain_loopback_only: bool = False,
    ) -> None:
        self.policy = policy or HostPolicy()
        self.plain_loopback_only = plain_loopback_only
        self.token = token or None
        settings = settings or HttpSettings()
        self.retries = settings.retries
        self._backoff = settings.backoff
        try:
            self._client = self._make_client(settings.timeout, plain_loopback_only)
        except ValueError as exc:  # httpx's word on a proxy URL it cannot use
            from .errors import UsageError

            raise UsageError(
                f"unusable proxy setting: {exc}",
                hint="check HTTPS_PROXY / HTTP_PROXY / ALL_PROXY",
            ) from None

    @staticmethod
    def _make_client(connect_timeout: float, plain_loopback_only: bool) -> httpx.Client:
        return httpx.Client(
            follow_redirects=False,
            trust_env=True,
            # A client whose policy admits only plain-http loopback origins never speaks TLS:
            # skip loading the CA bundle (tens of milliseconds) for such a client.
            verify=not plain_loopback_only,
            timeout=httpx.Timeout(connect_timeout, read=connect_timeout),
            headers={"User-Agent": USER_AGENT},
        )

    def close(self) -> None:
        self._client.close()

    def back_off(self, attempt: int) -> None:
        """Wait before retry number ``attempt`` (exponential backoff)."""
        time.sleep(self._backoff * 2 ** (attempt - 1))

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

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
        become :class:`NetworkError`; 3xx is returned only when ``follow_redirects`` is off.
        """
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
                from .errors import UsageError

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
                    response.read()
                finally:
                    response.close()
                raise status_error(current, response)
            try:
                yield response
            finally:
                response.close()
            return

    def get(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        follow_redirects: bool = True,
        max_size: int = 16 * 1024 * 1024,
    ) -> Fetched:
        """GET a small document fully into memory, capped at ``max_size`` bytes."""
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
        it never grows past ``max_size`` (:class:`VerificationError`).
        """
        from .errors import VerificationError

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
                self.back_off(failures)
                continue
            if size is not None and done < size:
                failures += 1
                if failures > self.retries:
                    raise NetworkError(
                        f"download of {url} stopped at {done} of {size} bytes",
                        hint="retry; if it persists the release file is truncated on the server",
                    )
                self.back_off(failures)
                continue
            return done, digest.hexdigest()
