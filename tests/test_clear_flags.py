"""Flags and errors that said something else than they meant (issue 38, items 6-8).

- ``--hold`` needs a unit (``--hold 7`` held for seven seconds); ``--max-age`` keeps a bare
  number as seconds, and both help texts say so.
- A directory you own whose mode forbids writing is not blamed on its owner (you).
- ``--trust-key`` takes the key line or the path of its ``.pub`` file; anything else is a
  usage error (exit 2); a release signed by another key names both keys and says
  "misconfigured key or tampering".

The command run in this process (tests/support/inprocess.py) for what it answers, installed
builds as real processes; the rules in-process.
"""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.inprocess import run_in_process
from tests.support.releases import Feed, make_keypair, make_release
from updater.cli.app import app
from updater.core.permissions import unwritable
from updater.timestamps import parse_duration


@pytest.fixture(scope="module")
def feed(tmp_path_factory: pytest.TempPathFactory) -> Feed:
    root = tmp_path_factory.mktemp("feed")
    keypair = make_keypair(root / "keys")
    feed = Feed(path=root / "feed", keypair=keypair)
    feed.releases["9.0.0"] = make_release(
        feed.path, "9.0.0", protocol_version=1, keypair=keypair, signed_at=int(time.time()) - 60
    )
    return feed


# -- item 6: durations -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "required", "seconds"),
    [
        ("7", False, 7.0),  # --max-age: a bare number is seconds
        ("90s", True, 90.0),
        ("7d", True, 7 * 86400.0),
        ("1h30m", True, 5400.0),
        ("7", True, None),  # --hold: refused
        ("1h30", True, None),
    ],
)
def test_a_unit_is_required_where_asked(text: str, required: bool, seconds: float | None) -> None:
    if seconds is None:
        with pytest.raises(ValueError, match=r"has no unit: give one, e\.g\. 7d or 12h"):
            parse_duration(text, unit_required=required)
    else:
        assert parse_duration(text, unit_required=required) == seconds


def test_a_bare_hold_is_refused_and_nothing_is_held(sandbox_env: dict[str, str]) -> None:
    result = run_in_process(["update", "--hold", "7"], sandbox_env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "mux: error: --hold: '7' has no unit: give one, e.g. 7d or 12h"
    ]
    assert not (Path(sandbox_env["XDG_STATE_HOME"]) / "mux" / "update-state.json").exists()


def test_both_help_texts_say_how_a_bare_number_is_read() -> None:
    text = " ".join(
        CliRunner().invoke(app, ["update", "--help"], terminal_width=200).output.split()
    )
    assert "a bare number is seconds" in text  # --max-age
    assert "a bare number is refused" in text  # --hold


# -- item 7: who can fix a directory that cannot be written ----------------------------------


@pytest.mark.parametrize(
    ("yours", "mode", "message", "hint"),
    [
        (True, 0o40555, "you own it, but its mode 0555 lets no one write it", "chmod u+w /h"),
        (True, 0o40755, "although you own it and its mode 0755 allows it", "lsattr"),
        (False, 0o40755, "(owned by alice)", "run the update as alice"),
    ],
)
def test_the_advice_tells_mode_from_owner(yours: bool, mode: int, message: str, hint: str) -> None:
    said, advice = unwritable("/h", owner="alice", yours=yours, mode=mode)
    assert message in said and hint in advice
    assert ("alice" in said + advice) is (not yours)
    assert stat.S_ISDIR(mode)


# -- item 8: --trust-key ---------------------------------------------------------------------


def test_trust_key_takes_a_pub_file_or_its_line(feed: Feed, sandbox_env: dict[str, str]) -> None:
    args = ["update", "--check", "--json", "--source", str(feed.path), "--trust-key"]
    for key in (str(feed.keypair.public_key_path), feed.keypair.public_key):
        result = run_in_process([*args, key], sandbox_env)
        assert result.returncode == 10, result.stderr
        assert json.loads(result.stdout)["latest"]["version"] == "9.0.0"


@pytest.mark.parametrize(
    "key", ["/nowhere/mirror.pub", "RWQnot-a-key", "{feed}/v9.0.0/manifest.json"]
)
def test_a_bad_trust_key_is_a_usage_error(
    key: str, feed: Feed, sandbox_env: dict[str, str]
) -> None:
    key = key.format(feed=feed.path)
    result = run_in_process(
        ["update", "--check", "--source", str(feed.path), "--trust-key", key], sandbox_env
    )
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"mux: error: --trust-key {key}: ") and ".pub file" in line, line


def test_a_wrong_key_names_both_keys(
    feed: Feed, sandbox_env: dict[str, str], tmp_path: Path
) -> None:
    other = make_keypair(tmp_path / "other", name="other")
    args = ["update", "--check", "--source", str(feed.path), "--trust-key"]
    result = run_in_process([*args, str(other.public_key_path)], sandbox_env)
    assert result.returncode == 3, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert feed.keypair.key_id in line and other.key_id in line, line
    assert "a misconfigured key or tampering" in line
