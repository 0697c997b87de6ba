"""updater.trust.unpack: an archive unpacked and hashed as it is written, and the files list
(updater.install.layout.files_list) trusting only untouched files."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest


def _archive(path: Path, top: str, files: dict[str, bytes]) -> None:
    import io
    import tarfile

    with tarfile.open(path, "w:gz") as archive:
        for name, data in {"mux": b"#!/bin/sh\n", **files}.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mode = len(data), 0o755
            archive.addfile(info, io.BytesIO(data))


def test_unpack_hashes_what_it_writes_and_the_list_trusts_only_untouched_files(
    tmp_path: Path,
) -> None:
    """The digests taken while unpacking make the same ``.mux-files`` as reading the files
    back; a file changed since (same size, its mtime put back) or added is read again."""
    from updater.install.layout import files_list
    from updater.trust.unpack import unpack

    files = {"lib/a.bin": bytes(range(256)) * 1000, "b.txt": b"b" * 70_000, "empty": b""}
    _archive(tmp_path / "a.tar.gz", "top", files)
    root = tmp_path / "out"
    root.mkdir()
    unpacked = unpack(tmp_path / "a.tar.gz", root, top="top")
    assert sorted(unpacked) == ["b.txt", "empty", "lib/a.bin", "mux"]
    from_disk = files_list(root)
    assert files_list(root, unpacked) == from_disk
    assert hashlib.sha256(files["lib/a.bin"]).hexdigest() == unpacked["lib/a.bin"].sha256

    # A digest is used only while the file is what was written: a stand-in digest shows which.
    stand_in = {k: v._replace(sha256="0" * 64) for k, v in unpacked.items()}
    assert files_list(root, stand_in).count(b"0" * 64) == 4
    victim = root / "b.txt"
    before = victim.stat()
    victim.write_bytes(b"c" * 70_000)
    os.utime(victim, ns=(before.st_atime_ns, before.st_mtime_ns))  # same size, same mtime
    (root / "added").write_bytes(b"new")
    listing = files_list(root, stand_in)
    assert listing.count(b"0" * 64) == 3
    assert f"{hashlib.sha256(b'c' * 70_000).hexdigest()}  ./b.txt".encode() in listing
    assert files_list(root, unpacked) == files_list(root) != from_disk


def test_a_truncated_archive_is_refused_while_it_is_hashed(tmp_path: Path) -> None:
    from updater.errors import VerificationError
    from updater.trust.unpack import unpack

    _archive(tmp_path / "a.tar.gz", "top", {"big": os.urandom(300_000)})
    whole = (tmp_path / "a.tar.gz").read_bytes()
    (tmp_path / "cut.tar.gz").write_bytes(whole[: len(whole) // 2])
    root = tmp_path / "out"
    root.mkdir()
    with pytest.raises(VerificationError, match="cannot unpack"):
        unpack(tmp_path / "cut.tar.gz", root, top="top")
