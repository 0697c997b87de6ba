"""``mux status``: the view of the install (issue 38).

The builder (:func:`updater.core.install_view.install_status`) and the renderer
(:func:`updater.cli.status.status_lines`) in-process, as tables; one real install, with a
real server, read by the installed mux.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.installs import bootstrap
from tests.support.releases import make_feed
from updater.cli.status import status_lines
from updater.core.install_view import (
    FileFacts,
    InstallFacts,
    VersionFacts,
    install_status,
    with_removable,
)

NOW = 1_800_000_000.0
KEPT = (
    VersionFacts("1.1.0", "active", "active (the mux link points at it)"),
    VersionFacts("1.0.0", "previous", "previous version (for mux update --rollback)"),
)
SERVER = {
    "address": "/run/user/1000/mux/default.sock",
    "state": "live",
    "detail": "mux 1.1.0, protocol 2",
    "version": "1.1.0",
    "protocol_version": 2,
    "pid": 4242,
    "restart_needed": False,
    "restart_command": None,
}


def facts(**changes: Any) -> InstallFacts:
    base = InstallFacts(
        link="/home/u/.local/bin/mux",
        link_target="/home/u/.local/share/mux/versions/1.1.0/mux",
        active="1.1.0",
        home="/home/u/.local/share/mux",
        home_problem=None,
        versions=with_removable(
            ["0.9.0", "1.0.0", "1.1.0"],
            KEPT,
            {"0.9.0": 1 << 20, "1.0.0": 3 << 20, "1.1.0": 4 << 20},
        ),
        source="https://mirror.example/feed",
        source_set_by="/home/u/.local/share/mux/install.json",
        config=FileFacts(
            "/home/u/.config/mux/config.toml", exists=True, sets=(("auto_install", "compatible"),)
        ),
        policy=FileFacts("/etc/mux/policy.toml"),
        skipped=("1.2.0",),
        hold_until=NOW + 3600,
        servers=(SERVER,),
        now=NOW,
    )
    return base._replace(**changes)


def test_every_installed_version_is_listed_with_why_and_its_size() -> None:
    doc = install_status(facts())
    assert [(v["version"], v["kind"], v["size_bytes"]) for v in doc["versions"]] == [
        ("1.1.0", "active", 4 << 20),
        ("1.0.0", "previous", 3 << 20),
        ("0.9.0", "removable", 1 << 20),
    ]
    assert doc["versions"][2]["reason"] == "nothing needs it: mux update --prune removes it"
    assert doc["disk_bytes"] == 8 << 20


def test_the_document_says_each_part_of_the_install() -> None:
    doc = install_status(facts())
    assert doc["link"] == {
        "path": "/home/u/.local/bin/mux",
        "target": "/home/u/.local/share/mux/versions/1.1.0/mux",
        "version": "1.1.0",
    }
    assert doc["home"] == {"path": "/home/u/.local/share/mux", "problem": None}
    assert doc["source"] == {
        "location": "https://mirror.example/feed",
        "set_by": "/home/u/.local/share/mux/install.json",
    }
    assert doc["config"]["sets"] == {"auto_install": "compatible"}
    assert doc["policy"] == {
        "path": "/etc/mux/policy.toml",
        "exists": False,
        "sets": {},
        "problem": None,
    }
    assert doc["skipped"] == ["1.2.0"] and doc["servers"] == [SERVER]
    assert doc["hold_until"] == "2027-01-15T09:00:00Z"
    json.dumps(doc, allow_nan=False)  # one JSON object


@pytest.mark.parametrize(
    ("hold_until", "shown"),
    [(None, None), (NOW - 1, None), (NOW, None), (NOW + 60, "2027-01-15T08:01:00Z")],
)
def test_a_hold_is_shown_only_while_it_lasts(hold_until: float | None, shown: str | None) -> None:
    assert install_status(facts(hold_until=hold_until))["hold_until"] == shown


def test_an_unmeasured_version_leaves_the_total_unknown() -> None:
    unmeasured = with_removable(["1.1.0"], KEPT[:1], {})
    assert install_status(facts(versions=unmeasured))["disk_bytes"] is None


def test_the_text_is_the_document_one_fact_a_line() -> None:
    assert status_lines(install_status(facts())) == [
        "mux link: /home/u/.local/bin/mux -> /home/u/.local/share/mux/versions/1.1.0/mux"
        " (mux 1.1.0)",
        "MUX_HOME: /home/u/.local/share/mux",
        "versions: 3, 8.0 MiB",
        "  1.1.0    4.0 MiB  active (the mux link points at it)",
        "  1.0.0    3.0 MiB  previous version (for mux update --rollback)",
        "  0.9.0    1.0 MiB  nothing needs it: mux update --prune removes it",
        "source: https://mirror.example/feed (from /home/u/.local/share/mux/install.json)",
        'config: /home/u/.config/mux/config.toml: auto_install = "compatible"',
        "policy: /etc/mux/policy.toml (none)",
        "skipped: 1.2.0",
        "held until 2027-01-15T09:00:00Z (mux update --unhold ends it)",
        "servers: 1",
        "  /run/user/1000/mux/default.sock: mux 1.1.0, protocol 2, pid 4242",
    ]


def test_the_text_says_what_is_missing_or_broken() -> None:
    broken = facts(
        link=None,
        link_target=None,
        active=None,
        home=None,
        home_problem="this is a development checkout, not an installed mux",
        versions=(),
        source_set_by=None,
        config=FileFacts("/c.toml", exists=True, problem="the config file /c.toml cannot be used"),
        skipped=(),
        hold_until=None,
        servers=({**SERVER, "state": "stale", "detail": "nobody listens"},),
    )
    lines = status_lines(install_status(broken))
    assert lines[:2] == [
        "install: none (this is a development checkout, not an installed mux)",
        "source: https://mirror.example/feed (from the default)",
    ]
    assert "config: /c.toml: cannot be used: the config file /c.toml cannot be used" in lines
    assert "skipped: none" in lines and "held: no" in lines
    assert lines[-1] == "  /run/user/1000/mux/default.sock: stale (nobody listens)"


def test_the_text_escapes_what_came_from_outside() -> None:
    odd = facts(source="https://mirror.example/\x1b[31mfeed")
    assert "source: https://mirror.example/\\x1b[31mfeed" in "\n".join(
        status_lines(install_status(odd))
    )


def test_mux_status_of_a_real_install(tmp_path: Path, sandbox_env: dict[str, str]) -> None:
    feed = make_feed(tmp_path, versions=["1.0.0", "1.1.0", "1.2.0"])
    mux = bootstrap(
        tmp_path,
        sandbox_env,
        source=str(feed.path),
        version="1.0.0",
        public_key=feed.keypair.public_key,
    )
    key = ("--trust-key", feed.keypair.public_key)
    assert mux.run("update", "--version", "1.1.0", *key).returncode == 0
    config = Path(sandbox_env["XDG_CONFIG_HOME"]) / "mux" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('auto_install = "compatible"\n')
    assert mux.run("update", "--skip", "1.2.0").returncode == 0
    assert mux.run("update", "--hold", "7d").returncode == 0
    started = mux.run("server", "start", "--name", "s")
    assert started.returncode == 0, started.stderr

    result = mux.run("status", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema"] == 2  # the JSON contract's, as every document mux prints
    assert doc["link"]["path"] == str(mux.mux) and doc["link"]["version"] == "1.1.0"
    assert doc["home"] == {"path": str(mux.home), "problem": None}
    kinds = [(v["version"], v["kind"]) for v in doc["versions"]]
    assert kinds == [("1.1.0", "active"), ("1.0.0", "previous")], kinds
    sizes = [v["size_bytes"] for v in doc["versions"]]
    assert all(size > 0 for size in sizes) and doc["disk_bytes"] == sum(sizes)
    assert doc["source"] == {"location": str(feed.path), "set_by": "MUX_UPDATE_SOURCE"}
    assert doc["config"] == {
        "path": str(config),
        "exists": True,
        "sets": {"auto_install": "compatible"},
        "problem": None,
    }
    assert doc["skipped"] == ["1.2.0"] and doc["hold_until"] is not None
    [server] = doc["servers"]
    assert (server["state"], server["version"]) == ("live", "1.1.0"), server

    text = mux.run("status")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == f"mux link: {mux.mux} -> {mux.home}/versions/1.1.0/mux (mux 1.1.0)"
    assert "skipped: 1.2.0" in lines and "servers: 1" in lines, lines
    assert mux.run("server", "stop", "--name", "s").returncode == 0
