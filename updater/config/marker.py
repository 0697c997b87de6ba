"""The packager marker: a distribution's word that it, not ``mux update``, updates this mux.

A distribution that packages mux (Homebrew, Nix, a .deb) puts ``mux-packager.json`` at the
top of the build folder, next to the ``mux`` executable (docs/contracts.md, "Packager
marker")::

    {"schema": 1, "manager": "Homebrew", "update_command": "brew upgrade mux",
     "announce_delay_seconds": 86400}

When it is there it wins over the path heuristics of :mod:`updater.install.layout`: ``mux update``
refuses with that command, ``mux update --check`` reports a newer release with that command
(and only ``announce_delay_seconds`` after its release, so that the package can catch up, as
gh does for Homebrew), and a server's watch events carry it. ``mux-release packager-marker``
writes it (:func:`marker_document`). A marker that cannot be read is an error: mux does not
guess who manages an install whose packager said something it cannot understand.

Stdlib only: a packaged mux's cached check reads it.
"""

from __future__ import annotations

import json
import os

from updater._records import NamedTuple
from updater.config.buildfolder import running_build_folder
from updater.config.buildinfo import PACKAGER_MARKER
from updater.errors import MuxError, UsageError
from updater.files import NotReadable, read_small_file

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from typing import Any

MARKER_NAME = PACKAGER_MARKER
MARKER_SCHEMA = 1
MAX_MARKER_BYTES = 4096
MAX_ANNOUNCE_DELAY = 30 * 86400  # a month: a longer "delay" is a mistake, not a policy
_MAX_TEXT = {"manager": 80, "update_command": 300}


class PackagerMarker(NamedTuple):
    path: str
    manager: str  # who manages this install: "Homebrew", "Nix", "Debian"
    update_command: str  # what updates it: "brew upgrade mux"
    announce_delay: float = 0.0  # seconds after a release before --check announces it


def find_marker(folder: str | None = None) -> PackagerMarker | None:
    """The marker of the build in ``folder`` (default: the running one's), if it has one."""
    folder = folder if folder is not None else running_build_folder()
    if folder is None:
        return None
    path = os.path.join(folder, MARKER_NAME)
    try:
        raw = read_small_file(path, MAX_MARKER_BYTES)
    except NotReadable as exc:
        raise _invalid(path, str(exc)) from None
    if raw is None:
        return None
    return parse_marker(raw, path)


def parse_marker(raw: bytes, path: str) -> PackagerMarker:
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        raise _invalid(path, "it is not JSON") from None
    if not isinstance(doc, dict):
        raise _invalid(path, "it is not a JSON object")
    if doc.get("schema") != MARKER_SCHEMA:
        raise _invalid(path, f"its schema is not {MARKER_SCHEMA}")
    texts = {}
    for name, limit in _MAX_TEXT.items():
        value = doc.get(name)
        if not isinstance(value, str) or not value.strip() or len(value) > limit:
            raise _invalid(path, f"{name} is not a text of 1 to {limit} characters")
        if not value.isprintable():
            raise _invalid(path, f"{name} holds control characters")
        texts[name] = value.strip()
    delay = doc.get("announce_delay_seconds", 0)
    if (
        isinstance(delay, bool)
        or not isinstance(delay, int)
        or not 0 <= delay <= MAX_ANNOUNCE_DELAY
    ):
        raise _invalid(
            path, f"announce_delay_seconds is not a whole number from 0 to {MAX_ANNOUNCE_DELAY}"
        )
    return PackagerMarker(path, texts["manager"], texts["update_command"], float(delay))


def marker_document(manager: str, update_command: str, announce_delay: int = 0) -> dict[str, Any]:
    """The marker a packager writes (``mux-release packager-marker``); checked as it is read."""
    doc = {
        "schema": MARKER_SCHEMA,
        "manager": manager,
        "update_command": update_command,
        "announce_delay_seconds": announce_delay,
    }
    try:
        parse_marker(json.dumps(doc).encode(), "")  # the writer obeys the reader's rules
    except MuxError as exc:
        raise UsageError(exc.message.partition(" cannot be used: ")[2]) from None
    return doc


def _invalid(path: str, reason: str) -> MuxError:
    return MuxError(
        f"the packager marker {path} cannot be used: {reason}",
        hint="reinstall mux with the package manager that installed it, or report this to its packager",
    )
