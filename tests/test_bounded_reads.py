"""The reads of files others may put in mux's way that are not state files: a local source's
files, a folder TUF repository's, the root given to ``mux-release tuf-client init``. Each goes
through :mod:`updater.files`, which opens without blocking and judges what it opened, so a
FIFO in a file's place is refused at once: an ``open`` that blocked would wait for a writer
that never comes (and the test would fail on its timeout)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tuf.api import exceptions

from release.rehearsal.tuf_client import init
from updater.errors import MuxError, NetworkError
from updater.net.download import download
from updater.sources.base import read_local
from updater.sources.tuf_fetcher import FolderFetcher

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "releases.json"
    os.mkfifo(path)
    return path


def test_a_local_sources_file_that_is_a_fifo_is_one_line(fifo: Path) -> None:
    with pytest.raises(NetworkError) as caught:
        read_local(fifo, 1000)
    assert caught.value.message == f"cannot read {fifo}: it is not a regular file"


def test_a_local_download_from_a_fifo_is_one_line_and_leaves_nothing(
    fifo: Path, tmp_path: Path
) -> None:
    into = tmp_path / "downloads"
    with pytest.raises(NetworkError) as caught:
        download(str(fifo), into, size=None, max_size=1000, client=None, label="the archive")
    assert caught.value.message == f"cannot read {fifo}: it is not a regular file"
    assert list(into.iterdir()) == []


def test_a_fifo_in_a_folder_tuf_repository_is_a_missing_file_to_python_tuf(fifo: Path) -> None:
    """404: what a web server answers for no such file (python-tuf's "no newer root")."""
    fetcher = FolderFetcher()
    with pytest.raises(exceptions.DownloadHTTPError) as metadata:
        fetcher.download_bytes(f"file://{fifo}", 1000)
    assert (metadata.value.status_code, str(metadata.value)) == (404, f"{fifo} is not a file")
    with (
        pytest.raises(exceptions.DownloadHTTPError) as target,
        fetcher.download_file(str(fifo), 1000),
    ):
        pass
    assert (target.value.status_code, str(target.value)) == (404, f"{fifo} is not a file")


def test_tuf_client_init_refuses_a_fifo_as_its_root(fifo: Path, tmp_path: Path) -> None:
    metadata = tmp_path / "metadata"
    with pytest.raises(MuxError) as caught:
        init(str(metadata), str(fifo))
    assert caught.value.message == f"{fifo} cannot be read: it is not a regular file"
    assert not metadata.exists()


def test_tuf_client_init_still_refuses_a_missing_or_oversized_root(tmp_path: Path) -> None:
    metadata = tmp_path / "metadata"
    with pytest.raises(MuxError, match="does not exist"):
        init(str(metadata), str(tmp_path / "root.json"))
    (tmp_path / "root.json").write_bytes(b"{" + b" " * 600_000 + b"}")
    with pytest.raises(MuxError, match="is larger than 512000 bytes"):
        init(str(metadata), str(tmp_path / "root.json"))
    assert not metadata.exists()
