"""The commands mux prints as next steps work as printed (issue 38, item 2).

A check run with ``--source`` (and ``--trust-key``, ``--home``, ``--pre``) says how to install
with those options; the printed command, run as printed, installs; the downgrade hint
carries them too and the rollback hint only what a rollback takes; a development checkout is
told no ``mux update`` (``install_command: null``) and why. Real processes: the installed mux
and the development one; the quoting in-process.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest

from tests.support.inprocess import run_in_process
from tests.support.installs import Install, bootstrap
from tests.support.processes import run_mux
from tests.support.releases import Feed, signed_pair
from updater.core.nextstep import for_install_only, mux_update, quote

OLD, NEW = "0.1.0", "0.2.0"


@pytest.fixture(scope="module")
def feed(tmp_path_factory: pytest.TempPathFactory) -> Feed:
    return signed_pair(tmp_path_factory.mktemp("feed"), OLD, NEW)


@pytest.fixture
def installed(feed: Feed, sandbox_env: dict[str, str], tmp_path: Path) -> Install:
    """OLD, installed from the feed folder (which its record remembers)."""
    return bootstrap(
        tmp_path,
        sandbox_env,
        source=str(feed.path),
        version=OLD,
        public_key=feed.keypair.public_key,
    )


def test_the_printed_install_command_carries_the_source_and_works(
    installed: Install, feed: Feed, tmp_path: Path
) -> None:
    other = tmp_path / "other feed"  # a space: the printed command quotes it
    shutil.copytree(feed.path, other)
    env = {k: v for k, v in installed.env.items() if k != "MUX_UPDATE_SOURCE"}
    mux = [str(installed.mux)]
    checked = run_mux(["update", "--check", "--json", "--source", str(other)], env, executable=mux)
    assert checked.returncode == 10, checked.stderr
    command = json.loads(checked.stdout)["install_command"]
    assert command == f"mux update --source '{other}'"
    text = run_mux(["update", "--check", "--source", str(other)], env, executable=mux).stdout
    assert f"install it with: {command}" in text

    done = run_mux(shlex.split(command)[1:], env, executable=mux, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert installed.active() == NEW
    assert f"previous version {OLD} kept: mux update --rollback\n" in done.stdout + "\n"

    back = run_mux(["update", "--version", OLD, "--source", str(other)], env, executable=mux)
    assert back.returncode == 3, back.stderr  # signed before the installed one
    assert f"mux update --version {OLD} --allow-downgrade --source '{other}'" in back.stderr
    assert "(mux update --rollback returns" in back.stderr  # a rollback reads no source


def test_a_development_checkout_is_told_no_mux_update(
    feed: Feed, sandbox_env: dict[str, str]
) -> None:
    args = ["update", "--check", "--json", "--source", str(feed.path)]
    checked = run_in_process([*args, "--trust-key", feed.keypair.public_key], sandbox_env)
    assert checked.returncode == 10, checked.stderr
    doc = json.loads(checked.stdout)
    assert doc["install_command"] is None
    assert any("development checkout" in note for note in doc["notes"]), doc["notes"]


@pytest.mark.parametrize(
    ("args", "carried", "expected"),
    [
        ((), (), "mux update"),
        (
            ("--version", "1.2.0"),
            ("--source", "/srv/feed"),
            "mux update --version 1.2.0 --source /srv/feed",
        ),
        ((), ("--trust-key", "RWQab+c/d="), "mux update --trust-key RWQab+c/d="),
        ((), ("--home", "/home/a b"), "mux update --home '/home/a b'"),
        ((), ("--source", "it's"), "mux update --source 'it'\"'\"'s'"),
        ((), ("--source", ""), "mux update --source ''"),
    ],
)
def test_a_next_step_is_quoted_for_a_shell(
    args: tuple[str, ...], carried: tuple[str, ...], expected: str
) -> None:
    command = mux_update(*args, carried=carried)
    assert command == expected
    assert shlex.split(command) == ["mux", "update", *args, *carried]
    assert quote("plain") == "plain"


def test_a_rollback_carries_only_the_install() -> None:
    carried = ("--source", "/srv/feed", "--home", "/opt/mux", "--trust-key", "RWQk", "--pre")
    assert for_install_only(carried) == ("--home", "/opt/mux")
