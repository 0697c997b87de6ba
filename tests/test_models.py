"""Parsers of the release layout: valid documents round-trip, anything else is a ParseError."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from release.publish.formats import format_sha256sums, manifest_document
from tests.support.documents import SHA, manifest_doc
from updater.errors import ParseError
from updater.formats import models
from updater.protocol import StatusLineError, parse_status_line

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


def test_manifest_round_trip_and_unknown_fields_ignored() -> None:
    doc = manifest_doc(future_field={"x": 1})
    manifest = models.parse_manifest(json.dumps(doc).encode())
    assert manifest.version == "0.2.0"
    assert manifest.protocol_version == 25
    asset = manifest.asset_for("x86_64-unknown-linux-gnu")
    assert asset is not None and asset.sha256 == SHA
    assert manifest.asset_for("aarch64-apple-darwin") is None
    again = models.parse_manifest(json.dumps(manifest_document(manifest)).encode())
    assert again == manifest


@pytest.mark.parametrize(
    "overrides",
    [
        {"schema": 2},
        {"version": "not a version"},
        {"protocol_version": "25"},
        {"protocol_version": True},
        {"assets": {}},
        {"assets": [{"name": "../evil", "target": "t", "size": 1, "sha256": SHA}]},
        {"assets": [{"name": "a.tar.gz", "target": "t", "size": -1, "sha256": SHA}]},
        {"assets": [{"name": "a.tar.gz", "target": "t", "size": 1, "sha256": "short"}]},
    ],
)
def test_manifest_rejects_malformed(overrides: dict[str, object]) -> None:
    with pytest.raises(ParseError):
        models.parse_manifest(json.dumps(manifest_doc(**overrides)).encode())


def test_sha256sums_text_and_binary_mode() -> None:
    raw = f"{SHA}  manifest.json\n{'cd' * 32} *mux-a.tar.gz\n".encode()
    assert models.parse_sha256sums(raw) == {"manifest.json": SHA, "mux-a.tar.gz": "cd" * 32}
    assert models.parse_sha256sums(format_sha256sums({"b": SHA, "a": SHA})) == {
        "a": SHA,
        "b": SHA,
    }


@pytest.mark.parametrize(
    "raw",
    [b"", b"nonsense\n", f"{SHA} x\n".encode(), f"{SHA}  ../x\n".encode(), b"\xff\xfe"],
)
def test_sha256sums_rejects_malformed(raw: bytes) -> None:
    with pytest.raises(ParseError):
        models.parse_sha256sums(raw)


def test_releases_json_skips_drafts_and_keeps_prerelease_flag() -> None:
    raw = json.dumps(
        {
            "releases": [
                {"tag": "v0.3.0", "draft": True},
                {"tag": "v0.3.0rc1", "prerelease": True},
                {"tag": "v0.2.0"},
            ]
        }
    ).encode()
    releases = models.parse_releases_json(raw)
    assert [(r.tag, r.prerelease) for r in releases] == [("v0.3.0rc1", True), ("v0.2.0", False)]


@settings(max_examples=300, deadline=None)
@given(st.binary() | json_values.map(lambda v: json.dumps(v).encode()))
def test_parsers_raise_only_parse_error(raw: bytes) -> None:
    for parser in (models.parse_manifest, models.parse_sha256sums, models.parse_releases_json):
        try:
            parser(raw)
        except ParseError:
            pass


@settings(max_examples=300, deadline=None)
@given(
    st.builds(
        lambda doc: json.dumps(doc).encode(),
        st.dictionaries(
            st.sampled_from(["service", "protocol_version", "version", "pid", "started_at", "x"]),
            json_values,
        ),
    )
    | st.binary()
)
def test_status_line_parser_raises_only_its_error(raw: bytes) -> None:
    try:
        status = parse_status_line(raw)
    except StatusLineError as exc:
        assert exc.kind in {"garbage", "foreign", "no-protocol"}
    else:
        assert status.service == "mux"
        assert isinstance(status.protocol_version, int)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.from_regex(r"[0-9a-f]{64}", fullmatch=True),
            st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,30}", fullmatch=True),
        ),
        min_size=1,
        unique_by=lambda pair: pair[1],
    )
)
def test_sha256sums_round_trip(pairs: list[tuple[str, str]]) -> None:
    digests = dict((name, digest) for digest, name in pairs)
    assert models.parse_sha256sums(format_sha256sums(digests)) == digests
