"""One release file into a temporary file, hashed in the same pass (for :mod:`updater.sources`).

The file goes to ``<directory>/.download-XXXXXX`` (inside ``MUX_HOME`` for an update, so the
later rename stays on one file system, and a killed run's leftover is recognised). It never
grows past its size limit; every failure removes the temporary file. URLs are streamed by
the source's :class:`~updater.net.client.HttpClient` (resuming with ``Range``); local files (a feed
or release folder) are copied.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from updater.errors import InstallError, NetworkError, VerificationError
from updater.files import NotReadable, open_regular_file
from updater.net.progress import NoProgress, Progress

if TYPE_CHECKING:
    from updater.net.client import HttpClient

# A download in progress: a temp file of this name in its folder, garbage once its run is gone
# (updater.install.layout lists it among the leftovers the next run removes).
DOWNLOAD_PREFIX = ".download-"
CHUNK = 256 * 1024


@dataclass(frozen=True)
class Downloaded:
    path: Path
    sha256: str
    size: int


def download(
    location: str,
    directory: Path,
    *,
    size: int | None,
    max_size: int,
    client: HttpClient | None,
    label: str,
    progress: Progress | None = None,
) -> Downloaded:
    """Fetch ``location`` (a URL, through ``client``; else a local path) into ``directory``.

    ``size``: the exact length, when known (a shorter body is resumed, then refused);
    ``max_size``: the limit either way.
    """
    progress = progress or NoProgress()
    directory.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(dir=directory, prefix=DOWNLOAD_PREFIX)
    temp = Path(temp_name)
    try:
        with os.fdopen(fd, "w+b") as out:
            progress.start(size)
            completed = False
            try:
                if client is not None:
                    done, sha256 = client.download_into(
                        location, out, size=size, max_size=max_size, label=label, progress=progress
                    )
                else:
                    limit = max_size if size is None else min(size, max_size)
                    done, sha256 = _copy_local(Path(location), out, limit, label)
                completed = True
            finally:
                progress.finish(completed)
            out.flush()
        return Downloaded(path=temp, sha256=sha256, size=done)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise InstallError(
            f"cannot write the download to {directory}: {exc.strerror or exc}",
            hint="free some disk space (or raise the file size limit), then retry",
        ) from None
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def _copy_local(source: Path, out: BinaryIO, max_size: int, label: str) -> tuple[int, str]:
    digest = hashlib.sha256()
    done = 0
    try:  # a FIFO or a device in the source's place cannot hang it (updater.files)
        handle = open_regular_file(source)
    except NotReadable as exc:
        raise NetworkError(f"cannot read {source}: {exc}") from None
    except OSError as exc:
        raise NetworkError(f"cannot read {source}: {exc.strerror}") from None
    with handle:
        while True:
            try:
                block = handle.read(CHUNK)
            except OSError as exc:
                raise NetworkError(f"cannot read {source}: {exc.strerror}") from None
            if not block:
                return done, digest.hexdigest()
            done += len(block)
            if done > max_size:
                raise VerificationError(
                    f"{label} is larger than the {max_size} bytes it should have; refusing it"
                )
            out.write(block)  # a full disk is an OSError for download() to report
            digest.update(block)
