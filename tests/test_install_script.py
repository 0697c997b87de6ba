"""``mux-release install-sh``: the published install.sh carries the repo and trusted keys."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.processes import mux_release
from tests.support.releases import make_keypair


def render(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return mux_release(
        "install-sh", "--out", tmp_path / "install.sh", *args, env={"PATH": "/usr/bin:/bin"}
    )


def test_keys_and_repo_are_written_in(tmp_path: Path) -> None:
    current, following = make_keypair(tmp_path, name="a"), make_keypair(tmp_path, name="b")
    result = render(
        tmp_path,
        "--public-key",
        current.public_key,
        "--public-key",
        following.public_key,
        "--repo",
        "acme/mux",
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
        ["--public-key", "not-a-key"],
        ["--public-key", key, "--public-key", key, "--public-key", key],
        ["--public-key", key, "--repo", "acme/mux'; rm -rf ~; '"],
    ):
        result = render(tmp_path, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "install.sh").exists()


def test_the_record_schema_is_written_in_from_mux_s_one_definition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """install.sh writes install.json with the schema mux reads records by
    (updater.core.retention.RECORD_SCHEMA): every rendered copy gets it from there, and the
    copy on the main branch, which tests and users may run as it is, says the same."""
    from release.publish import install_script
    from updater.core.retention import RECORD_SCHEMA

    key = make_keypair(tmp_path).public_key
    checked_in = install_script.INSTALL_SH.read_text(encoding="utf-8")
    assert f"MUX_RECORD_SCHEMA='{RECORD_SCHEMA}'\n" in checked_in
    assert """printf '{\\n  "schema": %s,\\n' "$MUX_RECORD_SCHEMA\"""" in checked_in
    monkeypatch.setattr(install_script, "RECORD_SCHEMA", RECORD_SCHEMA + 6)
    rendered = install_script.render_install_script(keys=[key], repo=None)
    assert f"MUX_RECORD_SCHEMA='{RECORD_SCHEMA + 6}'\n" in rendered
    assert rendered.count("MUX_RECORD_SCHEMA=") == 1
