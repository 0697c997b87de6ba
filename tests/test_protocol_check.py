"""release/upkeep/protocol.py: a protocol change without a PROTOCOL_VERSION bump fails."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from release.upkeep.protocol import (
    LOCK_PATH,
    PROTOCOL_BEARING_FILES,
    VERSION_FILE,
    ProtocolError,
    check_protocol,
    file_fingerprint,
    protocol_state,
    read_sources,
    record_protocol,
)
from updater.protocol import PROTOCOL_VERSION

REPO_ROOT = Path(__file__).resolve().parent.parent
# The protocol version the checkout records: each bump moves it, the rules stay the same.
CURRENT = PROTOCOL_VERSION
BUMP_HINT = "bump PROTOCOL_VERSION and run mux-release protocol --record"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the protocol-bearing files with a freshly recorded lock (no git)."""
    root = tmp_path / "checkout"
    for relative in PROTOCOL_BEARING_FILES:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO_ROOT / relative, root / relative)
    (root / LOCK_PATH).parent.mkdir(parents=True, exist_ok=True)
    record_protocol(root)
    return root


def edit(root: Path, old: str, new: str, *, path: str = VERSION_FILE) -> None:
    target = root / path
    text = target.read_text()
    assert old in text, old
    target.write_text(text.replace(old, new, 1))


def bump(root: Path) -> int:
    target = root / VERSION_FILE
    text = target.read_text()
    current = int(re.search(r"^PROTOCOL_VERSION = (\d+)$", text, re.M).group(1))  # type: ignore[union-attr]
    target.write_text(
        text.replace(f"PROTOCOL_VERSION = {current}", f"PROTOCOL_VERSION = {current + 1}")
    )
    return current + 1


CHANGE = ('STATUS_PATH = "/api/status"', 'STATUS_PATH = "/api/v2/status"')


def test_the_repository_lock_is_current() -> None:
    # What CI's `mux-release protocol` enforces on every change to updater/protocol.py.
    report = check_protocol(REPO_ROOT)
    from updater.protocol import PROTOCOL_VERSION

    assert report.current.protocol_version == PROTOCOL_VERSION
    assert report.summary().startswith(f"protocol version {PROTOCOL_VERSION} (fingerprint ")


def test_an_unchanged_copy_passes(tree: Path) -> None:
    assert check_protocol(tree).release_tag is None  # no git here: the lock is the reference


def test_a_change_without_a_bump_fails_and_cannot_be_recorded(tree: Path) -> None:
    lock_before = (tree / LOCK_PATH).read_bytes()
    edit(tree, *CHANGE)
    with pytest.raises(ProtocolError) as caught:
        check_protocol(tree)
    assert caught.value.message == (
        f"updater/protocol.py changed since {LOCK_PATH} was recorded but PROTOCOL_VERSION is "
        f"still {CURRENT}: {BUMP_HINT}"
    )
    with pytest.raises(ProtocolError, match=r"^refusing to record: updater/protocol.py changed"):
        record_protocol(tree)
    assert (tree / LOCK_PATH).read_bytes() == lock_before


def test_a_change_with_a_bump_passes_once_recorded(tree: Path) -> None:
    edit(tree, *CHANGE)
    version = bump(tree)
    with pytest.raises(
        ProtocolError, match=f"PROTOCOL_VERSION is {version} but .* records {CURRENT}: run"
    ):
        check_protocol(tree)
    state = record_protocol(tree)
    assert state.protocol_version == version
    assert json.loads((tree / LOCK_PATH).read_text())["protocol_version"] == version
    assert check_protocol(tree).current == state


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('SERVICE_NAME = "mux"\n', 'SERVICE_NAME = "mux"  # the service name\n# a comment\n'),
        ('    """The bytes a server answered', '    """Reworded: the bytes a server answered'),
        (
            "def to_json(self) -> dict[str, Any]:",
            "def to_json(\n        self,\n    ) -> dict[str, Any]:",
        ),
    ],
    ids=["comment", "docstring", "formatting"],
)
def test_comments_docstrings_and_layout_do_not_count(tree: Path, old: str, new: str) -> None:
    before = file_fingerprint((tree / VERSION_FILE).read_text(), path=VERSION_FILE)
    edit(tree, old, new)
    assert file_fingerprint((tree / VERSION_FILE).read_text(), path=VERSION_FILE) == before
    check_protocol(tree)


def test_a_version_going_back_fails(tree: Path) -> None:
    bump(tree)
    record_protocol(tree)
    edit(tree, f"PROTOCOL_VERSION = {CURRENT + 1}", f"PROTOCOL_VERSION = {CURRENT}")
    with pytest.raises(
        ProtocolError, match=f"PROTOCOL_VERSION went back from {CURRENT + 1} to {CURRENT}"
    ):
        check_protocol(tree)


def test_a_missing_or_broken_lock_says_how_to_record(tree: Path) -> None:
    (tree / LOCK_PATH).write_text("{not json")
    with pytest.raises(ProtocolError, match="is not valid JSON"):
        check_protocol(tree)
    (tree / LOCK_PATH).unlink()
    with pytest.raises(ProtocolError) as caught:
        check_protocol(tree)
    assert caught.value.hint == "run mux-release protocol --record"


def test_a_version_that_is_not_a_literal_is_refused(tree: Path) -> None:
    edit(tree, f"PROTOCOL_VERSION = {CURRENT}", f"PROTOCOL_VERSION = {CURRENT} + 0")
    with pytest.raises(ProtocolError, match="must be assigned an integer literal"):
        check_protocol(tree)


def git(root: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    subprocess.run(
        ["git", "-C", str(root), "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false", *args],
        check=True,
        capture_output=True,
        env=env,
        timeout=30,
    )


def test_the_last_release_tag_is_checked_even_when_the_lock_was_hand_edited(tree: Path) -> None:
    git(tree, "init", "-q", "-b", "main")
    git(tree, "add", ".")
    git(tree, "commit", "-q", "-m", "release")
    git(tree, "tag", "v0.1.0")
    assert check_protocol(tree).summary().endswith("unchanged since v0.1.0)")

    # Someone changes the protocol and rewrites the lock by hand instead of bumping.
    edit(tree, *CHANGE)
    (tree / LOCK_PATH).unlink()
    with pytest.raises(ProtocolError, match=r"^refusing to record: .* since release v0.1.0"):
        record_protocol(tree)  # with no lock to compare, only the tag catches it
    hand_written = protocol_state(read_sources(tree))
    (tree / LOCK_PATH).write_text(hand_written.to_json())
    with pytest.raises(ProtocolError) as caught:
        check_protocol(tree)
    assert caught.value.message == (
        f"updater/protocol.py changed since release v0.1.0 but PROTOCOL_VERSION is still "
        f"{CURRENT}: "
        f"{BUMP_HINT}"
    )

    bump(tree)
    record_protocol(tree)
    assert check_protocol(tree).current.protocol_version == CURRENT + 1


def test_the_command_prints_one_line_and_exits_1(tree: Path) -> None:
    command = [
        sys.executable,
        "-c",
        "from release.cli import main; main()",
        "protocol",
        "--root",
        str(tree),
    ]
    passing = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert passing.returncode == 0, passing.stderr
    assert passing.stdout.startswith(f"protocol version {CURRENT} (fingerprint ")

    edit(tree, *CHANGE)
    failing = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert failing.returncode == 1
    assert failing.stderr.count("\n") == 1 and BUMP_HINT in failing.stderr
    assert "Traceback" not in failing.stderr


ADDITIVE = (
    '        return {"type": self.type, "data": self.data',
    '        return {"type": self.type, "note": None, "data": self.data',
)


def test_a_change_recorded_as_compatible_passes_and_the_next_one_does_not(tree: Path) -> None:
    edit(tree, *ADDITIVE)
    with pytest.raises(ProtocolError, match="PROTOCOL_VERSION is still"):
        check_protocol(tree)
    state = record_protocol(tree, compatible="an optional field old readers ignore")
    assert state.protocol_version == CURRENT
    lock = json.loads((tree / LOCK_PATH).read_text())
    assert [c["reason"] for c in lock["compatible"]] == ["an optional field old readers ignore"]
    assert check_protocol(tree).current.fingerprint == lock["fingerprint"]
    edit(tree, *CHANGE)  # another change is judged on its own
    with pytest.raises(ProtocolError, match="PROTOCOL_VERSION is still"):
        check_protocol(tree)


def test_a_compatible_change_passes_the_last_release_tag_through_the_lock(tree: Path) -> None:
    git(tree, "init", "-q", "-b", "main")
    git(tree, "add", ".")
    git(tree, "commit", "-q", "-m", "release")
    git(tree, "tag", "v0.1.0")
    edit(tree, *ADDITIVE)
    with pytest.raises(ProtocolError, match=r"since release v0\.1\.0"):
        record_protocol(tree)
    record_protocol(tree, compatible="an optional field old readers ignore")
    assert check_protocol(tree).summary().endswith("unchanged since v0.1.0)")
    bump(tree)  # a bump is still a bump
    with pytest.raises(ProtocolError, match="--compatible is for a change without a bump"):
        record_protocol(tree, compatible="no")
