"""Where this user's servers live: the runtime dir, their sockets' names, a loopback server's secret.

The runtime dir is platformdirs' answer without importing platformdirs in the usual cases
(:mod:`updater.config.dirs`). A loopback port is shared by every user of the machine, so a
server on one answers only its owner: it writes a secret when it starts, in a file only its
owner can read (:func:`tcp_secret_path`, in the owner's runtime dir). The secret is read
without following a link, only from a regular file of this user's that nobody else may read,
and never shown (:func:`read_tcp_secret`).

On the fast path of ``mux update --check --max-age`` (:mod:`updater.servers.status`):
standard library only, ``pathlib`` only for the callers that want a ``Path``.
"""

from __future__ import annotations

import os

from updater.config.dirs import user_runtime_dir
from updater.errors import MuxError
from updater.files import NotReadable, read_small_file

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from pathlib import Path

SOCKET_SUFFIX = ".sock"
SOCKET_LOCK_SUFFIX = ".lock"  # <socket>.lock: held by the server for as long as it serves
DEFAULT_SOCKET_NAME = "default"
SECRET_SUFFIX = ".secret"  # <runtime dir>/tcp-<port>.secret: a loopback server's owner secret
MAX_SECRET_BYTES = 256


def runtime_dir() -> Path:
    """``<platformdirs user_runtime_dir>/mux``: where servers put their sockets.

    On Linux that is ``$XDG_RUNTIME_DIR/mux`` when the variable names a private directory,
    else the fallback platformdirs picks (``/run/user/<uid>/mux``, then a private
    ``runtime-<uid>`` in the temp dir). Clients and servers both call this, so they agree.
    Raises :class:`MuxError` when no usable directory exists.
    """
    # deferred: this module is on a fast path (docs/build.md)
    from pathlib import Path

    return Path(runtime_dir_str())


def runtime_dir_str() -> str:
    """:func:`runtime_dir` as a string, for the callers on the fast path (no pathlib)."""
    try:
        return user_runtime_dir()
    except (OSError, RuntimeError) as exc:
        raise MuxError(f"no usable runtime directory for mux servers: {exc}") from None


def default_socket_path(name: str = DEFAULT_SOCKET_NAME) -> Path:
    """``runtime_dir()/<name>.sock``."""
    return runtime_dir() / f"{name}{SOCKET_SUFFIX}"


def tcp_secret_path(port: int) -> str:
    """``<runtime dir>/tcp-<port>.secret``: the owner secret of this user's server on that
    loopback port (written by the server when it starts, removed when it stops). Raises
    :class:`MuxError` when there is no runtime dir."""
    return os.path.join(runtime_dir_str(), f"tcp-{port}{SECRET_SUFFIX}")


def _owned_and_private(info: os.stat_result) -> None:
    if info.st_uid != os.geteuid():
        raise NotReadable("it belongs to another user")
    if info.st_mode & 0o077:
        raise NotReadable("others may read it")


def read_tcp_secret(port: int) -> str | None:
    """The secret to send to this user's server on loopback ``port``; None when there is none
    this user can trust (no runtime dir, no file, a link, another user's or a readable file,
    not one line of text): the server then refuses the request."""
    try:
        raw = read_small_file(
            tcp_secret_path(port),
            MAX_SECRET_BYTES,
            inspect=_owned_and_private,
            follow_links=False,
        )
    except (MuxError, NotReadable):
        return None
    if raw is None:
        return None
    secret = raw.strip()
    if not secret or not secret.isalnum() or not secret.isascii():
        return None
    return secret.decode("ascii")
