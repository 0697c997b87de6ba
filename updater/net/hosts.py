"""Where requests and redirects may go, and which hosts may see the token (one rule)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from updater.errors import NetworkError
from updater.urls import check_url_scheme, shown_url, url_authority, url_origin

if TYPE_CHECKING:
    pass


class HostPolicy(NamedTuple):
    """Where requests and redirects may go, and which origins may see the token.

    ``allowed_hosts`` holds origins (``scheme://host:port``, :func:`~updater.urls.url_origin`:
    a configured base such as a GitHub Enterprise server or a loopback test server, exactly)
    and hosts as a user or a policy names them (``MUX_GITHUB_DOWNLOAD_HOSTS``): ``host``
    admits that host on any port, ``host:port`` only that (effective) port. ``token_hosts``
    holds origins only: the token goes where scheme, host and effective port all match,
    never to another port of the same host.
    """

    allowed_hosts: frozenset[str] = frozenset()
    token_hosts: frozenset[str] = frozenset()
    advice: str = ""  # how a refused host can be allowed, if it can

    @staticmethod
    def _allows(url: str, entries: frozenset[str]) -> bool:
        origin = url_origin(url)
        if origin in entries:
            return True
        host_port = origin.partition("://")[2]
        return host_port in entries or host_port.rpartition(":")[0] in entries

    def check(self, url: str, *, redirected_from: str | None = None) -> None:
        check_url_scheme(url)
        if self.allowed_hosts and not self._allows(url, self.allowed_hosts):
            origin = f" (redirected from {shown_url(redirected_from)})" if redirected_from else ""
            advice = f"; {self.advice}" if self.advice else ""
            raise NetworkError(
                f"refusing to fetch {shown_url(url)}: {url_authority(url)} is not an allowed "
                f"release host{origin}",
                hint="allowed: " + ", ".join(sorted(self.allowed_hosts)) + advice,
            )

    def may_see_token(self, url: str) -> bool:
        return url_origin(url) in self.token_hosts
