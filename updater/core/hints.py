"""Words for what went wrong, and hints that fit it (pure; stdlib only).

A message mux prints is read by a person who never saw Python: ``[Errno 111] Connection
refused`` and ``[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)`` are what
the socket and ssl modules say, not what happened (:func:`error_words`). A hint names only
what applies: the versions a source lists when it does not list the one asked for
(:func:`listed_versions`), the source the user probably meant (:func:`did_you_mean`).
"""

from __future__ import annotations

import re

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from collections.abc import Iterable

# The source names a user types besides a URL or a folder.
SOURCE_NAMES = ("github",)
# How many versions a "does not list" hint names (newest first) before "and N more".
LISTED_IN_HINT = 8

_ERRNO = re.compile(r"\[Errno -?\d+\]\s*")
_SSL_CODE = re.compile(r"\[SSL(?:: ?[A-Z0-9_]+)?\]\s*")
_SSL_WHERE = re.compile(r"\s*\(_ssl\.c:\d+\)")
# What the socket layer's words mean to a person who asked for a URL.
_OS_WORDS = {
    "connection refused": "nothing listens on that port (connection refused)",
    "connection reset by peer": "the server closed the connection",
    "network is unreachable": "no network route to it",
    "no route to host": "no network route to it",
    "name or service not known": "the name does not resolve",
    "temporary failure in name resolution": "the name does not resolve (DNS did not answer)",
}
# What ssl's reason codes mean.
_SSL_WORDS = {
    "WRONG_VERSION_NUMBER": "it does not speak TLS on that port (plain http?)",
    "CERTIFICATE_VERIFY_FAILED": "its certificate did not verify",
    "TLSV1_ALERT_PROTOCOL_VERSION": "it offers no TLS version this mux accepts",
    "SSLV3_ALERT_HANDSHAKE_FAILURE": "the TLS handshake failed",
    "UNEXPECTED_EOF_WHILE_READING": "it closed the connection during the TLS handshake",
}


def error_words(text: str) -> str:
    """``text`` (an exception's words) without Python's wrapping: no ``[Errno N]``, no
    ``[SSL: CODE]`` or ``(_ssl.c:N)``; a known errno or TLS reason said in words (a
    certificate's own reason kept: "its certificate did not verify: self-signed
    certificate")."""
    ssl_code = re.search(r"\[SSL: ?([A-Z0-9_]+)\]", text)
    plain = _SSL_WHERE.sub("", _SSL_CODE.sub("", _ERRNO.sub("", text))).strip()
    if ssl_code is not None and ssl_code.group(1) in _SSL_WORDS:
        said = _SSL_WORDS[ssl_code.group(1)]
        _, colon, detail = plain.partition(": ")
        return f"{said}: {detail}" if colon and detail else said
    return _OS_WORDS.get(plain.lower(), plain) or text


def did_you_mean(typed: str, names: Iterable[str] = SOURCE_NAMES) -> str | None:
    """The name ``typed`` is a typo of (a letter missing, added or wrong, or two letters
    swapped: "gihtub", "githb"), or None; "gitlab" is no typo of "github".
    A path or URL (it has ``/``, ``.`` or ``:``) is never a typo of a name."""
    word = typed.strip().lower()
    if not word or any(c in word for c in "/.:") or word in names:
        return None
    close = [name for name in names if _distance(word, name) <= 1]
    return close[0] if close else None


def _distance(a: str, b: str) -> int:
    """Edit distance with adjacent swaps (optimal string alignment)."""
    rows = [list(range(len(b) + 1))]
    for i, ca in enumerate(a, 1):
        row = [i]
        for j, cb in enumerate(b, 1):
            cost = min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cost = min(cost, rows[-2][j - 2] + 1)
            row.append(cost)
        rows.append(row)
    return rows[-1][-1]


def listed_versions(versions: Iterable[str], *, limit: int = LISTED_IN_HINT) -> str:
    """A hint naming what a source lists, ``versions`` newest first (as the caller sorted
    them): "it lists 1.2.0, 1.1.0 and 3 more; run without --version for the newest"."""
    shown = list(versions)
    if not shown:
        return "it lists no release"
    named = ", ".join(shown[:limit])
    more = f" and {len(shown) - limit} more" if len(shown) > limit else ""
    return f"it lists {named}{more}; run without --version for the newest"


def not_found_hint(source_kind: str, *, asked_version: bool, index: bool = False) -> str:
    """What to check when a source answers 404: the repository (``MUX_REPO``) only for
    GitHub, the feed's address only for a feed, ``--version`` only when one was asked for."""
    if index:
        return "no release list there: check the feed's address (--source / MUX_UPDATE_SOURCE)"
    if source_kind == "github":
        where = "check the repository (MUX_REPO)"
    else:
        where = "check the feed (--source / MUX_UPDATE_SOURCE): it may be incomplete"
    return f"{where}; and --version: is it a release there?" if asked_version else where
