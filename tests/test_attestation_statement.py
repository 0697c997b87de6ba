"""The attestation layer's own checks, in process: the in-toto statement sigstore-python leaves
to its caller (updater.trust.attestation_statement), the bundles a release's attestation comes
in (updater.trust.attestation_bundles), and how what the signer wrote is shown
(updater.trust.attestation_text). The whole layer against real bundles from a throwaway
Sigstore instance is in test_attestation.py."""

from __future__ import annotations

import json

import pytest

from updater.errors import VerificationError
from updater.trust.attestation_bundles import (
    MAX_BUNDLES,
    Unparsable,
    bundle_candidates,
    split_bundles,
)
from updater.trust.attestation_report import AttestedSubject
from updater.trust.attestation_statement import (
    IN_TOTO_PAYLOAD_TYPE,
    IN_TOTO_STATEMENT_V1,
    SLSA_PROVENANCE_V1,
    check_statement,
    expected_digests,
)
from updater.trust.attestation_text import MAX_DETAIL, one_line, shown, strip_prefix

A, B = "a" * 64, "b" * 64


def statement(subjects: list[dict], **fields: object) -> bytes:
    doc = {"_type": IN_TOTO_STATEMENT_V1, "predicateType": SLSA_PROVENANCE_V1, "subject": subjects}
    return json.dumps({**doc, **fields}).encode()


def test_expected_digests_are_sha256_hex_once_each() -> None:
    assert expected_digests(f"sha256:{A.upper()}") == (A,)
    assert expected_digests([A, B, A]) == (A, B)
    with pytest.raises(VerificationError, match="not a sha256 hex digest"):
        expected_digests("md5:abc")
    with pytest.raises(VerificationError, match="no sha256 digest given"):
        expected_digests([])


def test_a_statement_that_lists_the_digest_names_its_subject() -> None:
    payload = statement([{"name": "mux.tar.gz", "digest": {"sha256": A}}, {"name": "x"}])
    assert check_statement(IN_TOTO_PAYLOAD_TYPE, payload, [A]) == (
        SLSA_PROVENANCE_V1,
        (AttestedSubject("mux.tar.gz", A),),
    )
    named = check_statement(IN_TOTO_PAYLOAD_TYPE, payload, [A], {A: "mux.tar.gz"})
    assert named[1] == (AttestedSubject("mux.tar.gz", A),)


@pytest.mark.parametrize(
    ("payload_type", "payload", "words"),
    [
        ("text/plain", statement([]), "payload type is"),
        (IN_TOTO_PAYLOAD_TYPE, b"[1]", "not a JSON object"),
        (IN_TOTO_PAYLOAD_TYPE, b"[" * 100_000, "not a JSON object"),
        (IN_TOTO_PAYLOAD_TYPE, statement([], _type="https://in-toto.io/Statement/v0.1"), "type"),
        (IN_TOTO_PAYLOAD_TYPE, statement([], predicateType="x"), "predicate type is"),
        (IN_TOTO_PAYLOAD_TYPE, statement([{"name": "o", "digest": {"sha256": B}}]), "mismatch"),
    ],
)
def test_a_statement_that_does_not_vouch_is_refused(
    payload_type: str, payload: bytes, words: str
) -> None:
    with pytest.raises(VerificationError, match=words):
        check_statement(payload_type, payload, [A])


def test_a_digest_attested_under_another_name_is_refused() -> None:
    payload = statement([{"name": "other.tar.gz", "digest": {"sha256": A}}])
    with pytest.raises(VerificationError, match=r"not as mux\.tar\.gz"):
        check_statement(IN_TOTO_PAYLOAD_TYPE, payload, [A], {A: "mux.tar.gz"})


def test_the_signer_s_words_are_shown_on_one_safe_line() -> None:
    assert shown("\x1b[2Jhi") == "\\x1b[2Jhi"
    assert len(shown("x" * 1000)) == MAX_DETAIL and shown("x" * 1000).endswith("...")
    assert one_line(ValueError("two\n  lines")) == "two lines"
    assert one_line(ValueError()) == "ValueError"
    assert strip_prefix("attestation: bad") == "bad"


def test_a_bundle_is_one_json_document_or_json_lines() -> None:
    assert split_bundles(b'\xef\xbb\xbf{"a": 1}') == [("bundle", {"a": 1})]
    assert split_bundles(b'{"a": 1}\n\n{"b": 2}\n') == [("line 1", {"a": 1}), ("line 3", {"b": 2})]
    lines = split_bundles(b'{"a": 1}\nnot json\n')
    assert lines[1] == ("line 2", Unparsable("bundle is not valid JSON"))
    for raw, words in [
        (b"", "empty"),
        (b"\xff", "not UTF-8"),
        (b'{"a": ', "not valid JSON"),
        (b"\n".join([b"{}"] * (MAX_BUNDLES + 1)), "more than"),
    ]:
        with pytest.raises(VerificationError, match=words):
            split_bundles(raw)


def test_bundles_from_the_api_are_numbered_and_capped() -> None:
    found = bundle_candidates([b"{}", b"garbage", b"{}\n{}"])
    assert [label for label, _ in found] == [
        "bundle 1",
        "bundle 2",
        "bundle 3 line 1",
        "bundle 3 line 2",
    ]
    assert isinstance(found[1][1], Unparsable)
    with pytest.raises(VerificationError, match="no bundle to verify"):
        bundle_candidates([])
    with pytest.raises(VerificationError, match="more than"):
        bundle_candidates([b"{}"] * (MAX_BUNDLES + 1))
