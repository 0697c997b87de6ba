"""updater.trust.attestation_roots: the Sigstore instance an attestation must chain to, from a
file (a private instance's trusted root; a throwaway one here) or, offline, the copy sigstore
ships; a file that is no trusted root is one verification error naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from release.rehearsal.fake_sigstore import FakeSigstore
from updater.errors import VerificationError
from updater.trust.attestation_roots import load_verifier


@pytest.fixture(scope="module")
def sigstore(tmp_path_factory: pytest.TempPathFactory) -> FakeSigstore:
    return FakeSigstore.create(tmp_path_factory.mktemp("sigstore"))


def test_a_private_instance_s_root_is_read_from_its_file(sigstore: FakeSigstore) -> None:
    warned: list[str] = []
    verifier, description = load_verifier(sigstore.trusted_root_path, True, 1.0, warned.append)
    assert verifier is not None and description == f"file:{sigstore.trusted_root_path}"
    assert warned == []


def test_offline_the_root_sigstore_ships_is_used(tmp_path: Path) -> None:
    warned: list[str] = []
    verifier, description = load_verifier(None, True, 1.0, warned.append)
    assert verifier is not None and description


@pytest.mark.parametrize(
    ("content", "words"),
    [(None, "cannot read trusted root"), (b"\xff", "cannot read"), (b"{}", "not a Sigstore")],
)
def test_a_file_that_is_no_trusted_root_is_refused(
    tmp_path: Path, content: bytes | None, words: str
) -> None:
    path = tmp_path / "root.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(VerificationError, match=words) as caught:
        load_verifier(path, True, 1.0, lambda _: None)
    assert str(path) in caught.value.message
