"""What a feed folder holds, read by both of its signed lists (the index,
:mod:`release.publish.feed`, and the TUF repository, :mod:`release.publish.tuf_repo`): its
``v<version>/`` release folders and the time each release's manifest gives.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from updater.errors import ParseError
from updater.formats.models import MANIFEST_NAME, parse_manifest, parse_tag


def release_folders(feed_dir: Path) -> list[Path]:
    """The ``v<version>/`` folders of a feed that hold a manifest: the releases its index
    lists, in name order."""
    found = []
    for folder in sorted(Path(feed_dir).iterdir()):
        if not (folder.is_dir() and (folder / MANIFEST_NAME).is_file()):
            continue
        try:
            parse_tag(folder.name)
        except ParseError:
            continue
        found.append(folder)
    return found


def manifest_released_at(release_dir: Path) -> int | None:
    """A release folder's manifest's ``released_at`` as a Unix time (None when it has none):
    what every lifecycle record starts from (the cooldown counts from it)."""
    try:
        text = parse_manifest((release_dir / MANIFEST_NAME).read_bytes()).released_at
    except (OSError, ParseError):
        return None
    if not text:
        return None
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())
