"""The URL rules every network path follows: loopback, HTTPS-only, origins (stdlib only).

Plain ``http://`` is allowed only to loopback (tests, the release rehearsal, a local mirror);
everything else must be ``https://``. ``ipaddress`` and ``urllib.parse`` are imported on first
use: the cached check reaches :func:`is_loopback_host` through the server status client.
"""

from __future__ import annotations

from updater.errors import NetworkError

GITHUB_WEB = "https://github.com"  # github.com's web URL: the default source, and whose OIDC signs

LOOPBACK_NAMES = frozenset({"localhost"})


def is_loopback_host(host: str | None) -> bool:
    """``localhost`` or a loopback IP literal (``[::1]`` with or without brackets); no DNS."""
    if not host:
        return False
    if host.lower() in LOOPBACK_NAMES:
        return True
    # deferred: this module is on a fast path (docs/build.md)
    import ipaddress

    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_url_scheme(url: str) -> None:
    """HTTPS everywhere; plain HTTP only to loopback. Raises :class:`NetworkError`."""
    # deferred: this module is on a fast path (docs/build.md)
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme == "https":
        return
    if parts.scheme == "http" and is_loopback_host(parts.hostname):
        return
    raise NetworkError(
        f"refusing {url}: only https:// is allowed (plain http only on loopback)",
        hint="use an https:// URL for the mirror",
    )


def is_allowed_url(url: str) -> bool:
    """What :func:`check_url_scheme` accepts, as a yes/no (a malformed URL is a no)."""
    # deferred: this module is on a fast path (docs/build.md)
    from urllib.parse import urlsplit

    try:
        host = urlsplit(url).hostname
        check_url_scheme(url)
    except (ValueError, NetworkError):
        return False
    return bool(host)


def github_api_for(web_url: str | None) -> str:
    """The REST API of the GitHub whose web URL is ``web_url``, found as gh finds it:
    ``api.github.com`` for github.com, ``api.<host>`` for a GHE.com (data residency) host,
    else ``<web>/api/v3`` (GitHub Enterprise Server). Never github.com's API for another
    server: its token must not go there."""
    # deferred: this module is on a fast path (docs/build.md)
    from urllib.parse import urlsplit

    if not web_url:
        return "https://api.github.com"
    web = web_url.rstrip("/")
    parts = urlsplit(web)
    host = (parts.hostname or "").lower()
    if host == "github.com":
        return "https://api.github.com"
    if host.endswith(".ghe.com") and not parts.path:
        return f"{parts.scheme}://api.{parts.netloc}"
    return f"{web}/api/v3"


def url_origin(url: str) -> str:
    """``host`` or ``host:port`` (when the URL names a port), lower case."""
    # deferred: this module is on a fast path (docs/build.md)
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    return f"{host}:{parts.port}" if parts.port else host


# An exact host name or IP literal, optionally with a port: no scheme, path or wildcard.
_HOST_RE = (
    r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
    r"|\[[0-9a-f:.]+\]"
)


def parse_download_host(text: str) -> str | None:
    """An exact host (``host`` or ``host:port``, as :class:`updater.net.hosts.HostPolicy` matches
    them), lower case; None when ``text`` is not one (a URL, a path, a wildcard)."""
    # deferred: this module is on a fast path (docs/build.md)
    import re

    entry = text.strip().lower()
    host, colon, port = entry.rpartition(":") if not entry.endswith("]") else ("", "", "")
    if not colon:
        host, port = entry, ""
    elif not port.isdigit() or not 0 < int(port) < 65536:
        return None
    if len(host) > 253 or not re.fullmatch(_HOST_RE, host):
        return None
    return f"{host}:{int(port)}" if port else host
