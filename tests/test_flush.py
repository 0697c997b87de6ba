"""Making an unpacked tree durable in another thread (updater/files.py, Flush).

A delta's tree is handed over as soon as it is built, before layer 3 answers; when the
answer fails it, the staging folder is emptied for the full archive while the flush may
still be walking it. What is gone by its turn is skipped; any other failure still reaches
the install.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

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


def test_a_tree_emptied_before_its_turn_is_skipped(tmp_path: Path) -> None:
    """What a delta that failed its attestation leaves: the folder emptied (and filled again
    by the full archive, which hands its files over anew)."""
    tree = _tree(tmp_path / "staging")
    shutil.rmtree(tree / "lib")
    flush = Flush()
    flush.tree(tree)
    flush.tree(tmp_path / "gone")
    flush.join()


def test_any_other_failure_reaches_the_install(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "staging")
    flush = Flush()
    flush.file(str(tree / "mux" / "not-a-folder"))  # ENOTDIR: not something gone
    flush.file(str(tree / "lib" / "a.so"))
    with pytest.raises(NotADirectoryError):
        flush.join()
