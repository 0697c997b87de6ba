"""In-process tests for the modules no other in-process test imports by name: the help
builder, mux status's gathering, resolving an offer, and the staged path's result types."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.support.inprocess import environment
from tests.support.installs import bootstrap
from tests.support.releases import make_feed
from updater.cli import helptext, staged
from updater.commands import status, update_result
from updater.commands.resolve import Installed, resolve_offer
from updater.commands.staged import apply_from_recent_answer
from updater.config import buildinfo
from updater.config.buildinfo import BuildInfo
from updater.config.settings import load_for
from updater.core.request import Decision, ReleaseRequest
from updater.trust.layers import VerificationLog


def test_the_help_epilog_lays_out_examples_codes_and_environment_as_tables() -> None:
    text = helptext.epilog(
        examples=[("mux update", "install the newest release")],
        exit_codes=[("0", "done"), helptext.USAGE_ERROR],
        environment=[("MUX_HOME", "the install")],
        notes="A note.",
    )
    # Each table is a paragraph click keeps as written (it starts with \b).
    parts = [part.removeprefix("\b\n") for part in text.split("\n\n")]
    assert parts[1].splitlines()[0] == "Exit codes:" and "  2  usage error" in parts[1]
    assert parts[2].splitlines() == ["Environment:", "  MUX_HOME  the install"]
    assert parts[-1] == "A note." and "mux update" in parts[0]
    assert all(len(line) <= helptext.WIDTH + 2 for line in text.splitlines())


def test_an_update_result_says_its_exit_code_only_when_asked(tmp_path: Path) -> None:
    from updater.install.layout import resolve_layout

    layout = resolve_layout(tmp_path / "home", tmp_path / "bin", development=False)
    result = update_result.UpdateResult(
        action=update_result.UpdateAction.STAGED,
        layout=layout,
        from_version="1.0.0",
        to_version="1.1.0",
        target="x",
        protocol_version=None,
    )
    assert result.exit_code == 0 and not result.restart_needed
    assert update_result.UpdateAction("unstaged") is update_result.UpdateAction.UNSTAGED


def test_resolving_a_feed_folder_offers_its_newest_release(tmp_path: Path, sandbox_env) -> None:
    feed = make_feed(tmp_path / "f", versions=["0.1.0", "0.2.0"])
    build = buildinfo.current()
    env = {**sandbox_env, "MUX_UPDATE_SOURCE": str(feed.path)}
    with environment(env):
        settings = load_for(build, trust_keys=[feed.keypair.public_key])
        with resolve_offer(
            ReleaseRequest.latest(), settings, build, Installed("0.1.0"), VerificationLog()
        ) as resolved:
            assert resolved.tag == "v0.2.0" and resolved.decision is Decision.UPDATE
            assert resolved.release is not None
            assert resolved.release.manifest.version == "0.2.0"


def test_status_and_the_staged_path_on_a_real_install(tmp_path: Path, sandbox_env) -> None:
    feed = make_feed(tmp_path / "f", versions=["0.1.0", "0.2.0"])
    install = bootstrap(
        tmp_path,
        sandbox_env,
        source=str(feed.path),
        version="0.1.0",
        public_key=feed.keypair.public_key,
    )
    env = {**install.env, "MUX_UPDATE_CHECK_INTERVAL": "1h"}
    installed = BuildInfo.from_json(
        json.loads(
            next((install.home / "versions" / "0.1.0").rglob("_build_info.json")).read_text()
        )
    )
    with environment({**env, "MUX_HOME": str(install.home)}):
        # Nothing staged: the fast path answers None and leaves the full update to run.
        assert staged.answer([]) is None
        facts = status.gather_status(installed, [], [], now=time.time())
        assert facts.active == "0.1.0" and [v.version for v in facts.versions] == ["0.1.0"]
        assert apply_from_recent_answer(load_for(installed), installed) is None
    key = ("--trust-key", feed.keypair.public_key)
    assert install.run("update", "--stage", *key).returncode == 0
    checked = install.run("update", "--check", *key)
    assert checked.returncode == 10, checked.stdout + checked.stderr
    with environment({**env, "MUX_HOME": str(install.home)}):
        settings = load_for(installed, trust_keys=[feed.keypair.public_key])
        result = apply_from_recent_answer(settings, installed)
    assert result is not None and result.action is update_result.UpdateAction.UPDATED
    assert result.staged is not None and result.staged.version == "0.2.0"
    assert install.active() == "0.2.0"


def test_the_staged_path_interrupted_says_so_in_one_line(monkeypatch, capsys) -> None:
    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(staged, "apply_from_recent_answer", interrupted)
    assert staged.answer([]) == 130
    assert capsys.readouterr().err == "mux: interrupted\n"
