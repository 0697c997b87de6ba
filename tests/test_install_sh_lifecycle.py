"""install.sh and the signed lifecycle state: a fresh install never takes a halted or
withdrawn release, takes the newest other one whatever its rollout stage, and honours the
machine policy's pin and minimum_release_age. Real install.sh runs under dash, bash and
busybox sh against a real feed on a loopback server."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from release.publish.lifecycle import change_lifecycle, halt, parse_stages, rollout, withdraw
from tests.support.installsh import (
    env,
    error_lines,
    feed_url,
    make_toolbox,
    policy_path,
    render_install_sh,
    run_install,
    script,
    tmp_path,
)
from tests.support.processes import feed_verb
from tests.support.releases import Feed, make_feed, serve_directory
from tests.support.tuf import make_tuf_feed
from updater.formats.models import FEED_INDEX_NAME
from updater.formats.trusted_comments import FEED_SIGNATURE_NAME

__all__ = ["env", "feed_url", "policy_path", "script", "tmp_path"]  # fixtures, imported for pytest

SHELLS = ("dash", "bash", "busybox")
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="only root can make the root-owned policy install.sh requires"
)


@pytest.fixture
def feed(tmp_path: Path) -> Feed:
    return make_feed(tmp_path / "f", versions=["0.1.0", "0.2.0", "0.3.0"])


def installed_version(env: dict[str, str]) -> str | None:
    link = Path(env["HOME"]) / ".local" / "bin" / "mux"
    return Path(os.readlink(link)).parent.name if link.is_symlink() else None


def change(feed: Feed, tag: str, how) -> None:
    change_lifecycle(feed.path, feed.keypair.secret_key(), tag, how)


@pytest.mark.parametrize("shell", SHELLS)
def test_a_fresh_install_skips_halted_and_withdrawn_and_ignores_stages(
    shell: str, script: Path, env: dict[str, str], feed: Feed
) -> None:
    now = int(time.time())
    change(feed, "v0.3.0", rollout(parse_stages("1,100@30d", now=now), None))
    staged = run_install(script, env=env, shell=shell)
    assert staged.returncode == 0, staged.stderr
    assert installed_version(env) == "0.3.0"  # a person asking: whatever the stage

    change(feed, "v0.3.0", halt)
    change(feed, "v0.2.0", withdraw("loses \x1b[31m data", None))
    fresh = {**env, "HOME": env["HOME"] + "-2"}
    Path(fresh["HOME"]).mkdir()
    result = run_install(script, env=fresh, shell=shell)
    assert result.returncode == 0, result.stderr
    assert installed_version(fresh) == "0.1.0"

    for version, words in (("0.3.0", "was halted by its publisher"), ("0.2.0", "was withdrawn")):
        asked = run_install(script, env={**fresh, "MUX_VERSION": version}, shell=shell)
        assert asked.returncode == 1, (asked.stdout, asked.stderr)
        (line,) = error_lines(asked.stderr)
        assert words in line and "\x1b" not in asked.stderr
        assert installed_version(fresh) == "0.1.0"


@needs_root
@pytest.mark.parametrize("shell", SHELLS)
def test_the_policy_pin_and_minimum_release_age_hold_for_a_fresh_install(
    shell: str, script: Path, env: dict[str, str], feed: Feed, policy_path: Path
) -> None:
    policy_path.parent.mkdir(parents=True, exist_ok=True)
    policy_path.write_text('pin = "0.1"\n')
    pinned = run_install(script, env=env, shell=shell)
    assert pinned.returncode == 0, pinned.stderr
    assert installed_version(env) == "0.1.0"
    refused = run_install(script, env={**env, "MUX_VERSION": "0.2.0"}, shell=shell)
    assert refused.returncode == 4 and 'pin = "0.1"' in refused.stderr, refused.stderr

    young = int(time.time()) - 3600
    change(feed, "v0.3.0", lambda record: record._replace(released_at=young))
    policy_path.write_text('minimum_release_age = "72h"\nring = "late"\n')
    fresh = {**env, "HOME": env["HOME"] + "-2"}
    Path(fresh["HOME"]).mkdir()
    cooled = run_install(script, env=fresh, shell=shell)
    assert cooled.returncode == 0, cooled.stderr
    assert installed_version(fresh) == "0.2.0"  # 0.3.0 is an hour old
    asked = run_install(script, env={**fresh, "MUX_VERSION": "0.3.0"}, shell=shell)
    assert asked.returncode == 4 and "minimum_release_age" in asked.stderr, asked.stderr


@needs_root
@pytest.mark.parametrize("value", ['"1h30m"', '"72 h"', '"0h"', '"400d"', "72"])
def test_a_cooldown_both_cannot_read_is_refused_by_both(
    value: str, script: Path, env: dict[str, str], policy_path: Path
) -> None:
    from updater.config.policy import parse_policy
    from updater.errors import PolicyError

    policy_path.parent.mkdir(parents=True, exist_ok=True)
    policy_path.write_text(f"minimum_release_age = {value}\n")
    result = run_install(script, env=env)
    assert result.returncode == 4 and "minimum_release_age" in result.stderr, result.stderr
    with pytest.raises(PolicyError):
        parse_policy(policy_path.read_bytes(), str(policy_path))


def test_a_feed_that_lost_its_index_keeps_its_withdrawal_for_a_fresh_install(
    tmp_path: Path, sandbox_env: dict[str, str], policy_path: Path
) -> None:
    """Issue 35, finding 4: the feed folder lost releases.json and its signature (a fresh
    checkout of the Pages branch, a partial sync) and ``mux-release feed`` signed it again.
    It wrote seq 1 with no records, and install.sh on a fresh machine installed the withdrawn
    release. Now the index continues from the feed's TUF repository: the withdrawal holds."""
    feed = make_tuf_feed(tmp_path / "t", ["0.1.0", "0.2.0"])
    k = feed.keys
    tuf = (
        "--tuf-release-private-key",
        k.uri(k.RELEASE),
        "--tuf-online-private-key",
        k.uri(k.ONLINE),
    )
    withdrawn = feed_verb(feed, "withdraw", "--tag", "v0.2.0", "--reason", "bad", *tuf)
    assert withdrawn.returncode == 0, withdrawn.stderr
    for name in (FEED_INDEX_NAME, FEED_SIGNATURE_NAME):
        (feed.path / name).unlink()
    signed = feed_verb(feed, "feed", *tuf)
    assert signed.returncode == 0, signed.stdout + signed.stderr

    script = render_install_sh(
        tmp_path / "install.sh", keys=[feed.keypair.public_key], policy_file=str(policy_path)
    )
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    with serve_directory(feed.path) as url:
        env = {
            **{n: v for n, v in sandbox_env.items() if not n.startswith("MUX_")},
            "PATH": str(make_toolbox(tmp_path / "tools")),
            "MUX_DOWNLOAD_URL": url,
            "SHELL": "/bin/sh",
            "TMPDIR": str(scratch),
        }
        result = run_install(script, env=env, shell="dash")
        assert result.returncode == 0, result.stderr
        assert installed_version(env) == "0.1.0"
        asked = run_install(script, env={**env, "MUX_VERSION": "0.2.0"}, shell="dash")
    assert asked.returncode == 1 and "was withdrawn" in asked.stderr, asked.stderr
