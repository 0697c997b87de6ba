"""The strict reading both of mux's TOML files share: the machine policy and the user's config.

``/etc/mux/policy.toml`` (:mod:`updater.config.policy`) and ``<user config dir>/mux/config.toml``
(:mod:`updater.config.userconfig`) are read by the same rules, so a file is either used as
written or refused with one line naming it and what is wrong, never half-read or ignored:

* a regular file (a link is followed; a link to nothing, a FIFO or a folder is refused),
  at most :data:`MAX_BYTES`, read without blocking (:func:`updater.files.read_small_file`);
* owned by the allowed owners and writable by nobody else: the file and every folder on the
  way to it (and to a link's target); a sticky folder such as ``/tmp`` is fine;
* UTF-8 TOML (``tomllib``), top-level settings only, no setting mux does not know, every
  value of the right kind (control characters in what is shown are escaped).

The settings both files may make (:data:`SHARED_SETTINGS`: what a user opts into and an
administrator may fix for everyone) are validated here, once, by :func:`shared_values`.

Imported only when one of the files exists (with ``tomllib``): a machine without them pays
one ``lstat`` each.
"""

from __future__ import annotations

import json
import os
import stat
import tomllib
from collections.abc import Callable, Mapping
from typing import Any

from updater.errors import MuxError, printable
from updater.files import NotReadable, read_small_file

MAX_BYTES = 64 * 1024
AUTO_INSTALL = ("off", "download", "compatible", "all")
# What a user's config.toml may set, and what the machine policy may fix in its place:
# auto_install (background staging or automatic installs, off by default) and download_on_metered (whether a
# background install may download on a connection the system reports as metered).
SHARED_SETTINGS = ("auto_install", "download_on_metered")

Unusable = Callable[[str], MuxError]


def read_toml(
    path: str, *, owners: set[int], who: str, unusable: Unusable
) -> dict[str, Any] | None:
    """The TOML document at ``path``; None when there is no file there.

    ``owners``: the uids that may own the file and the folders leading to it (``who`` names
    them in messages). ``unusable(reason)`` is the error for this file."""
    try:
        raw = read_small_file(
            path,
            MAX_BYTES,
            inspect=lambda info: check_who_can_write(
                path, info, owners=owners, who=who, unusable=unusable
            ),
        )
    except NotReadable as exc:
        raise unusable(str(exc)) from None
    if raw is None:
        if os.path.lexists(path):  # a link to nothing is not "no file"
            raise unusable("it is a symbolic link to nothing")
        return None
    return parse_toml(raw, unusable)


def parse_toml(raw: bytes, unusable: Unusable) -> dict[str, Any]:
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise unusable("it is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise unusable(f"it is not valid TOML ({printable(str(exc))})") from None


def check_who_can_write(
    path: str, info: os.stat_result, *, owners: set[int], who: str, unusable: Unusable
) -> None:
    """Only ``owners`` may be able to change the file at ``path``: it (``info``, what was
    opened) and every folder on the way to it, and to its target through a link."""

    def judge(name: str, entry: os.stat_result, *, folder: bool) -> None:
        if entry.st_uid not in owners:
            raise unusable(f"{name} is owned by uid {entry.st_uid}, not by {who}")
        writable = entry.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if folder and entry.st_mode & stat.S_ISVTX:
            writable = 0  # a sticky folder (/tmp): others cannot replace what is in it
        if writable:
            kind = "other users" if entry.st_mode & stat.S_IWOTH else "its group"
            raise unusable(f"{name} is writable by {kind} (chmod go-w {name})")

    judge(path, info, folder=False)
    seen: set[str] = set()
    for start in (os.path.abspath(path), os.path.realpath(path)):
        folder = os.path.dirname(start)
        while folder not in seen:
            seen.add(folder)
            try:
                judge(folder, os.stat(folder), folder=True)
            except OSError as exc:
                raise unusable(f"{folder}: {exc.strerror}") from None
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent


def shown(value: object) -> str:
    """A value as a message shows it: JSON, escaped, cut at 80 characters."""
    return printable(json.dumps(value, default=str), 80)


def refuse_unknown(document: Mapping[str, Any], known: tuple[str, ...], unusable: Unusable) -> None:
    unknown = [name for name in document if name not in known]
    if unknown:
        raise unusable(
            f"{printable(unknown[0], 60)!r} is not a setting mux knows (known: {', '.join(known)})"
        )


def shared_values(document: Mapping[str, Any], unusable: Unusable) -> dict[str, Any]:
    """The :data:`SHARED_SETTINGS` that ``document`` makes, validated (the one parser of
    them, for the policy and the user's config alike)."""
    values: dict[str, Any] = {}
    if "auto_install" in document:
        value = document["auto_install"]
        if value not in AUTO_INSTALL:
            expected = " or ".join(f'"{mode}"' for mode in AUTO_INSTALL)
            raise unusable(f"auto_install = {shown(value)} is not {expected}")
        values["auto_install"] = value
    if "download_on_metered" in document:
        value = document["download_on_metered"]
        if not isinstance(value, bool):
            raise unusable(f"download_on_metered = {shown(value)} is not true or false")
        values["download_on_metered"] = value
    return values


def setting_text(name: str, value: object) -> str:
    """``name = <value>`` as a TOML file says it, for messages."""
    if isinstance(value, bool):
        return f"{name} = {'true' if value else 'false'}"
    if isinstance(value, tuple | list):
        return f"{name} = [{', '.join(json.dumps(v) for v in value)}]"
    return f"{name} = {json.dumps(value)}"
