"""updater.net.download: a release file into a temporary file beside where it goes, hashed as
it comes, its progress reported (updater.net.progress), nothing left behind on failure. Over
httpx's MockTransport, and from a local path."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import pytest

from updater.config.settings_record import HttpSettings
from updater.errors import MuxError
from updater.net.client import HttpClient
from updater.net.download import download
from updater.net.progress import NoProgress, Progress

BODY = bytes(range(256)) * 300
URL = "https://example.com/v1.0.0/mux.tar.gz"


class Recorded:
    """A progress that remembers what it was told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def start(self, total: int | None) -> None:
        self.calls.append(("start", total))

    def advance(self, done: int) -> None:
        self.calls.append(("advance", done))

    def finish(self, completed: bool = True) -> None:
        self.calls.append(("finish", completed))


def serving(body: bytes) -> HttpClient:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"Content-Length": str(len(body))})

    return HttpClient(
        transport=httpx.MockTransport(handler), settings=HttpSettings(retries=0, backoff=0.0)
    )


def test_a_download_is_hashed_and_its_progress_reported(tmp_path: Path) -> None:
    progress: Progress = Recorded()
    done = download(
        URL,
        tmp_path / "into",
        size=len(BODY),
        max_size=1 << 20,
        client=serving(BODY),
        label="mux.tar.gz",
        progress=progress,
    )
    assert done.path.read_bytes() == BODY and done.size == len(BODY)
    assert done.sha256 == hashlib.sha256(BODY).hexdigest()
    assert done.path.parent == tmp_path / "into"
    calls = progress.calls  # type: ignore[attr-defined]
    assert calls[0] == ("start", len(BODY)) and calls[-1] == ("finish", True)
    advanced = [n for kind, n in calls if kind == "advance"]
    assert advanced and advanced[-1] == len(BODY)


def test_a_body_over_the_limit_fails_and_leaves_nothing(tmp_path: Path) -> None:
    progress = Recorded()
    with pytest.raises(MuxError):
        download(
            URL,
            tmp_path,
            size=None,
            max_size=1000,
            client=serving(BODY),
            label="mux.tar.gz",
            progress=progress,
        )
    assert list(tmp_path.iterdir()) == []
    assert progress.calls[-1] == ("finish", False)


def test_a_local_file_is_copied_and_hashed_in_silence(tmp_path: Path) -> None:
    source = tmp_path / "mux.tar.gz"
    source.write_bytes(BODY)
    done = download(
        str(source),
        tmp_path / "into",
        size=None,
        max_size=1 << 20,
        client=None,
        label="mux.tar.gz",
        progress=NoProgress(),
    )
    assert done.sha256 == hashlib.sha256(BODY).hexdigest() and done.size == len(BODY)
    with pytest.raises(MuxError):
        download(str(source), tmp_path / "small", size=None, max_size=10, client=None, label="m")
    assert list((tmp_path / "small").iterdir()) == []
