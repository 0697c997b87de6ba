"""updater.config.rollout_bucket: the machine's bucket is drawn once and kept; a file that is
not a bucket is drawn again; a state dir that cannot hold one gives none."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from updater.config.rollout_bucket import BUCKETS, bucket_path, machine_bucket, parse


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"0\n", 0),
        (b"9999", 9999),
        (b" 42 \n", 42),
        (b"10000", None),
        (b"-1", None),
        (b"", None),
        (b"4 2", None),
        ("٤٢".encode(), None),  # digits, but not ASCII ones
        (b"000001", None),
    ],
)
def test_a_bucket_file_is_read_strictly(raw: bytes, expected: int | None) -> None:
    assert parse(raw) == expected


def test_the_bucket_is_drawn_once_and_kept(tmp_path: Path) -> None:
    first = machine_bucket(tmp_path)
    assert first is not None and 0 <= first < BUCKETS
    assert bucket_path(tmp_path).read_text() == f"{first}\n"
    assert all(machine_bucket(tmp_path) == first for _ in range(5))
    assert sorted(os.listdir(tmp_path)) == ["rollout-bucket"]  # no temporary file left


def test_a_file_that_is_not_a_bucket_is_drawn_again(tmp_path: Path) -> None:
    bucket_path(tmp_path).write_text("garbage\n")
    drawn = machine_bucket(tmp_path)
    assert drawn is not None and bucket_path(tmp_path).read_text() == f"{drawn}\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_state_dir_that_cannot_hold_one_gives_none(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        assert machine_bucket(tmp_path / "state") is None
    finally:
        tmp_path.chmod(0o700)


def test_a_state_path_that_is_a_file_gives_none(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("a file where the folder should be")
    assert machine_bucket(tmp_path / "state") is None
