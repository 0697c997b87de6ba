"""updater.config.trustkeys: ``--trust-key`` takes the key's base64 line or its ``.pub`` file;
anything else is one usage error naming what was given."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.feeds import KEYS
from updater.config.trustkeys import trusted_key
from updater.errors import UsageError


def test_the_key_line_is_taken_as_it_is() -> None:
    assert trusted_key(KEYS.public_key) == KEYS.public_key


def test_a_pub_file_gives_its_key_line(tmp_path: Path) -> None:
    pub = tmp_path / "minisign.pub"
    pub.write_text(f"untrusted comment: minisign public key\n\n{KEYS.public_key}\n")
    assert trusted_key(str(pub)) == KEYS.public_key


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ("RWnot-a-key", "not a minisign public key"),
        ("/no/such/key.pub", "there is no such file"),
        ("", "not a minisign public key"),
    ],
)
def test_anything_else_is_one_usage_error(given: str, words: str) -> None:
    with pytest.raises(UsageError, match=words) as caught:
        trusted_key(given)
    assert caught.value.hint and ".pub" in caught.value.hint


def test_a_file_that_holds_no_key_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "notes.pub"
    other.write_text("untrusted comment: nothing else\n")
    with pytest.raises(UsageError, match="not a minisign public key"):
        trusted_key(str(other))
    big = tmp_path / "big.pub"
    big.write_bytes(b"x" * 10_000)
    with pytest.raises(UsageError, match="--trust-key"):
        trusted_key(str(big))
