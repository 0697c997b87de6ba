"""The decompressed bytes of a ``.tar.gz`` for :func:`updater.trust.unpack.unpack`, read forward.

Why not tarfile's own ``r|gz``: it inflates 10 KiB of input per step with the standard zlib
and copies what is left of its buffer on every read; on a 64 MiB release archive that was
most of the unpacking's time. This reader inflates 1 MiB at a time with zlib-ng (the same
format, about twice as fast as zlib here; zlib when zlib-ng is missing), hands out slices of
one buffer, and is what tarfile reads in plain ``r:`` mode. It can only go forward, which is
all an unpack that reads each member once needs: a seek backwards is an error.

zlib checks each member's gzip trailer (CRC-32 and length) as it reaches it, and the error
reaches the reader if it reads that far: tarfile stops at the tar end marker, so a last
trailer cut off or bytes after it go unnoticed (the archive's signed SHA-256, checked before
it is unpacked, is what vouches for every byte). Output is produced at most :data:`_CHUNK`
bytes at a time whatever the input claims, so memory stays bounded for any archive (what
the archive may unpack to in total is bounded by the caller).
"""

from __future__ import annotations

import io
import queue
import threading
from collections.abc import Iterator
from typing import Any, BinaryIO, cast

try:
    from zlib_ng import zlib_ng as _zlib
except ImportError:  # pragma: no cover - a dependency; the standard zlib reads the same format
    import zlib as _zlib  # type: ignore[no-redef]

_CHUNK = 1 << 20
_AHEAD = 4  # chunks inflated ahead of the reader: what the worker may hold in memory
_GZIP_WBITS = 31  # a gzip header and trailer around a raw deflate stream

InflateError = cast("type[Exception]", _zlib.error)  # zlib-ng's stubs call it an instance


class GunzipReader(io.RawIOBase):
    """``raw``'s gzip members, decompressed; readable and seekable forward only.

    A worker thread inflates ahead (at most :data:`_AHEAD` chunks) while the reader's thread
    writes and hashes what it got: zlib-ng and hashlib both release the interpreter lock, so
    the two run on two cores. Use it as a context manager: leaving stops the worker.
    """

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._chunks: queue.Queue[bytes | BaseException | None] = queue.Queue(_AHEAD)
        self._stopping = threading.Event()
        self._chunk = b""
        self._position_in_chunk = 0
        self._offset = 0  # decompressed bytes handed out or skipped
        self._ended = False
        self._worker = threading.Thread(target=self._inflate, name="mux-gunzip", daemon=True)
        self._worker.start()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._offset

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self._offset
        elif whence != io.SEEK_SET:
            raise io.UnsupportedOperation("a gzip stream is read forward only")
        if offset < self._offset:
            raise io.UnsupportedOperation("a gzip stream cannot seek backwards")
        while self._offset < offset:
            if not self._skip(offset - self._offset):
                break  # past the end: reads return nothing, as for a file
        return self._offset

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            raise io.UnsupportedOperation("read() needs a size: the stream has no end known")
        parts = []
        wanted = size
        while wanted:
            available = len(self._chunk) - self._position_in_chunk
            if not available:
                if not self._next_chunk():
                    break
                continue
            take = min(available, wanted)
            start = self._position_in_chunk
            parts.append(self._chunk[start : start + take])
            self._position_in_chunk += take
            self._offset += take
            wanted -= take
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        """Stop the worker (it may be waiting to hand over a chunk) and wait for it."""
        self._stopping.set()
        while self._worker.is_alive():
            try:
                self._chunks.get(timeout=0.05)  # frees the worker's put, if it waits there
            except queue.Empty:
                pass
        super().close()

    def _skip(self, count: int) -> int:
        available = len(self._chunk) - self._position_in_chunk
        if not available and not self._next_chunk():
            return 0
        step = min(count, len(self._chunk) - self._position_in_chunk)
        self._position_in_chunk += step
        self._offset += step
        return step

    def _next_chunk(self) -> bool:
        """The worker's next chunk; False at the end of the last member."""
        if self._ended:
            return False
        item = self._chunks.get()
        if isinstance(item, BaseException):
            self._ended = True
            raise item
        if item is None:
            self._ended = True
            self._chunk, self._position_in_chunk = b"", 0
            return False
        self._chunk, self._position_in_chunk = item, 0
        return True

    def _inflate(self) -> None:
        """The worker: every decompressed chunk in order, then None (or the error)."""
        try:
            for chunk in _inflated(self._raw, self._stopping):
                if not self._hand_over(chunk):
                    return
            self._hand_over(None)
        except BaseException as exc:  # handed to the reader, raised there
            self._hand_over(exc)

    def _hand_over(self, item: bytes | BaseException | None) -> bool:
        while not self._stopping.is_set():
            try:
                self._chunks.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False


def _inflated(raw: BinaryIO, stopping: threading.Event) -> Iterator[bytes]:
    """``raw``'s gzip members, decompressed, :data:`_CHUNK` bytes at most at a time."""
    inflater: Any = _zlib.decompressobj(_GZIP_WBITS)
    while not stopping.is_set():
        if inflater.eof:
            # A member ended; another may follow (gzip allows several in one file).
            data = inflater.unused_data or raw.read(_CHUNK)
            if not data:
                return
            inflater = _zlib.decompressobj(_GZIP_WBITS)
        else:
            data = inflater.unconsumed_tail or raw.read(_CHUNK)
            if not data:
                raise EOFError("the compressed stream ends before its end marker")
        out = inflater.decompress(data, _CHUNK)
        if out:
            yield out
