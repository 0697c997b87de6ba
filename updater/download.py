"""Download one release file into a temporary file, hashing it in the same pass.

The file goes to ``<directory>/.download-XXXXXX`` (inside ``MUX_HOME``, so the later rename
stays on one file system). It never grows past the expected size; a dropped connection or a
stall is resumed with ``Range``; every failure removes the temporary file.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from .errors import InstallError, MuxError, NetworkError, VerificationError
from .layout import DOWNLOAD_PREFIX

CHUNK = 256 * 1024


@dataclass(frozen=True)
class Downloaded:
    path: Path
    sha256: str
    size: int


class Progress(Protocol):
    def start(self, total: int) -> None: ...

    def advance(self, done: int) -> None: ...

    def finish(self) -> None: ...


class PlainProgress:
    """Plain lines for logs and pipes: one when it starts, one when it ends."""

    def __init__(self, label: str, write: Callable[[str], None]) -> None:
        self.label = label
        self.write = write
        self.total = 0

    def start(self, total: int) -> None:
        self.total = total
        self.write(f"downloading {self.label} ({total / 1048576:.1f} MiB)")

    def advance(self, done: int) -> None:
        pass

    def finish(self) -> None:
        self.write(f"downloaded {self.label}")


class BarProgress:
    """A progress bar on a terminal (rich, imported only here)."""

    def __init__(self, label: str) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TransferSpeedColumn,
        )

        self._progress = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            console=Console(stderr=True),  # stdout stays for the report (and --json)
            transient=True,
        )
        self._label = label
        self._task: Any = None

    def start(self, total: int) -> None:
        self._progress.start()
        self._task = self._progress.add_task(self._label, total=total)

    def advance(self, done: int) -> None:
        if self._task is not None:
            self._progress.update(self._task, completed=done)

    def finish(self) -> None:
        self._progress.stop()


def make_progress(label: str, *, quiet: bool = False) -> Progress:
    if quiet:
        return PlainProgress(label, lambda _line: None)
    if sys.stderr.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb":
        return BarProgress(label)
    return PlainProgress(label, lambda line: print(line, file=sys.stderr))


def _too_large(label: str, expected_size: int) -> VerificationError:
    return VerificationError(
        f"{label} is larger than the {expected_size} bytes the manifest promises; refusing it"
    )


def _copy_local(source: Path, out: BinaryIO, digest, expected_size: int, label: str) -> int:
    try:
        with source.open("rb") as handle:
            done = 0
            for block in iter(lambda: handle.read(CHUNK), b""):
                done += len(block)
                if done > expected_size:
                    raise _too_large(label, expected_size)
                out.write(block)
                digest.update(block)
    except OSError as exc:
        raise NetworkError(f"cannot read {source}: {exc.strerror}") from None
    return done


def _fetch_http(
    url: str, out: BinaryIO, digest, expected_size: int, label: str, client, progress: Progress
) -> tuple[int, Any]:
    import httpx

    done = 0
    failures = 0
    while True:
        headers = {"Range": f"bytes={done}-"} if done else {}
        try:
            with client.stream(url, headers=headers) as response:
                if done and response.status_code != 206:
                    # The server ignored the Range: start again from the first byte.
                    out.seek(0)
                    out.truncate()
                    digest = hashlib.sha256()
                    done = 0
                for block in response.iter_bytes():
                    if done + len(block) > expected_size:
                        raise _too_large(label, expected_size)
                    out.write(block)
                    digest.update(block)
                    done += len(block)
                    progress.advance(done)
        except (httpx.TransportError, httpx.StreamError) as exc:
            failures += 1
            if failures > client.retries:
                raise NetworkError(
                    f"download of {url} failed after {done} of {expected_size} bytes: "
                    f"{exc.__class__.__name__}",
                    hint="check the network, then retry",
                ) from None
            client.back_off(failures)
            continue
        if done < expected_size:
            failures += 1
            if failures > client.retries:
                raise NetworkError(
                    f"download of {url} stopped at {done} of {expected_size} bytes",
                    hint="retry; if it persists the release file is truncated on the server",
                )
            client.back_off(failures)
            continue
        return done, digest


def download(
    location: str,
    directory: Path,
    *,
    expected_size: int,
    client=None,
    label: str | None = None,
    progress: Progress | None = None,
) -> Downloaded:
    """Fetch ``location`` (a URL through ``client``, or a local path) into ``directory``."""
    label = label or location.rsplit("/", 1)[-1]
    progress = progress or make_progress(label)
    directory.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(dir=directory, prefix=DOWNLOAD_PREFIX)
    temp = Path(temp_name)
    try:
        with os.fdopen(fd, "w+b") as out:
            digest = hashlib.sha256()
            progress.start(expected_size)
            try:
                if location.startswith(("http://", "https://")):
                    if client is None:
                        raise MuxError(f"no HTTP client for {location}")
                    size, digest = _fetch_http(
                        location, out, digest, expected_size, label, client, progress
                    )
                else:
                    size = _copy_local(Path(location), out, digest, expected_size, label)
            finally:
                progress.finish()
            out.flush()
        return Downloaded(path=temp, sha256=digest.hexdigest(), size=size)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise InstallError(
            f"cannot write the download to {directory}: {exc.strerror or exc}",
            hint="free some disk space (or raise the file size limit), then retry",
        ) from None
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
