"""``mux version``: what this mux was built as (stdlib only: the fastest path there is)."""

from __future__ import annotations

from updater.cli.render import to_json_line, version_document, version_text
from updater.config import buildinfo


def print_version(*, as_json: bool) -> int:
    info = buildinfo.current()
    print(to_json_line(version_document(info)) if as_json else version_text(info))
    return 0
