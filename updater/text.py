"""Text from outside, made safe for a terminal: the one escaping function (stdlib only).

Much of what mux shows came from a network, a server or a file (versions, tags, URLs, server
fields, error messages that quote them); every line a person reads goes through
:func:`safe_text`, so no control character (an ``ESC`` that rewrites the line or sets the
clipboard) reaches the terminal raw. install.sh writes escapes the same way.
"""

from __future__ import annotations


def safe_text(text: object) -> str:
    """``text`` safe for a terminal: every character that does not print (C0 controls such as
    ESC and BEL, DEL, C1, and invisible format characters such as bidi overrides) written as
    ``\\xNN`` or ``\\uNNNN`` (a line break or tab inside a value as ``\\n``, ``\\t``), as
    install.sh writes them. The one escaping function: every line mux shows a person goes
    through it."""
    shown = str(text)
    if shown.isprintable():
        return shown
    return "".join(c if c.isprintable() else _escaped(c) for c in shown)


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(char: str) -> str:
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
