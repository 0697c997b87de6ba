"""Packager markers: a Homebrew-like, a Nix-like and a Debian-like tree, real processes.

Each tree holds a release build (the stand-in) where its package manager would put it, and
a ``bin/mux`` link to it; ``mux-release packager-marker`` (run as a process, as a build
script would) writes the marker next to the executable. The feed the check reads offers a
newer release, released at a time the test chooses.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from release.build.standin import build_standin
from tests.support.feeds import KEYS, write_feed, write_release
from tests.support.installs import Install
from tests.support.processes import mux_release
from updater.config.marker import MARKER_NAME
from updater.config.targets import detect_target
from updater.timestamps import rfc3339

TARGET = detect_target()


# The release key the build trusts: the check verifies the feed's signed index and the
# release's signed SHA256SUMS with it (issue 13).
_KEY = KEYS.public_key


def packaged(root: Path, build_parent: Path, link: Path, env: dict[str, str]) -> Install:
    """A release build 0.1.0 unpacked in ``build_parent``, with ``link`` pointing at it."""
    folder = build_standin(
        build_parent, version="0.1.0", protocol_version=1, repo="acme/mux",
        minisign_keys=[_KEY], target=TARGET,
    )  # fmt: skip
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(folder / "mux")
    return Install(home=root / "unused-home", bin_dir=link.parent, env=env)


def write_marker(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return mux_release("packager-marker", folder, *args)


def offering(tmp_path: Path, released_at: str) -> Path:
    feed = tmp_path / "feed"
    write_release(feed, "0.2.0", released_at=released_at)
    write_feed(feed, [("v0.2.0", False)])
    return feed


def one_error(result: subprocess.CompletedProcess[str], code: int = 1) -> str:
    assert result.returncode == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mux: "), result.stderr
    return lines[0]


@pytest.fixture
def homebrew(tmp_path: Path, sandbox_env: dict[str, str]) -> Install:
    prefix = tmp_path / "homebrew"
    return packaged(
        tmp_path, prefix / "Cellar" / "mux" / "0.1.0" / "libexec", prefix / "bin" / "mux",
        sandbox_env,
    )  # fmt: skip


def build_folder(install: Install) -> Path:
    return Path(os.path.realpath(install.mux)).parent


def test_homebrew_marker_wins_over_the_path_guess(homebrew: Install) -> None:
    guessed = one_error(homebrew.run("update"))
    assert "managed by Homebrew" in guessed and "brew upgrade mux" in guessed
    folder = build_folder(homebrew)
    written = write_marker(
        folder, "--manager", "Homebrew (acme/tap)", "--update-command",
        "brew upgrade acme/tap/mux", "--announce-delay", "24h",
    )  # fmt: skip
    assert written.returncode == 0, written.stderr
    assert written.stdout.strip() == str(folder / MARKER_NAME)
    assert json.loads((folder / MARKER_NAME).read_text()) == {
        "schema": 1,
        "manager": "Homebrew (acme/tap)",
        "update_command": "brew upgrade acme/tap/mux",
        "announce_delay_seconds": 86400,
    }
    for args in (["update"], ["update", "--dry-run"], ["update", "--rollback"]):
        line = one_error(homebrew.run(*args))
        assert f"managed by Homebrew (acme/tap) ({folder / MARKER_NAME})" in line, line
        assert "update it with: brew upgrade acme/tap/mux" in line


def test_homebrew_hears_of_a_release_only_after_the_delay(
    homebrew: Install, tmp_path: Path
) -> None:
    folder = build_folder(homebrew)
    assert write_marker(
        folder, "--manager", "Homebrew", "--update-command", "brew upgrade mux",
        "--announce-delay", "24h",
    ).returncode == 0  # fmt: skip
    released = time.time() - 3600
    fresh = offering(tmp_path / "fresh", rfc3339(released))
    env = {**homebrew.env, "MUX_UPDATE_SOURCE": str(fresh)}
    run = Install(homebrew.home, homebrew.bin_dir, env)
    result = run.run("update", "--check", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["status"] == "up-to-date" and doc["update_available"] is False
    assert doc["packager_delay_until"] == doc["held_until"] == rfc3339(int(released) + 86400)
    assert doc["install_command"] is None
    assert any("Homebrew needs time to package it" in note for note in doc["notes"])
    text = run.run("update", "--check")
    assert text.returncode == 0 and "mux 0.2.0 is not announced yet" in text.stdout

    old = offering(tmp_path / "old", rfc3339(time.time() - 2 * 86400))
    due = Install(homebrew.home, homebrew.bin_dir, {**env, "MUX_UPDATE_SOURCE": str(old)})
    result = due.run("update", "--check", "--json")
    assert result.returncode == 10, result.stderr
    doc = json.loads(result.stdout)
    assert doc["install_command"] == "brew upgrade mux"
    assert doc["managed_by"] == {
        "kind": "packager",
        "name": "Homebrew",
        "command": "brew upgrade mux",
        "origin": str(folder / MARKER_NAME),
        "announce_delay_seconds": 86400.0,
    }
    assert doc["packager_delay_until"] is doc["held_until"] is None
    text = due.run("update", "--check")
    assert "install it with: brew upgrade mux (Homebrew manages this mux)" in text.stdout


def test_nix_store_tree(tmp_path: Path, sandbox_env: dict[str, str]) -> None:
    store = tmp_path / "nix" / "store" / "8bz3aq0wi5c4lh6pxdvkw6rbc3ns6p9g-mux-0.1.0"
    install = packaged(
        tmp_path, store / "libexec", tmp_path / "profile" / "bin" / "mux", sandbox_env
    )
    folder = build_folder(install)
    written = write_marker(
        folder, "--manager", "Nix", "--update-command", "nix profile upgrade mux"
    )
    assert written.returncode == 0, written.stderr
    subprocess.run(["chmod", "-R", "a-w", str(store)], check=True)  # the store is read-only
    try:
        line = one_error(install.run("update"))
        assert "managed by Nix" in line and "update it with: nix profile upgrade mux" in line
        feed = offering(tmp_path, rfc3339(time.time() - 60))
        check = Install(
            install.home, install.bin_dir, {**install.env, "MUX_UPDATE_SOURCE": str(feed)}
        )
        result = check.run("update", "--check", "--json")
        assert result.returncode == 10, result.stderr  # no delay: announced at once
        assert json.loads(result.stdout)["install_command"] == "nix profile upgrade mux"
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(store)], check=True)


def test_a_tree_no_guess_knows(tmp_path: Path, sandbox_env: dict[str, str]) -> None:
    """/usr/lib/mux from a .deb: no path rule knows it; only the marker tells."""
    usr = tmp_path / "usr"
    install = packaged(tmp_path, usr / "lib" / "mux", usr / "bin" / "mux", sandbox_env)
    assert "cannot tell which install this mux" in one_error(install.run("update"))
    folder = build_folder(install)
    assert write_marker(
        folder, "--manager", "Debian", "--update-command", "sudo apt install --only-upgrade mux"
    ).returncode == 0  # fmt: skip
    line = one_error(install.run("update"))
    assert "managed by Debian" in line
    assert "update it with: sudo apt install --only-upgrade mux" in line


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"{not json", "it is not JSON"),
        (b'{"schema": 2, "manager": "x", "update_command": "y"}', "its schema is not 1"),
        (b'{"schema": 1, "manager": "", "update_command": "y"}', "manager is not a text"),
        (
            b'{"schema": 1, "manager": "x", "update_command": "y\\u001b[2J"}',
            "update_command holds control",
        ),
        (
            b'{"schema": 1, "manager": "x", "update_command": "y", "announce_delay_seconds": -1}',
            "announce_delay_seconds is not a whole number",
        ),
    ],
)
def test_a_marker_that_cannot_be_read_is_an_error(
    homebrew: Install, tmp_path: Path, content: bytes, reason: str
) -> None:
    folder = build_folder(homebrew)
    (folder / MARKER_NAME).write_bytes(content)
    feed = offering(tmp_path, rfc3339(time.time() - 2 * 86400))
    run = Install(homebrew.home, homebrew.bin_dir, {**homebrew.env, "MUX_UPDATE_SOURCE": str(feed)})
    for args in (["update"], ["update", "--check"]):
        line = one_error(run.run(*args))
        assert f"the packager marker {folder / MARKER_NAME} cannot be used: {reason}" in line
        assert "\x1b" not in line


def test_a_marker_that_is_a_fifo_cannot_hang_mux(homebrew: Install, tmp_path: Path) -> None:
    """Nothing writes to it: a blocking open would wait forever; mux says what it found."""
    folder = build_folder(homebrew)
    os.mkfifo(folder / MARKER_NAME)
    feed = offering(tmp_path, rfc3339(time.time() - 2 * 86400))
    run = Install(homebrew.home, homebrew.bin_dir, {**homebrew.env, "MUX_UPDATE_SOURCE": str(feed)})
    for args in (["update"], ["update", "--check"]):
        line = one_error(run.run(*args, timeout=30))
        assert f"{folder / MARKER_NAME} cannot be used: it is not a regular file" in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--manager", "", "--update-command", "x"], "manager is not a text of 1 to 80"),
        (["--manager", "x", "--update-command", "x", "--announce-delay", "40d"], "from 0 to"),
        (["--manager", "x", "--update-command", "x", "--announce-delay", "soon"], "invalid"),
    ],
)
def test_the_writer_refuses_what_the_reader_would(
    homebrew: Install, args: list[str], message: str
) -> None:
    folder = build_folder(homebrew)
    result = write_marker(folder, *args)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not (folder / MARKER_NAME).exists()


def test_the_writer_wants_the_build_folder(tmp_path: Path) -> None:
    result = write_marker(tmp_path, "--manager", "x", "--update-command", "y")
    assert result.returncode == 2 and "holds no mux executable" in result.stderr


# -- a server's watch events ---------------------------------------------------------------------


def test_watch_events_carry_the_packagers_command_after_its_delay(
    homebrew: Install, tmp_path: Path
) -> None:
    """A server of the packaged mux checks in the background: its update-available event
    names the packager's command, and a packager's delay holds it back like the check's."""
    from tests.support.servers import wait_until
    from tests.support.watching import event, spawn, watch_start

    folder = build_folder(homebrew)
    fresh = offering(tmp_path / "fresh", rfc3339(time.time() - 3600))
    env = {**homebrew.env, "MUX_UPDATE_SOURCE": str(fresh), "MUX_UPDATE_CHECK_INTERVAL": "1"}
    run = Install(homebrew.home, homebrew.bin_dir, env)
    log = Path(env["XDG_RUNTIME_DIR"]) / "mux" / "default.log"

    marker = ["--manager", "Homebrew", "--update-command", "brew upgrade mux"]
    assert write_marker(folder, *marker, "--announce-delay", "24h").returncode == 0
    assert run.run("server", "start").returncode == 0
    watcher, lines = spawn(run, "server", "watch")
    assert watch_start(lines)[0]["version"] == "0.1.0"
    wait_until(lambda: "background check: latest v0.2.0" in log.read_text(), what="a check")
    assert run.run("server", "stop").returncode == 0
    assert [event(line)[0] for line in lines.rest()] == ["server-stopping"]  # held back
    assert watcher.wait(10) == 0

    assert write_marker(folder, *marker).returncode == 0  # no delay
    assert run.run("server", "start").returncode == 0
    watcher, lines = spawn(run, "server", "watch")
    watch_start(lines)
    kind, data = event(lines.next())
    assert (kind, data["version"]) == ("update-available", "0.2.0")
    assert data["install_command"] == "brew upgrade mux"
    assert data["managed_by"]["name"] == "Homebrew"
    assert data["managed_by"]["origin"] == str(folder / MARKER_NAME)
    assert run.run("server", "stop").returncode == 0
    watcher.wait(10)
