"""The source an install was made from is remembered (issue 38, item 1).

install.sh records where it installed from in ``install.json``; every later command of the
installed mux and a server's background check use that source unless a flag, the
environment or the machine policy names another. ``MUX_UPDATE_SOURCE`` is the one name mux
and install.sh read; ``MUX_DOWNLOAD_URL`` (install.sh's older name) still works.

Real processes where the process is the point (install.sh from a loopback feed, the
installed mux, its background check); the precedence and the record's meaning in-process.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.attacks import mirror
from tests.support.inprocess import run_in_process
from tests.support.installsh import Site, make_toolbox, render_install_sh, run_install, serve_site
from tests.support.processes import run_mux
from tests.support.releases import Feed, sign_index, signed_pair
from updater.config.remembered import source_to_use
from updater.config.settings import Requested, load
from updater.errors import UsageError

OLD, NEW = "0.1.0", "0.2.0"


@pytest.fixture(scope="module")
def feed(tmp_path_factory: pytest.TempPathFactory) -> Feed:
    return signed_pair(tmp_path_factory.mktemp("feed"), OLD, NEW)


def test_an_install_from_a_feed_updates_from_it_with_a_bare_mux_update(
    feed: Feed, sandbox_env: dict[str, str], tmp_path: Path
) -> None:
    """install.sh from a loopback feed (MUX_UPDATE_SOURCE), then the installed mux with no
    source anywhere: the check, the background check and `mux update` all use the feed."""
    site = Site(root=tmp_path / "mirror")
    with serve_site(site):
        sign_index(mirror(feed, site.root), feed.keypair, seq=5)
        script = render_install_sh(tmp_path / "install.sh", keys=[feed.keypair.public_key])
        shell_env = {
            **sandbox_env,
            "PATH": str(make_toolbox(tmp_path / "tools")),
            "SHELL": "/bin/sh",
            "MUX_UPDATE_SOURCE": site.url,
            "MUX_VERSION": OLD,
        }
        installed = run_install(script, env=shell_env)
        assert installed.returncode == 0, installed.stderr
        home = Path(sandbox_env["HOME"])
        mux = [str(home / ".local" / "bin" / "mux")]
        record = home / ".local" / "share" / "mux" / "install.json"
        assert json.loads(record.read_text())["source"] == site.url

        checked = run_mux(["update", "--check", "--json"], sandbox_env, executable=mux)
        assert checked.returncode == 10, checked.stderr
        doc = json.loads(checked.stdout)
        assert doc["latest"]["version"] == NEW
        assert doc["source"]["location"] == site.url
        assert doc["source"]["set_by"] == str(record)
        text = run_mux(["update", "--check"], sandbox_env, executable=mux).stdout
        assert f"source: {site.url} (from {record})" in text

        background = run_mux(["server", "check-updates"], sandbox_env, executable=mux)
        answer = json.loads(background.stdout)
        assert answer["ok"] is True, answer
        assert answer["offer"]["latest"]["version"] == NEW

        updated = run_mux(["update"], sandbox_env, executable=mux, timeout=120)
        assert updated.returncode == 0, updated.stdout + updated.stderr
        assert Path(os.readlink(mux[0])).parent.name == NEW


def test_the_older_name_works_and_two_names_for_two_sources_are_refused(
    feed: Feed, sandbox_env: dict[str, str], tmp_path: Path
) -> None:
    """mux reads MUX_DOWNLOAD_URL as MUX_UPDATE_SOURCE; both, naming different sources: exit 2."""
    both = {**sandbox_env, "MUX_UPDATE_SOURCE": str(feed.path), "MUX_DOWNLOAD_URL": "/elsewhere"}
    refused = run_in_process(["update", "--check"], both)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        "mux: error: MUX_UPDATE_SOURCE and MUX_DOWNLOAD_URL name different sources"
        " (set MUX_UPDATE_SOURCE alone; MUX_DOWNLOAD_URL is its older name)"
    ]
    old_name = {**sandbox_env, "MUX_DOWNLOAD_URL": str(feed.path)}
    checked = run_in_process(
        ["update", "--check", "--json", "--trust-key", feed.keypair.public_key], old_name
    )
    doc = json.loads(checked.stdout)
    assert doc["source"] == {
        "kind": "feed",
        "location": str(feed.path),
        "set_by": "MUX_DOWNLOAD_URL",
    }


@pytest.mark.parametrize(
    ("recorded", "github_web", "expected"),
    [
        ("github", None, "github"),
        ("https://github.com/acme/mux", None, "github"),  # install.sh's record of GitHub
        ("https://github.com/acme/mux/", None, "github"),
        ("https://ghe.example/acme/mux", "https://ghe.example", "github"),
        ("https://ghe.example/acme/mux", None, "https://ghe.example/acme/mux"),  # a feed
        ("https://mirror.example/feed", None, "https://mirror.example/feed"),
        ("http://127.0.0.1:8765/feed/", None, "http://127.0.0.1:8765/feed"),
        ("/srv/mux-feed", None, "/srv/mux-feed"),
        ("relative/feed", None, None),
        ("ftp://mirror.example/feed", None, None),
    ],
)
def test_what_a_recorded_source_means(
    recorded: str, github_web: str | None, expected: str | None
) -> None:
    assert source_to_use(recorded, github_web=github_web, repo="acme/mux") == expected


def test_the_record_is_below_the_environment_and_the_flags(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "install.json").write_text(json.dumps({"source": "https://mirror.example/feed"}))
    env = {"MUX_HOME": str(home)}

    def source(environ: dict[str, str], **flags: object) -> tuple[str, str | None]:
        requested = Requested(**flags)  # type: ignore[arg-type]
        settings = load(environ, build_repo="acme/mux", remembered=True, flags=requested)
        return settings.source, settings.source_set_by

    assert source(env) == ("https://mirror.example/feed", str(home / "install.json"))
    assert source({**env, "MUX_UPDATE_SOURCE": "github"}) == ("github", "MUX_UPDATE_SOURCE")
    assert source(env, source="/srv/feed") == ("/srv/feed", "--source")
    assert source({}) == ("github", None)  # a development checkout: no install, no record
    assert load(env, build_repo="acme/mux").source == "github"  # mux-release reads no record
    with pytest.raises(UsageError):
        load({"MUX_UPDATE_SOURCE": "/a", "MUX_DOWNLOAD_URL": "/b"})
