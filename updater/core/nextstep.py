"""The commands mux prints as next steps, with the options that made the user's own work.

A check run as ``mux update --check --source FEED --trust-key K`` that said "install it
with: mux update" sent the user to GitHub with a key missing. Every ``mux update`` line mux
prints (install it, go back on purpose, move off a withdrawn release) is built here from the
options the user's command needed that a bare ``mux update`` would not find again
(:attr:`updater.config.settings.Settings.carried`: flags, not the environment or the
install's remembered source, which the next command reads again). Pure; stdlib only (the
cached check prints them): no ``shlex``, whose quoting :func:`quote` does for these words.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from collections.abc import Sequence

_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789@%+=:,./_-")
# What --rollback and --prune take of the carried options (they read no source).
_INSTALL_ONLY = ("--home",)


def quote(word: str) -> str:
    """``word`` as a POSIX shell reads it back (``shlex.quote``'s rule)."""
    if word and all(c in _SAFE for c in word):
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


def mux_update(*args: str, carried: Sequence[str] = ()) -> str:
    """``mux update ARGS`` with the ``carried`` options, quoted for a shell."""
    return " ".join(quote(word) for word in ("mux", "update", *args, *carried))


def for_install_only(carried: Sequence[str]) -> tuple[str, ...]:
    """The carried options a command on the install alone takes (``--rollback``): ``--home``."""
    kept: list[str] = []
    for position, word in enumerate(carried):
        if word in _INSTALL_ONLY and position + 1 < len(carried):
            kept += [word, carried[position + 1]]
    return tuple(kept)
