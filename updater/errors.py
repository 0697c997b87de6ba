"""Errors and exit codes shared by every command.

Every failure mux reports is a :class:`MuxError`: one readable line (``message``), an optional
``hint`` saying what to do, and the documented exit code of its kind. ``error_kind`` names the
kind for programs (``--json``'s ``error.kind``), ``layer`` the verification layer that refused
(``error.layer``; None for anything but a verification failure).
"""

from __future__ import annotations

from updater.text import safe_text

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_VERIFICATION = 3
EXIT_POLICY = 4  # the machine policy (an administrator's /etc/mux/policy.toml) refuses it
# `mux server restart`: the new build did not come up healthy, and the server runs the build
# it ran before again, on the same socket (the restart fell back)
EXIT_RESTART_FELL_BACK = 5
# `mux server start|stop|restart`: the address is held by something that is not this user's
# server (another user's socket, or a listener that cannot prove it is yours); nothing was
# stopped, started or recorded for it
EXIT_NOT_YOURS = 6
EXIT_UPDATE_AVAILABLE = 10  # also: the installed release is below a minimum_version
EXIT_WITHDRAWN = 11  # the installed release was withdrawn by its publisher: mux update moves it
EXIT_RESTART_NEEDED = 20


class MuxError(Exception):
    """A failure with a one-line explanation for the user."""

    exit_code = EXIT_ERROR
    error_kind = "error"
    layer: str | None = None

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(MuxError):
    exit_code = EXIT_USAGE
    error_kind = "usage"


class ParseError(MuxError):
    """A document from a release, a feed, a cache or a server is malformed."""

    error_kind = "parse"


class NetworkError(MuxError):
    """A request failed: offline, DNS, TLS, proxy, HTTP status, timeout."""

    error_kind = "network"

    def __init__(self, message: str, *, hint: str | None = None, status: int | None = None):
        super().__init__(message, hint=hint)
        self.status = status  # the HTTP status, when the server answered one


class RateLimitError(NetworkError):
    """The server asked not to be asked again before ``retry_at`` (a Unix time)."""

    error_kind = "rate-limit"

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        status: int | None = None,
        retry_at: float | None = None,
        kind: str = "secondary",
    ):
        super().__init__(message, hint=hint, status=status)
        self.retry_at = retry_at
        self.kind = kind  # "primary" (the hourly budget) or "secondary" (too many at once)


class VerificationError(MuxError):
    """A release failed one of the verification layers; nothing was installed.

    A layer's refusal starts ``verification failed (<layer>): ``
    (:func:`updater.trust.layers.layer_failure`): its layer is read from there (None for the
    others: a feed index that expired or went back)."""

    exit_code = EXIT_VERIFICATION
    error_kind = "verification"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        prefix = "verification failed ("
        if message.startswith(prefix):
            layer, found, _ = message[len(prefix) :].partition("): ")
            self.layer = layer if found and layer else None


class PolicyError(MuxError):
    """The machine policy refuses this, or cannot be read (then it fails closed)."""

    exit_code = EXIT_POLICY
    error_kind = "policy"


class ConfigError(MuxError):
    """The user's config file (``<user config dir>/mux/config.toml``) cannot be used."""

    error_kind = "config"


class WithdrawnError(MuxError):
    """The installed release was withdrawn and nothing this machine may install replaces it."""

    exit_code = EXIT_WITHDRAWN
    error_kind = "withdrawn"


class NotYoursError(MuxError):
    """A server address held by something that is not this user's server."""

    exit_code = EXIT_NOT_YOURS
    error_kind = "not-yours"


class InstallError(MuxError):
    """The installed layout cannot be changed (permissions, locks, foreign installs, disk)."""

    error_kind = "install"


def printable(text: str, limit: int = 2000) -> str:
    """``text`` as one safe line, cut at ``limit``: escaped by :func:`updater.text.safe_text`
    (the one escaping function: C0, DEL, C1, line breaks and invisible format characters),
    so nothing from outside reaches a terminal raw."""
    shown = safe_text(text)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"
