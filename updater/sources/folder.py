"""One release folder as a source, for ``mux-release verify`` (a release about to ship)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from updater.errors import (
    UsageError,
)
from updater.formats import models
from updater.sources.base import (
    SMALL_FILE_LIMIT,
    ReleaseSource,
    TagRule,
    read_local,
)

if TYPE_CHECKING:
    pass


class ReleaseFolderSource(ReleaseSource):
    """The files of one release in a folder, as ``mux-release package`` writes them.

    Its only tag is ``tag``, else ``v`` + its manifest's version. A release about to be
    published must pass every layer, so both its signature and its attestation are required.
    """

    kind = "folder"
    signature_required = True
    attestation_required = True
    attestation_lookup = False

    def __init__(self, folder: Path, *, tag: str | None = None) -> None:
        folder = Path(folder)
        if not (folder / models.MANIFEST_NAME).is_file():
            raise UsageError(f"{folder} holds no {models.MANIFEST_NAME}; is it a release folder?")
        self.folder = folder
        self.location = str(folder)
        if tag is None:
            manifest = models.parse_manifest(self.fetch("", models.MANIFEST_NAME))
            tag = models.tag_for(manifest.version)
        self.tag = tag

    def latest_tag(self, *, include_pre: bool, parse: TagRule = models.parse_tag) -> str:
        return self.tag

    def release_page(self, tag: str) -> str:
        return str(self.folder)

    def file_url(self, tag: str, name: str) -> str:
        return str(self.folder / name)

    def read_file(self, tag: str, name: str, *, max_size: int = SMALL_FILE_LIMIT) -> bytes:
        return read_local(self.folder / name, max_size)
