"""The user's own settings: ``<user config dir>/mux/config.toml`` (``~/.config/mux/config.toml``).

It holds the settings a machine policy may also fix (:data:`updater.config.strict.SHARED_SETTINGS`)::

    auto_install = "compatible"     # "off" (default) | "download" | "compatible" | "all"
    download_on_metered = false     # true: a background download may use a metered connection

and is read by the policy's rules (:mod:`updater.config.strict`): a regular file, UTF-8 TOML,
no unknown setting, every value of the right kind, owned by the user (or root) and writable
by nobody else. A file that breaks one of them is one error (exit 1) naming the file and
what is wrong, for every command that reads it: mux never guesses what a user meant.

Imported only when the file exists (:func:`updater.config.settings.load`).
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from updater.config.strict import SHARED_SETTINGS, read_toml, refuse_unknown, shared_values
from updater.errors import ConfigError

KNOWN_SETTINGS = SHARED_SETTINGS


class UserConfig(NamedTuple):
    """A config file, validated. ``None`` for a setting the file does not make."""

    path: str
    auto_install: str | None = None
    download_on_metered: bool | None = None


def read_user_config(path: str) -> UserConfig | None:
    """The config at ``path``; None when there is no file there. Raises :class:`ConfigError`
    for a file that cannot be used."""

    def unusable(reason: str) -> ConfigError:
        return ConfigError(
            f"the config file {path} cannot be used: {reason}",
            hint="fix it or remove it (README: Keeping mux up to date)",
        )

    document = read_toml(path, owners={0, os.geteuid()}, who="root or you", unusable=unusable)
    if document is None:
        return None
    refuse_unknown(document, KNOWN_SETTINGS, unusable)
    values: dict[str, Any] = shared_values(document, unusable)
    return UserConfig(path=path, **values)
