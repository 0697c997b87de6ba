"""Which mux servers there are, and how each is named (its address).

An *address* is either the filesystem path of a server's Unix socket or a loopback
``http://127.0.0.1:PORT`` URL. ``unix:///path.sock`` URLs are accepted wherever an address is
read and normalised to the plain path. ``localhost`` means ``127.0.0.1`` here, as it does for
the server (:func:`connect_host`): a name that resolves to ``::1`` first would hand the secret
to whoever listens on that port of ``::1``.

On the fast path of ``mux update --check --max-age`` (:mod:`updater.servers.status`):
standard library only, ``urllib.parse`` only for an address given as a URL. The records are
NamedTuples (:mod:`updater._records`).
"""

from __future__ import annotations

import os

from updater._records import NamedTuple
from updater.errors import MuxError, UsageError
from updater.servers.runtime import SOCKET_SUFFIX, runtime_dir_str
from updater.urls import is_loopback_host

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

SERVER_URL_ENV = "MUX_SERVER_URL"


class UnixAddress(NamedTuple):
    """A server listening on a Unix socket."""

    socket_path: str  # a string: asking a server needs no pathlib

    @property
    def path(self) -> Path:
        # deferred: this module is on a fast path (docs/build.md)
        from pathlib import Path

        return Path(self.socket_path)

    @property
    def display(self) -> str:
        return self.socket_path


class TcpAddress(NamedTuple):
    """A server listening on a loopback TCP port (``MUX_SERVER_URL=http://127.0.0.1:PORT``)."""

    host: str
    port: int

    @property
    def display(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


ServerAddress = UnixAddress | TcpAddress


def parse_server_address(text: str) -> ServerAddress:
    """Read ``unix:///path.sock``, ``http://127.0.0.1:PORT`` or a plain socket path.

    Raises :class:`UsageError` for anything else: plain ``http://`` is allowed only to a
    loopback address, since the status line and the shutdown request carry no authentication.
    """
    if "://" not in text:
        if not text:
            raise UsageError("empty server address")
        return UnixAddress(text)
    from urllib.parse import unquote, urlsplit  # only URL addresses need these

    expected = "expected unix:///path/to.sock or http://127.0.0.1:PORT"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise UsageError(f"invalid server URL {text!r}: {exc}", hint=expected) from None
    if parts.scheme == "unix":
        path = unquote(parts.path)
        if parts.netloc or not path.startswith("/") or parts.query or parts.fragment:
            raise UsageError(f"invalid server URL {text!r}: needs an absolute path", hint=expected)
        return UnixAddress(path)
    if parts.scheme == "http":
        host = parts.hostname or ""
        if not is_loopback_host(host):
            raise UsageError(
                f"server URL {text!r} is not on this machine: http:// is only allowed to a loopback address",
                hint=expected,
            )
        if port is None:
            raise UsageError(f"server URL {text!r} has no port", hint=expected)
        if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
            raise UsageError(f"server URL {text!r} must name only host and port", hint=expected)
        return TcpAddress(host, port)
    raise UsageError(f"unsupported server URL {text!r}", hint=expected)


def connect_host(address: TcpAddress) -> str:
    """Where to connect for ``address``: ``localhost`` is ``127.0.0.1``, as for the server."""
    return "127.0.0.1" if address.host.lower() == "localhost" else address.host


def discover_server_addresses(environ: Mapping[str, str] = os.environ) -> list[str]:
    """:func:`server_addresses` for ``MUX_SERVER_URL`` as ``environ`` has it."""
    return server_addresses(environ.get(SERVER_URL_ENV))


def server_addresses(server_url: str | None) -> list[str]:
    """``server_url`` (``MUX_SERVER_URL``) names one server; otherwise every ``*.sock`` in
    the runtime dir, sorted.

    Raises :class:`UsageError` when ``server_url`` is malformed.
    """
    if server_url:
        if "://" not in server_url:
            raise UsageError(
                f"{SERVER_URL_ENV} must be a URL, got {server_url!r}",
                hint="use unix:///path/to.sock or http://127.0.0.1:PORT",
            )
        return [parse_server_address(server_url).display]
    directory = runtime_dir_str()
    try:
        names = sorted(entry.name for entry in os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise MuxError(f"cannot list {directory}: {exc.strerror}") from None
    return [os.path.join(directory, name) for name in names if name.endswith(SOCKET_SUFFIX)]


def every_server_address(server_url: str | None) -> list[str]:
    """Every server on this machine that mux knows of: each socket in the runtime dir, and
    the one ``server_url`` names. What retention asks, so that ``MUX_SERVER_URL`` (which
    picks the server other commands talk to) never hides a server whose build must stay.

    Retention does not rest on this list (a server elsewhere holds its version's lock,
    :mod:`updater.install.inuse`); it names the servers in what is kept and places builds that take
    no lock."""
    found = server_addresses(None)
    if server_url:
        named = server_addresses(server_url)[0]
        if named not in found:
            found.append(named)
    return found
