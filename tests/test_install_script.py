"""``mux-release install-sh``: the published install.sh carries the repo and trusted keys."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.releases import make_keypair


def render(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "release",
            "install-sh",
            "--out",
            str(tmp_path / "install.sh"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )


def test_keys_and_repo_are_written_in(tmp_path: Path) -> None:
    current, following = make_keypair(tmp_path, name="a"), make_keypair(tmp_path, name="b")
    result = render(
        tmp_path, "--key", current.public_key, "--key", following.public_key, "--repo", "acme/mux"
    )
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "install.sh").read_text()
    assert f"MUX_MINISIGN_KEYS='{current.public_key} {following.public_key}'\n" in text
    assert "MUX_DEFAULT_REPO='acme/mux'\n" in text
    assert (tmp_path / "install.sh").stat().st_mode & 0o111
    syntax = subprocess.run(["sh", "-n", str(tmp_path / "install.sh")], check=False)
    assert syntax.returncode == 0


def test_bad_keys_and_repos_are_refused(tmp_path: Path) -> None:
    key = make_keypair(tmp_path).public_key
    for args in (
        [],
        ["--key", "not-a-key"],
        ["--key", key, "--key", key, "--key", key],
        ["--key", key, "--repo", "acme/mux'; rm -rf ~; '"],
    ):
        result = render(tmp_path, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "install.sh").exists()
