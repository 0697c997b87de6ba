"""What the signed comments of mux's minisign signatures say: one parser for every reader.

minisign authenticates a signature's *trusted comment* with its global signature
(:mod:`updater.formats.minisign`); the facts mux decides on are written there, in minisign's own
tab-separated form (docs/contracts.md):

* ``releases.json.minisig`` (a feed's index):
  ``timestamp:<unix>\\tfile:releases.json\\thashed\\tseq:<n>\\texpires:<unix>``
  (:class:`IndexComment`): ``seq`` grows with every signature, ``expires`` bounds how long a
  mirror may serve it;
* ``SHA256SUMS.minisig`` (a release):
  ``timestamp:<unix>\\tfile:SHA256SUMS\\thashed\\tversion:<version>`` (:class:`ReleaseComment`):
  which release it is, and when it was signed.

Tokens are ``key:value`` (split at the first colon) or a bare word such as ``hashed``;
unknown keys are ignored; a key given twice, or an empty token, is refused (two readers that
kept the first and the last would disagree about what was signed). Numbers are decimal, of
any machine size but at most :data:`MAX_DECIMAL_DIGITS` digits: a longer one is no number
(Python cannot read one of more than 4300 digits without lifting a global limit, and a
stolen key could sign one to crash every later reader). ``mux``, ``mux-release feed`` and
install.sh (in awk) read them by these rules. Stdlib only; the records are NamedTuples (cheaper to
define than frozen dataclasses, on the check's path).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from updater.errors import ParseError
from updater.formats.models import FEED_INDEX_NAME

FEED_SIGNATURE_NAME = f"{FEED_INDEX_NAME}.minisig"

# Far beyond any time or counter (2**64 has 20 digits), far below Python's int/str limit.
MAX_DECIMAL_DIGITS = 1000
_DECIMAL = re.compile(f"[0-9]{{1,{MAX_DECIMAL_DIGITS}}}")


def parse_trusted_comment(text: str) -> dict[str, str]:
    """minisign's tab-separated trusted comment as ``{key: value}`` (a bare word: ``""``)."""
    fields: dict[str, str] = {}
    for token in text.split("\t"):
        key, _, value = token.partition(":")
        if not key:
            raise ParseError(f"the trusted comment has an empty field in {text[:200]!r}")
        if key in fields:
            raise ParseError(f"the trusted comment names {key[:40]!r} twice")
        fields[key] = value
    return fields


def decimal(value: str | None) -> int | None:
    """``value`` as a number when it is a decimal integer of at most
    :data:`MAX_DECIMAL_DIGITS` digits (ASCII only), else None."""
    return int(value) if value is not None and _DECIMAL.fullmatch(value) else None


class IndexComment(NamedTuple):
    """The signed facts about a feed index (``releases.json.minisig``)."""

    timestamp: int
    seq: int
    expires: int

    @classmethod
    def parse(cls, text: str) -> IndexComment:
        """The trusted comment of ``releases.json.minisig``; raises :class:`ParseError`."""
        fields = parse_trusted_comment(text)
        if fields.get("file") != FEED_INDEX_NAME:
            raise ParseError(f"the trusted comment is not for {FEED_INDEX_NAME} ({text[:200]!r})")
        numbers: dict[str, int] = {}
        for key in ("timestamp", "seq", "expires"):
            number = decimal(fields.get(key))
            if number is None:
                raise ParseError(
                    f"the trusted comment of {FEED_SIGNATURE_NAME} has no decimal {key}"
                )
            numbers[key] = number
        return cls(numbers["timestamp"], numbers["seq"], numbers["expires"])

    def format(self) -> str:
        return (
            f"timestamp:{self.timestamp}\tfile:{FEED_INDEX_NAME}\thashed"
            f"\tseq:{self.seq}\texpires:{self.expires}"
        )


class ReleaseComment(NamedTuple):
    """What a release's ``SHA256SUMS.minisig`` says about it: its version and signed time
    (None where the comment does not say; the verifier refuses that)."""

    version: str | None
    timestamp: int | None

    @classmethod
    def parse(cls, text: str) -> ReleaseComment:
        """Raises :class:`ParseError` for a comment two readers could read differently."""
        fields = parse_trusted_comment(text)
        version = fields.get("version") or None
        return cls(version=version, timestamp=decimal(fields.get("timestamp")))
