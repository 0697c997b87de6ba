"""Making an unpacked tree durable in another thread (updater/files.py, Flush).

A delta's tree is handed over as soon as it is built, before layer 3 answers; when the
answer fails it, the staging folder is emptied for the full archive while the flush may
still be walking it. What is gone by its turn is skipped; any other failure still reaches
the install.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from updater import files
from updater.files import Flush


def _tree(root: Path) -> Path:
    (root / "lib" / "sub").mkdir(parents=True)
    for name in ("mux", "lib/a.so", "lib/sub/b.py"):
        (root / name).write_bytes(name.encode())
    (root / "lib" / "link").symlink_to("a.so")
    return root


def test_a_whole_tree_is_flushed_without_error(tmp_path: Path) -> None:
    flush = Flush()
    tree = _tree(tmp_path / "staging")
    flush.file(str(tree / "mux"))
    flush.tree(tree)
    flush.join()


def test_a_file_gone_by_its_turn_is_skipped(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "staging")
    (tree / "mux").unlink()
    flush = Flush()
    flush.file(str(tree / "mux"))
    flush.file(str(tree / "lib" / "a.so"))
    flush.join()


def test_a_tree_emptied_while_it_is_walked_is_skipped(tmp_path: Path, monkeypatch) -> None:
    """What a delta that failed its attestation leaves: its staging folder emptied (for the
    full archive) while the flush walks it. Here the files go once the walk has listed
    them, at the first fsync."""
    tree = _tree(tmp_path / "staging")
    (tree / "second").write_bytes(b"listed with mux, gone before its turn")
    real_fsync = os.fsync
    emptied: list[bool] = []

    def fsync_then_empty(fd: int) -> None:
        real_fsync(fd)
        if not emptied:
            emptied.append(True)
            for entry in tree.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()

    monkeypatch.setattr(files.os, "fsync", fsync_then_empty)
    flush = Flush()
    flush.tree(tree)
    flush.tree(tmp_path / "gone")
    flush.join()
    assert emptied == [True]


def test_a_file_written_again_at_a_flushed_path_is_flushed_again(
    tmp_path: Path, monkeypatch
) -> None:
    """The full archive writes its files at the paths of the thrown-away delta's: a path
    flushed before is no reason to skip the new file there."""
    tree = _tree(tmp_path / "staging")
    path = tree / "mux"
    real_fsync = os.fsync
    flushed: list[int] = []

    def fsync_and_replace(fd: int) -> None:
        real_fsync(fd)
        flushed.append(os.fstat(fd).st_ino)
        if len(flushed) == 1:  # the first file flushed: now written anew, another inode
            (tree / "new").write_bytes(b"the archive's mux")
            os.replace(tree / "new", path)

    monkeypatch.setattr(files.os, "fsync", fsync_and_replace)
    flush = Flush()
    flush.file(str(path))
    flush.tree(tree)
    flush.join()
    assert path.stat().st_ino in flushed[1:]


def test_any_other_failure_reaches_the_install(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "staging")
    flush = Flush()
    flush.file(str(tree / "mux" / "not-a-folder"))  # ENOTDIR: not something gone
    flush.file(str(tree / "lib" / "a.so"))
    with pytest.raises(NotADirectoryError):
        flush.join()
