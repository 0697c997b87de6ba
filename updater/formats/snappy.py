"""Snappy decompression in pure Python: the block format and the framed (stream) format.

GitHub's attestations API has served bundles as snappy blobs behind ``bundle_url`` since
2026-07-16 (docs/design.md, "GitHub's attestations API"). mux may not depend on python-snappy
or cramjam, and a decoder is small. Formats: google/snappy ``format_description.txt`` and
``framing_format.txt``.

Every size is checked against ``max_size`` before anything is allocated for it, so a tiny
input declaring gigabytes is a :class:`SnappyError` line, never a ``MemoryError``. Malformed
input of any kind raises :class:`SnappyError` and nothing else.
"""

from __future__ import annotations

from updater.errors import ParseError

FRAMED_MAGIC = b"\xff\x06\x00\x00sNaPpY"
MAX_FRAME_DATA = 65536  # uncompressed bytes one framed chunk may hold (framing_format.txt §4)

_CHUNK_COMPRESSED = 0x00
_CHUNK_UNCOMPRESSED = 0x01
_CHUNK_PADDING = 0xFE
_CHUNK_STREAM_ID = 0xFF
_CRC_MASK_DELTA = 0xA282EAD8


class SnappyError(ParseError):
    """The data is not valid snappy, or it would decompress to more than allowed."""


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1  # Castagnoli, reflected
        table.append(crc)
    return tuple(table)


_CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum of the framed format (not zlib's CRC-32)."""
    crc = 0xFFFFFFFF
    table = _CRC32C_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The framed format stores the CRC rotated and offset, so CRCs of CRCs stay useful."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _CRC_MASK_DELTA) & 0xFFFFFFFF


def decompress(data: bytes, *, max_size: int) -> bytes:
    """Decompress snappy ``data``, framed (it starts with the stream identifier) or block."""
    if data.startswith(FRAMED_MAGIC):
        return decompress_framed(data, max_size=max_size)
    return decompress_block(data, max_size=max_size)


def decompress_block(data: bytes, *, max_size: int) -> bytes:
    """Decompress one snappy block: a varint length preamble, then literals and copies."""
    length, position = _read_preamble(data)
    if length > max_size:
        raise SnappyError(
            f"snappy data declares {length} bytes, more than the {max_size} allowed; refusing it"
        )
    return _decode_elements(data, position, length)


def decompress_framed(data: bytes, *, max_size: int) -> bytes:
    """Decompress a snappy stream: chunks checked against their masked CRC-32C."""
    if not data.startswith(FRAMED_MAGIC):
        raise SnappyError("snappy stream does not start with the sNaPpY stream identifier")
    output = bytearray()
    position = 0
    while position < len(data):
        if position + 4 > len(data):
            raise SnappyError("snappy stream is truncated inside a chunk header")
        kind = data[position]
        size = int.from_bytes(data[position + 1 : position + 4], "little")
        body = data[position + 4 : position + 4 + size]
        if len(body) != size:
            raise SnappyError(f"snappy stream is truncated: a chunk of {size} bytes is cut short")
        position += 4 + size
        if kind == _CHUNK_STREAM_ID:
            # Concatenated streams repeat the identifier; it must still be the right one.
            if body != FRAMED_MAGIC[4:]:
                raise SnappyError("snappy stream has a corrupt stream identifier")
        elif kind in (_CHUNK_COMPRESSED, _CHUNK_UNCOMPRESSED):
            if size < 4:
                raise SnappyError("snappy stream has a data chunk too short for its checksum")
            room = min(MAX_FRAME_DATA, max_size - len(output))
            if kind == _CHUNK_COMPRESSED:
                chunk = _decompress_frame_block(body[4:], room, max_size)
            else:
                chunk = body[4:]
                _check_frame_size(len(chunk), room, max_size)
            if masked_crc32c(chunk) != int.from_bytes(body[:4], "little"):
                raise SnappyError(
                    f"snappy stream chunk ending at byte {position} fails its CRC-32C check"
                )
            output += chunk
        elif 0x02 <= kind <= 0x7F:
            raise SnappyError(f"snappy stream has a reserved unskippable chunk type {kind:#04x}")
        # 0x80-0xfd are reserved skippable chunks and 0xfe is padding: both are ignored.
    return bytes(output)


def _decompress_frame_block(block: bytes, room: int, max_size: int) -> bytes:
    length, position = _read_preamble(block)
    _check_frame_size(length, room, max_size)
    return _decode_elements(block, position, length)


def _check_frame_size(length: int, room: int, max_size: int) -> None:
    if length <= room:
        return
    if length > MAX_FRAME_DATA:
        raise SnappyError(f"snappy stream chunk holds {length} bytes, more than 65536")
    raise SnappyError(f"snappy stream decompresses to more than the {max_size} bytes allowed")


def _read_preamble(data: bytes) -> tuple[int, int]:
    """The uncompressed length (a little-endian base-128 varint of at most 32 bits)."""
    value = 0
    for index in range(5):
        if index >= len(data):
            raise SnappyError("snappy data is truncated inside its length preamble")
        byte = data[index]
        value |= (byte & 0x7F) << (7 * index)
        if not byte & 0x80:
            if value > 0xFFFFFFFF:
                break
            return value, index + 1
    raise SnappyError("snappy data has an invalid length preamble")


def _decode_elements(data: bytes, position: int, length: int) -> bytes:
    """Literals and back-references from ``data[position:]``, exactly ``length`` bytes."""
    output = bytearray()
    end = len(data)
    while position < end:
        tag = data[position]
        position += 1
        kind = tag & 3
        if kind == 0:  # literal; lengths over 60 follow the tag in 1 to 4 bytes
            size = (tag >> 2) + 1
            if size > 60:
                extra = size - 60
                if position + extra > end:
                    raise SnappyError("snappy data is truncated inside a literal length")
                size = int.from_bytes(data[position : position + extra], "little") + 1
                position += extra
            if len(output) + size > length:
                raise SnappyError("snappy data is longer than its preamble says")
            if position + size > end:
                raise SnappyError("snappy data is truncated inside a literal")
            output += data[position : position + size]
            position += size
            continue
        if kind == 1:  # copy: 3 bits of length, 11 bits of offset
            size = 4 + ((tag >> 2) & 7)
            extra = 1
        else:  # copy: 6 bits of length, a 2- or 4-byte offset
            size = 1 + (tag >> 2)
            extra = 2 if kind == 2 else 4
        if position + extra > end:
            raise SnappyError("snappy data is truncated inside a copy")
        offset = int.from_bytes(data[position : position + extra], "little")
        if kind == 1:
            offset |= (tag >> 5) << 8
        position += extra
        if offset == 0 or offset > len(output):
            raise SnappyError(f"snappy data copies from offset {offset}, outside the output")
        if len(output) + size > length:
            raise SnappyError("snappy data is longer than its preamble says")
        start = len(output) - offset
        if offset >= size:
            output += output[start : start + size]
        else:  # the copy overlaps what it writes: the last `offset` bytes repeat
            pattern = bytes(output[start:])
            output += (pattern * (size // offset + 1))[:size]
    if len(output) != length:
        raise SnappyError(
            f"snappy data is truncated: {len(output)} of the {length} bytes its preamble declares"
        )
    return bytes(output)
