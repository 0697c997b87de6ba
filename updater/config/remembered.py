"""The source an install was made from, as its record (``MUX_HOME/install.json``) remembers it.

install.sh records where it installed from (``"source"``: the feed URL, or the GitHub
repository's address), and so does ``mux update`` (``"github"`` or the feed). That source is
the default of every later command and of a server's background check, below the
environment, the flags and the machine policy (:func:`updater.config.settings.load`): an
install made from a mirror keeps updating from it with a bare ``mux update``.

Stdlib only, on the cached check's path: one small read of the record.
"""

from __future__ import annotations

import json
import os

from updater.files import STATE_FILE_LIMIT, NotReadable, read_small_file

RECORD_NAME = "install.json"
GITHUB_WEB = "https://github.com"


def install_home_of(module_file: str) -> str | None:
    """The ``MUX_HOME`` whose ``versions/<version>/`` holds ``module_file``, if it has a record
    (a build unpacked anywhere else belongs to no install)."""
    here = os.path.realpath(module_file)
    parent = os.path.dirname(here)
    while parent != here:
        if os.path.basename(parent) == "versions":
            home = os.path.dirname(parent)
            if os.path.exists(os.path.join(home, RECORD_NAME)):
                return home
        here, parent = parent, os.path.dirname(parent)
    return None


def recorded_source(home: str) -> str | None:
    """The ``"source"`` of ``home``'s record, as written; None when there is no readable one."""
    try:
        raw = read_small_file(os.path.join(home, RECORD_NAME), STATE_FILE_LIMIT)
        doc = json.loads(raw) if raw is not None else None
    except (NotReadable, ValueError, RecursionError):
        return None
    source = doc.get("source") if isinstance(doc, dict) else None
    return source if isinstance(source, str) and source.strip() else None


def source_to_use(recorded: str, *, github_web: str | None, repo: str) -> str | None:
    """What a recorded source means to ``--source`` (pure): ``"github"`` for GitHub, which
    install.sh records as the repository's address (``<github web>/<owner>/<name>``), a feed
    URL or folder as itself; None for what is neither (the record is not trusted for more
    than where to look: every release still verifies against the trusted keys)."""
    value = recorded.strip().rstrip("/")
    web = (github_web or GITHUB_WEB).rstrip("/")
    if value == "github" or (repo and value == f"{web}/{repo}"):
        return "github"
    if value.startswith(("https://", "http://")) or value.startswith("/"):
        return value
    return None
