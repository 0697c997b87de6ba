"""Snappy blocks and framed streams written by hand (literals only), for the decoder's tests
(``updater.formats.snappy``) and the attestation API's compressed answers."""

from __future__ import annotations

from updater.formats import snappy


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_literals(data: bytes, *, piece: int = 65536) -> bytes:
    """A valid snappy block holding ``data`` as literals only."""
    body = b"".join(literal(data[i : i + piece]) for i in range(0, len(data), piece))
    return varint(len(data)) + body


def framed(*chunks: bytes) -> bytes:
    return snappy.FRAMED_MAGIC + b"".join(chunks)


def compressed_chunk(data: bytes, *, crc: int | None = None) -> bytes:
    checksum = snappy.masked_crc32c(data) if crc is None else crc
    return chunk(0x00, checksum.to_bytes(4, "little") + encode_literals(data))


def literal(data: bytes) -> bytes:
    """One literal element: short lengths in the tag, longer ones in 1 to 4 extra bytes."""
    n = len(data) - 1
    if n < 60:
        return bytes([n << 2]) + data
    extra = (n.bit_length() + 7) // 8
    return bytes([(59 + extra) << 2]) + n.to_bytes(extra, "little") + data


def chunk(kind: int, body: bytes) -> bytes:
    return bytes([kind]) + len(body).to_bytes(3, "little") + body
