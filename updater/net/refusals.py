"""What a server's refusal means: rate limits, the server's own message, one line per status.

GitHub answers a spent hourly budget or a burst with 403 or 429 and headers saying when to
come back (:func:`rate_limit_of`); :class:`RateLimits` keeps that time in the user's cache so
that no mux process on the machine asks sooner. Every other refusal becomes one
:class:`~updater.errors.NetworkError` line with the server's ``message``, escaped and bounded
(:func:`status_error`).
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from updater.errors import NetworkError, RateLimitError, printable
from updater.files import (
    STATE_FILE_LIMIT,
    NotReadable,
    atomic_write,
    owned_by_this_user,
    read_small_file,
)
from updater.urls import url_origin

if TYPE_CHECKING:
    pass


# A number in a header: ASCII digits only (str.isdigit() also takes "²", which float() and
# int() refuse) and short enough for int() (which refuses more than 4300 digits).
_HEADER_NUMBER = re.compile(r"[0-9]{1,20}")


# -- what GitHub (or any server) said --------------------------------------------------------

ERROR_BODY_LIMIT = 64 * 1024  # of an error page, read at most this much, then the connection closes
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

    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def github_message(body: bytes, limit: int = 300) -> str:
    """The ``message`` of a JSON error body (GitHub's word on what went wrong), with the
    first detail of a 422's ``errors``; escaped and bounded. Empty when there is none."""

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

        try:  # (no FIFO, device or other user's file: read_small_file; anything else is empty)
            raw = read_small_file(str(self.path), STATE_FILE_LIMIT, inspect=owned_by_this_user)
            doc = json.loads(raw) if raw is not None else {}
        except (NotReadable, ValueError, RecursionError):
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
            atomic_write(
                self.path, json.dumps({"schema": 1, "limits": limits}).encode(), private=True
            )
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


def status_error(
    url: str, response: httpx.Response, body: bytes = b"", *, token_host: bool = True
) -> NetworkError:
    """One line for an error answer (``body``: as much of it as was read): a rate limit with
    when to retry, else the status with the server's own message (escaped). ``url`` as it
    may be shown (:func:`updater.urls.shown_url`); ``token_host``: whether the token could
    go there at all (a storage host's refusal never "needs a token")."""
    retry_at = rate_limit_of(response, body)
    if retry_at is not None:
        return _rate_limit_error(url, response, body, retry_at)
    status = response.status_code
    said = github_message(body)
    with_token = "Authorization" in response.request.headers
    if status == 404:
        detail = f": {said}" if said and said.lower() != "not found" else ""
        # What to check depends on the source and the request: the source adds its hint
        # (updater.core.hints.not_found_hint).
        return NetworkError(f"{url} was not found (HTTP 404{detail})", status=status)
    if status in (401, 403):
        detail = f": {said}" if said else ""
        return NetworkError(
            f"{url} refused access (HTTP {status}{detail})",
            hint=(
                "check MUX_GITHUB_TOKEN / GITHUB_TOKEN (its scopes, and SSO authorization)"
                if with_token
                else "it needs a token: set MUX_GITHUB_TOKEN (or GITHUB_TOKEN)"
                if token_host
                else "a download host that never sees the token refused it (a pre-signed "
                "link expires within minutes): retry"
            ),
            status=status,
        )
    detail = f": {said}" if said else ""
    return NetworkError(f"{url} answered HTTP {status}{detail}", status=status)
