"""Where requests and redirects may go, and which hosts may see the token (one rule)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlsplit

from updater.errors import NetworkError
from updater.urls import check_url_scheme, url_origin

if TYPE_CHECKING:
    pass


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
