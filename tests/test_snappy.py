"""The pure-Python snappy decoder (updater/formats/snappy.py): block and framed formats, hostile input.

Vectors are built here: a literal-only encoder (valid snappy, never compressing) and copy
elements assembled by hand from the format description, so no snappy library is needed.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.snappy import chunk, compressed_chunk, encode_literals, framed, literal, varint
from updater.errors import ParseError
from updater.formats import snappy
from updater.formats.snappy import SnappyError

MIB = 1024 * 1024


# -- a tiny encoder, from google/snappy format_description.txt ------------------------------------


def copy1(length: int, offset: int) -> bytes:
    assert 4 <= length <= 11 and 0 < offset < 2048
    return bytes([((offset >> 8) << 5) | ((length - 4) << 2) | 1, offset & 0xFF])


def copy2(length: int, offset: int) -> bytes:
    assert 1 <= length <= 64 and 0 < offset < 65536
    return bytes([((length - 1) << 2) | 2]) + offset.to_bytes(2, "little")


def copy4(length: int, offset: int) -> bytes:
    assert 1 <= length <= 64
    return bytes([((length - 1) << 2) | 3]) + offset.to_bytes(4, "little")


def uncompressed_chunk(data: bytes, *, crc: int | None = None) -> bytes:
    checksum = snappy.masked_crc32c(data) if crc is None else crc
    return chunk(0x01, checksum.to_bytes(4, "little") + data)


# -- checksums ---------------------------------------------------------------------------------


def test_crc32c_matches_the_published_check_values() -> None:
    # RFC 3720 §B.4 and the CRC catalogue's CRC-32/ISCSI check value.
    assert snappy.crc32c(b"123456789") == 0xE3069283
    assert snappy.crc32c(b"") == 0
    assert snappy.crc32c(bytes(32)) == 0x8A9136AA
    assert snappy.crc32c(b"\xff" * 32) == 0x62A8AB43


def test_masked_crc_rotates_and_offsets() -> None:
    crc = snappy.crc32c(b"mux")
    expected = ((crc >> 15 | crc << 17) + 0xA282EAD8) & 0xFFFFFFFF
    assert snappy.masked_crc32c(b"mux") == expected != crc


# -- block format ------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 59, 60, 61, 256, 257, 65536, 70000])
def test_literal_lengths_of_every_width_round_trip(size: int) -> None:
    data = os.urandom(size)
    block = encode_literals(data, piece=max(size, 1))
    assert snappy.decompress(block, max_size=MIB) == data


def test_literal_with_a_four_byte_length() -> None:
    data = os.urandom(1 << 24)  # length - 1 needs 3 bytes; 1<<24 + 1 would need 4
    data += b"x"
    block = varint(len(data)) + literal(data)
    assert block[len(varint(len(data)))] >> 2 == 63  # tag says: 4 length bytes follow
    assert snappy.decompress(block, max_size=32 * MIB) == data


def test_copy_with_one_byte_offset() -> None:
    block = varint(13) + literal(b"abcdefgh") + copy1(5, 8)
    assert snappy.decompress(block, max_size=MIB) == b"abcdefghabcde"


def test_copy_with_one_byte_offset_uses_the_tag_high_bits() -> None:
    head = os.urandom(1500)
    block = varint(1511) + literal(head) + copy1(11, 1300)
    assert snappy.decompress(block, max_size=MIB) == head + head[200:211]


def test_copy_with_two_byte_offset() -> None:
    head = os.urandom(3000)
    block = varint(3064) + literal(head) + copy2(64, 3000)
    assert snappy.decompress(block, max_size=MIB) == head + head[:64]


def test_copy_with_four_byte_offset() -> None:
    head = os.urandom(70000)
    block = varint(70001) + literal(head) + copy4(1, 70000)
    assert snappy.decompress(block, max_size=MIB) == head + head[:1]


def test_overlapping_copies_repeat_the_tail() -> None:
    # offset 1 is run-length encoding; offset 3 < length repeats a 3-byte pattern.
    block = varint(1 + 10 + 3 + 20) + literal(b"a") + copy1(10, 1) + literal(b"xyz")
    block += copy2(20, 3)
    assert snappy.decompress(block, max_size=MIB) == b"a" * 11 + b"xyz" * 7 + b"xy"


def test_copy_after_copy_reads_copied_bytes() -> None:
    block = varint(2 + 6 + 4) + literal(b"ab") + copy1(6, 2) + copy4(4, 5)
    assert snappy.decompress(block, max_size=MIB) == b"abababab" + b"babab"[:4]


@pytest.mark.parametrize(
    ("block", "reason"),
    [
        (b"", "truncated inside its length preamble"),
        (b"\x80\x80", "truncated inside its length preamble"),
        (b"\xff\xff\xff\xff\xff\x01", "invalid length preamble"),
        (b"\xff\xff\xff\xff\x7f", "invalid length preamble"),  # 35 bits
        (varint(5) + literal(b"abcde")[:-1], "truncated inside a literal"),
        (varint(100) + bytes([62 << 2, 1]), "truncated inside a literal length"),
        (varint(5) + literal(b"abc"), "truncated: 3 of the 5 bytes"),
        (varint(2) + literal(b"abc"), "longer than its preamble"),
        (varint(8) + literal(b"abcd") + copy1(4, 5), "offset 5, outside the output"),
        (varint(8) + literal(b"abcd") + bytes([3 << 2 | 2, 0, 0]), "offset 0,"),
        (varint(8) + literal(b"abcd") + copy2(4, 4)[:-1], "truncated inside a copy"),
        (varint(8) + literal(b"abcd") + copy4(5, 4), "longer than its preamble"),
        (varint(4) + copy1(4, 1), "offset 1, outside the output"),
    ],
)
def test_malformed_blocks_are_one_error(block: bytes, reason: str) -> None:
    with pytest.raises(SnappyError, match=reason):
        snappy.decompress_block(block, max_size=MIB)


def test_truncating_a_valid_block_anywhere_is_an_error() -> None:
    block = varint(30) + literal(b"0123456789") + copy2(20, 10)
    assert snappy.decompress(block, max_size=MIB) == b"0123456789" * 3
    for cut in range(len(block)):
        with pytest.raises(SnappyError):
            snappy.decompress_block(block[:cut], max_size=MIB)


def test_bomb_is_refused_from_its_preamble_before_allocating() -> None:
    # 4 GiB declared by a 5-byte preamble, followed by a 64-byte copy of nothing.
    bomb = varint(0xFFFFFFFF) + literal(b"a") + copy2(64, 1) * 1000
    with pytest.raises(SnappyError, match=r"declares 4294967295 bytes, more than the 16777216"):
        snappy.decompress(bomb, max_size=16 * MIB)


def test_cap_is_inclusive() -> None:
    data = b"z" * 1000
    block = varint(1000) + literal(b"z") + copy2(64, 1) * 15 + copy2(39, 1)
    assert snappy.decompress(block, max_size=1000) == data
    with pytest.raises(SnappyError, match="more than the 999 allowed"):
        snappy.decompress(block, max_size=999)


def test_errors_are_parse_errors_with_one_line() -> None:
    with pytest.raises(ParseError) as caught:
        snappy.decompress(b"\x05\x00", max_size=MIB)
    assert "\n" not in str(caught.value)


# -- framed format -----------------------------------------------------------------------------


def test_framed_stream_with_every_chunk_kind() -> None:
    one, two = os.urandom(65536), b"second chunk"
    stream = framed(
        compressed_chunk(one),
        chunk(0xFE, bytes(7)),  # padding
        uncompressed_chunk(two),
        chunk(0x80, b"skippable"),
        chunk(0xFF, b"sNaPpY"),  # a concatenated stream repeats the identifier
        compressed_chunk(b""),
    )
    assert snappy.decompress(stream, max_size=MIB) == one + two


def test_empty_framed_stream_is_empty() -> None:
    assert snappy.decompress(framed(), max_size=MIB) == b""


@pytest.mark.parametrize("make", [compressed_chunk, uncompressed_chunk])
def test_framed_bad_crc_is_refused(make) -> None:
    good = snappy.masked_crc32c(b"payload")
    with pytest.raises(SnappyError, match="fails its CRC-32C check"):
        snappy.decompress(framed(make(b"payload", crc=good ^ 1)), max_size=MIB)


def test_framed_crc_is_castagnoli_masked_not_plain() -> None:
    import zlib

    for crc in (snappy.crc32c(b"payload"), zlib.crc32(b"payload")):
        with pytest.raises(SnappyError, match="CRC-32C"):
            snappy.decompress(framed(uncompressed_chunk(b"payload", crc=crc)), max_size=MIB)


@pytest.mark.parametrize(
    ("stream", "reason"),
    [
        (framed(chunk(0x02, b"")), "reserved unskippable chunk type 0x02"),
        (framed(chunk(0x7F, b"x")), "reserved unskippable chunk type 0x7f"),
        (framed(chunk(0xFF, b"sNaPpX")), "corrupt stream identifier"),
        (framed(chunk(0x00, b"abc")), "too short for its checksum"),
        (framed(chunk(0x01, b"")), "too short for its checksum"),
        (framed(uncompressed_chunk(bytes(65537))), "holds 65537 bytes, more than 65536"),
        (framed(b"\x00\x10"), "truncated inside a chunk header"),
        (framed(chunk(0x01, b"abcdef")[:-1]), "a chunk of 6 bytes is cut short"),
    ],
)
def test_malformed_streams_are_one_error(stream: bytes, reason: str) -> None:
    with pytest.raises(SnappyError, match=reason):
        snappy.decompress_framed(stream, max_size=MIB)


def test_framed_compressed_chunk_declaring_too_much_is_refused() -> None:
    block = varint(65537) + literal(b"a") + copy2(64, 1)
    stream = framed(chunk(0x00, bytes(4) + block))
    with pytest.raises(SnappyError, match="more than 65536"):
        snappy.decompress(stream, max_size=MIB)


def test_framed_bomb_stops_at_the_cap() -> None:
    piece = bytes(65536)
    one = compressed_chunk(piece)
    with pytest.raises(SnappyError, match="more than the 200000 bytes allowed"):
        snappy.decompress(framed(*[one] * 4), max_size=200_000)
    assert len(snappy.decompress(framed(*[one] * 3), max_size=200_000)) == 3 * 65536


def test_truncating_a_valid_stream_anywhere_but_a_chunk_boundary_is_an_error() -> None:
    stream = framed(compressed_chunk(b"hello, mux"), uncompressed_chunk(b"bye"))
    boundaries = {10, 10 + 4 + 4 + len(encode_literals(b"hello, mux")), len(stream)}
    for cut in range(len(snappy.FRAMED_MAGIC), len(stream)):
        if cut in boundaries:
            continue
        with pytest.raises(SnappyError):
            snappy.decompress_framed(stream[:cut], max_size=MIB)


def test_block_decoder_is_not_fooled_by_a_framed_prefix() -> None:
    with pytest.raises(SnappyError, match="sNaPpY"):
        snappy.decompress_framed(encode_literals(b"abc"), max_size=MIB)


# -- properties --------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_only_raise_snappy_error(data: bytes) -> None:
    for candidate in (data, snappy.FRAMED_MAGIC + data):
        try:
            result = snappy.decompress(candidate, max_size=4096)
        except SnappyError:
            continue
        assert len(result) <= 4096


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=1, max_value=64))
def test_literal_encoding_round_trips(data: bytes, piece: int) -> None:
    assert snappy.decompress(encode_literals(data, piece=piece), max_size=4096) == data
    stream = framed(compressed_chunk(data), uncompressed_chunk(data[::-1]))
    assert snappy.decompress(stream, max_size=4096) == data + data[::-1]


@settings(max_examples=100, deadline=None)
@given(
    st.binary(min_size=1, max_size=50),
    st.lists(st.tuples(st.integers(1, 64), st.integers(1, 200)), max_size=20),
)
def test_copies_match_a_byte_by_byte_reference(head: bytes, copies: list[tuple[int, int]]) -> None:
    expected = bytearray(head)
    body = encode_literals(head)[len(varint(len(head))) :]
    for length, wanted in copies:
        offset = min(wanted, len(expected))
        for _ in range(length):  # the format's definition: one byte at a time
            expected.append(expected[-offset])
        if 4 <= length <= 11 and offset % 3 == 0:
            body += copy1(length, offset)
        else:
            body += copy2(length, offset) if offset % 2 else copy4(length, offset)
    block = varint(len(expected)) + body
    assert snappy.decompress(block, max_size=1 << 16) == bytes(expected)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0), st.integers(min_value=0, max_value=255), st.booleans())
def test_corrupting_one_byte_of_a_valid_input_only_raises_snappy_error(
    where: int, value: int, as_stream: bool
) -> None:
    block = varint(2 + 6 + 4 + 70) + literal(b"ab") + copy1(6, 2) + copy4(4, 5)
    block += literal(bytes(range(61))) + copy2(9, 40)
    data = framed(chunk(0x00, snappy.masked_crc32c(b"").to_bytes(4, "little") + block))
    data = data if as_stream else block
    corrupt = bytearray(data)
    corrupt[where % len(corrupt)] = value
    try:
        snappy.decompress(bytes(corrupt), max_size=4096)
    except SnappyError:
        pass
