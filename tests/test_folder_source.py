"""updater.sources.folder: one release folder as a source (``mux-release verify``): its tag is
its manifest's, it reads only its own files, and a folder without a manifest is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.feeds import write_release
from updater.errors import NetworkError, UsageError
from updater.formats import models
from updater.sources.folder import ReleaseFolderSource


def test_a_release_folder_is_its_one_release(tmp_path: Path) -> None:
    folder = write_release(tmp_path, "1.2.3")
    source = ReleaseFolderSource(folder)
    assert source.tag == "v1.2.3" == source.latest_tag(include_pre=True)
    assert source.signature_required and source.attestation_required
    manifest = models.parse_manifest(source.fetch(source.tag, models.MANIFEST_NAME))
    assert manifest.version == "1.2.3"
    assert source.file_url(source.tag, "SHA256SUMS") == str(folder / "SHA256SUMS")
    assert source.fetch_optional(source.tag, "missing.sigstore.json") is None
    with pytest.raises(NetworkError, match="cannot read"):
        source.fetch(source.tag, "missing.tar.gz")
    assert ReleaseFolderSource(folder, tag="v9.9.9").tag == "v9.9.9"


def test_a_folder_without_a_manifest_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"no manifest\.json; is it a release folder"):
        ReleaseFolderSource(tmp_path)


def test_a_file_larger_than_asked_is_refused(tmp_path: Path) -> None:
    folder = write_release(tmp_path, "1.2.3")
    source = ReleaseFolderSource(folder)
    with pytest.raises(NetworkError, match="larger than 10 bytes"):
        source.fetch(source.tag, models.MANIFEST_NAME, max_size=10)
