"""How the attestation layer words what it was given, for one line of a failure or a report.

Statement and certificate fields are whatever the signer wrote, and anyone can sign with
Sigstore: every such value is escaped (:func:`updater.text.safe_text`) and capped before it
reaches a message (:func:`shown`); an exception from a parser becomes one line
(:func:`one_line`).
"""

from __future__ import annotations

from updater.text import safe_text

MAX_DETAIL = 300


def one_line(exc: BaseException) -> str:
    return shown(" ".join(str(exc).split()) or type(exc).__name__)


def shown(value: object) -> str:
    """``value`` safe for one terminal line: control characters escaped, length capped.

    Statement fields are whatever the signer wrote, and anyone can sign with Sigstore.
    """

    text = safe_text(value)
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


def strip_prefix(message: str) -> str:
    return message.removeprefix("attestation: ")
