"""What a development checkout is: its version, protocol and target, read from the checkout.

A release build reads all of this from its baked build info (:mod:`updater.config.buildinfo`);
a checkout has none, so its version is ``updater.__version__`` (the single source hatchling
writes into the package metadata), its protocol :mod:`updater.protocol`'s, and its target the
machine it runs on.
"""

from __future__ import annotations

from updater import __version__
from updater.config.targets import detect_target_or_empty
from updater.protocol import PROTOCOL_VERSION


def development_facts() -> tuple[str, int, str]:
    """A checkout's version, protocol and target."""
    return __version__, PROTOCOL_VERSION, detect_target_or_empty()
