"""updater.trust.tuf_store: where the TUF client keeps what it trusts. One private folder per
root (by the root's signed content, not its layout or URL), one refresher at a time, and the
trusted metadata carried over to a new folder of the same root from the furthest one beside
it. python-tuf verifies again whatever is loaded from here (test_tuf_client.py)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
from tuf.api.metadata import Metadata, Root, Snapshot, Timestamp

from updater.errors import MuxError
from updater.trust.tuf_store import (
    ROOT_HISTORY,
    carry_over,
    make_private_folder,
    refreshing,
    repository_folder,
    root_identity,
)


def root_bytes(version: int = 1) -> bytes:
    return Metadata(Root(version=version)).to_bytes()


def test_a_root_is_known_by_its_signed_content() -> None:
    raw = root_bytes()
    identity = root_identity(raw)
    assert identity == (1, hashlib.sha256(Metadata.from_bytes(raw).signed_bytes).hexdigest())
    relaid = json.dumps(json.loads(raw), indent=4).encode()  # another layout, the same root
    assert root_identity(relaid) == identity
    assert root_identity(root_bytes(2)) != identity
    assert root_identity(b"not json") is None
    assert root_identity(Metadata(Timestamp()).to_bytes()) is None  # metadata, not a root


def test_each_root_has_its_folder_under_the_state_dir(tmp_path: Path) -> None:
    raw = root_bytes()
    folder = repository_folder(str(tmp_path), raw)
    assert folder == str(tmp_path / "tuf" / f"root-{root_identity(raw)[1]}")  # type: ignore[index]
    assert repository_folder(str(tmp_path), b"garbage").endswith(
        hashlib.sha256(b"garbage").hexdigest()
    )
    assert not os.path.exists(folder)  # named, not created


def test_folders_are_made_private_and_a_file_in_the_way_fails(tmp_path: Path) -> None:
    make_private_folder(str(tmp_path / "a" / "b" / "c"))
    for path in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    make_private_folder(str(tmp_path / "a" / "b" / "c"))  # already there: fine
    (tmp_path / "file").write_text("")
    with pytest.raises(FileExistsError):
        make_private_folder(str(tmp_path / "file"))


def test_one_refresher_at_a_time(tmp_path: Path) -> None:
    folder = str(tmp_path / "tuf" / "root-x")
    with refreshing(folder, wait=0):
        assert os.path.isdir(os.path.join(folder, ROOT_HISTORY))
        with pytest.raises(MuxError, match="another mux is refreshing"), refreshing(folder, wait=0):
            pass
    with refreshing(folder, wait=0):  # released
        pass


def write_store(folder: Path, root: bytes, *, timestamp: int, snapshot: int) -> None:
    (folder / ROOT_HISTORY).mkdir(parents=True)
    (folder / ROOT_HISTORY / "1.root.json").write_bytes(root)
    (folder / "timestamp.json").write_bytes(Metadata(Timestamp(version=timestamp)).to_bytes())
    (folder / "snapshot.json").write_bytes(Metadata(Snapshot(version=snapshot)).to_bytes())


def test_a_new_folder_of_the_same_root_starts_from_the_furthest_one(tmp_path: Path) -> None:
    root = root_bytes()
    store = tmp_path / "tuf"
    write_store(store / "root-old-url", root, timestamp=3, snapshot=3)
    write_store(store / "root-further", root, timestamp=7, snapshot=5)
    write_store(store / "root-other", root_bytes(2), timestamp=99, snapshot=99)  # another root
    new = store / "root-new"
    new.mkdir()
    assert carry_over(str(new), root, wait=0) == str(store / "root-further")
    stamp = Metadata.from_bytes((new / "timestamp.json").read_bytes())
    assert stamp.signed.version == 7
    assert (new / ROOT_HISTORY / "1.root.json").read_bytes() == root
    assert stat.S_IMODE((new / "timestamp.json").stat().st_mode) == 0o600
    assert carry_over(str(new), root, wait=0) is None  # it has a timestamp of its own now
    lonely = store / "root-lonely"
    lonely.mkdir()
    assert carry_over(str(lonely), b"no root", wait=0) is None
