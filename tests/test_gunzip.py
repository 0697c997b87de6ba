"""The forward-only gzip reader the unpacking reads through (updater/trust/gunzip.py).

Checked against Python's gzip module on real files: the same bytes whatever the read sizes
and chunk boundaries, several members, and every broken stream (cut short, wrong checksum,
trailing garbage) an error, not a short archive. Its worker thread never outlives it.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import threading
import time
import tracemalloc
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from updater.errors import VerificationError
from updater.trust import gunzip as _gunzip
from updater.trust.gunzip import GunzipReader, InflateError
from updater.trust.unpack import unpack


def _gzip_file(tmp_path: Path, *members: bytes, name: str = "data.gz") -> Path:
    path = tmp_path / name
    path.write_bytes(b"".join(gzip.compress(member, mtime=0) for member in members))
    return path


def _read_all(path: Path, sizes: list[int]) -> bytes:
    out = []
    with path.open("rb") as raw, GunzipReader(raw) as reader:
        position = 0
        for size in sizes:
            data = reader.read(size)
            out.append(data)
            position += len(data)
            assert reader.tell() == position
        while data := reader.read(1 << 16):
            out.append(data)
    return b"".join(out)


@pytest.fixture(scope="module")
def mixed() -> bytes:
    """Compressible and incompressible runs, longer than several of the reader's chunks."""
    return b"".join([os.urandom(3 << 20), b"mux " * (1 << 20), os.urandom(123_457), bytes(2 << 20)])


def test_the_bytes_are_gzips_bytes_whatever_the_read_sizes(tmp_path: Path, mixed: bytes) -> None:
    path = _gzip_file(tmp_path, mixed)
    assert _read_all(path, [1, 511, 512, 1 << 20, 3, (1 << 20) + 1, 7 << 20]) == mixed


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.binary(max_size=4096), min_size=1, max_size=4),
    st.lists(st.integers(min_value=0, max_value=5000), max_size=20),
)
def test_any_members_read_in_any_sizes(members: list[bytes], sizes: list[int]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        path = _gzip_file(Path(scratch), *members)
        assert _read_all(path, sizes) == b"".join(members)


def test_seeking_forward_skips_and_backward_is_refused(tmp_path: Path, mixed: bytes) -> None:
    path = _gzip_file(tmp_path, mixed)
    with path.open("rb") as raw, GunzipReader(raw) as reader:
        assert reader.seek(5_000_000) == 5_000_000
        assert reader.read(10) == mixed[5_000_000:5_000_010]
        assert reader.seek(2, io.SEEK_CUR) == 5_000_012
        with pytest.raises(io.UnsupportedOperation):
            reader.seek(100)
        with pytest.raises(io.UnsupportedOperation):
            reader.seek(0, io.SEEK_END)
        assert reader.seek(len(mixed) + 10) == len(mixed)  # past the end stops at the end
        assert reader.read(10) == b""


@pytest.mark.parametrize(
    "damage",
    ["cut", "checksum", "trailing", "not-gzip"],
)
def test_a_broken_stream_is_an_error_not_a_short_read(
    tmp_path: Path, mixed: bytes, damage: str
) -> None:
    data = bytearray(gzip.compress(mixed, mtime=0))
    if damage == "cut":
        del data[len(data) // 2 :]
    elif damage == "checksum":
        data[-8] ^= 0xFF  # the CRC-32 in the trailer
    elif damage == "trailing":
        data += b"this is not another gzip member"
    else:
        data[:10] = b"PK\x03\x04zipfile"
    path = tmp_path / "broken.gz"
    path.write_bytes(bytes(data))
    with pytest.raises((InflateError, EOFError)):
        _read_all(path, [])


def _reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "mux-gunzip"]


def test_leaving_early_stops_the_worker_even_when_it_waits_to_hand_over(
    tmp_path: Path,
) -> None:
    path = _gzip_file(tmp_path, bytes(64 << 20))  # far more than the worker may hold ahead
    with path.open("rb") as raw, GunzipReader(raw) as reader:
        assert reader.read(10) == bytes(10)
        assert _reader_threads()
    assert _reader_threads() == []


def test_what_the_worker_holds_ahead_is_bounded(tmp_path: Path) -> None:
    """A stream of zeros inflates 1000 to 1: memory is bounded by chunks, not by the input."""
    path = _gzip_file(tmp_path, bytes(512 << 20))  # 512 MiB of zeros, about 0.5 MiB on disk
    tracemalloc.start()
    try:
        with path.open("rb") as raw, GunzipReader(raw) as reader:
            reader.read(1)
            deadline = time.monotonic() + 60
            while not reader._chunks.full() and time.monotonic() < deadline:
                time.sleep(0.01)  # polling a condition, with a deadline: not a timing guess
            assert reader._chunks.full()
            held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # queued, one in each thread's hands, the compressed input and its tail: not the 512 MiB
    assert held < (_gunzip._AHEAD + 5) * _gunzip._CHUNK


def test_an_archive_cut_short_fails_the_archive_layer_and_stops_the_worker(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "tree" / "mux-x"
    tree.mkdir(parents=True)
    (tree / "mux").write_bytes(os.urandom(3 << 20))
    (tree / "mux").chmod(0o755)
    archive = tmp_path / "mux.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tree, arcname="mux-x")
    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) // 2])
    destination = tmp_path / "out"
    destination.mkdir()
    with pytest.raises(VerificationError, match=r"verification failed \(archive\): cannot unpack"):
        unpack(archive, destination, top="mux-x")
    assert _reader_threads() == []


def test_the_standard_zlib_reads_what_zlib_ng_does(tmp_path: Path, mixed: bytes, monkeypatch):
    """Without zlib-ng (it is a dependency, but the reader only needs the format)."""
    monkeypatch.setattr(_gunzip, "_zlib", zlib)
    path = _gzip_file(tmp_path, mixed, b"second member")
    assert _read_all(path, [4096]) == mixed + b"second member"


def test_a_file_is_handed_over_with_its_final_mode_and_times(tmp_path: Path) -> None:
    """The install fsyncs each file when it is handed over, and the tree walk skips it then:
    were the mode or times set after the hand-over (a tarfile that reorders its calls), that
    change would not be what the fsync made durable."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, mode in (("top/mux", 0o755), ("top/lib/data", 0o640)):
            member = tarfile.TarInfo(name)
            member.size, member.mode, member.mtime = 4, mode, 1_234_567
            archive.addfile(member, io.BytesIO(b"data"))
    path = tmp_path / "a.tar.gz"
    path.write_bytes(gzip.compress(buffer.getvalue()))
    destination = tmp_path / "out"
    destination.mkdir()
    seen: dict[str, tuple[int, int]] = {}

    def on_file(file: str) -> None:
        status = os.lstat(file)
        seen[file] = (status.st_mode, status.st_mtime_ns)

    unpack(path, destination, top="top", on_file=on_file)
    final = {}
    for file in (destination / "mux", destination / "lib" / "data"):
        status = os.lstat(file)
        final[str(file)] = (status.st_mode, status.st_mtime_ns)
    assert seen == final
    assert final[str(destination / "mux")][1] == 1_234_567 * 10**9
