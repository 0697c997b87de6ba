"""A server of the real one-folder build outlives updates (PyInstaller, ``mux-release build``).

The run's one real build (tests/support/realbuild.py); the releases 1.0.0, 1.1.0 and 1.2.0 (protocol 2, 2, 3) are that build
with each version's build info (what a version and protocol bump changes, as the release
rehearsal does), packaged and signed into a loopback feed by the same helpers as every other
test. Installed by ``mux update``, the server started by the installed mux; then updates, a
hung server, the printed restart command and a prune, all through the installed builds.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
from pathlib import Path

import pytest

from release.build.steps import make_build_info, write_bill, write_build_info
from tests.support.installs import bootstrap
from tests.support.realbuild import RealBuild
from tests.support.releases import make_feed, make_keypair, serve_directory
from updater.config.buildinfo import BuildInfo

pytestmark = pytest.mark.slow


def _as_real_build(real: Path):
    """A post_build hook: the stand-in's place is taken by the real build, with the stand-in's
    version, protocol and keys baked in."""

    def replace(standin: Path) -> None:
        info = BuildInfo.from_json(
            json.loads((standin / "lib" / "updater" / "_build_info.json").read_text())
        )
        shutil.rmtree(standin)
        shutil.copytree(real, standin, symlinks=True)
        (package_dir,) = {p.parent for p in standin.rglob("_build_info.json")}
        write_build_info(
            package_dir,
            make_build_info(
                version=info.version,
                protocol_version=info.protocol_version,
                target=info.target,
                repo=info.repo,
                minisign_keys=info.trust.minisign_keys,
            ),
        )
        write_bill(standin, None)

    return replace


@pytest.mark.timeout(2400)  # the run's one PyInstaller build (~1.5 min of CPU), three packagings
def test_a_real_builds_server_outlives_updates(tmp_path, sandbox_env, real_build: RealBuild):
    keypair = make_keypair(tmp_path / "keys")
    real = real_build.folder
    feed = make_feed(
        tmp_path / "f",
        versions=["1.0.0", "1.1.0", "1.2.0"],
        protocols={"1.0.0": 2, "1.1.0": 2, "1.2.0": 3},
        keypair=keypair,
        post_build=_as_real_build(real),
    )
    with serve_directory(feed.path) as url:
        mux = bootstrap(
            tmp_path, sandbox_env, source=url, version="1.0.0", public_key=keypair.public_key
        )
        assert mux.reported_version()["version"] == "1.0.0"
        assert not list((mux.home / "versions" / "1.0.0").rglob("*.py")), "not a stand-in"
        assert mux.run("server", "start").returncode == 0
        address = str(Path(mux.env["XDG_RUNTIME_DIR"]) / "mux" / "default.sock")

        def server() -> dict:
            result = mux.run("server", "status", "--json")
            assert result.returncode == 0, result.stderr
            return {s["address"]: s for s in json.loads(result.stdout)["servers"]}[address]

        first = server()
        pid = first["pid"]
        built_from = str((mux.home / "versions" / "1.0.0" / "mux").resolve())
        assert (first["executable"], first["executable_source"]) == (built_from, "status-line")
        # The real build holds its version's lock for its whole life (updater.install.inuse).
        from updater.locks import lock_holders

        assert lock_holders(str(mux.home / "versions" / "1.0.0" / ".mux-files")) == (pid,)

        for version, code in (("1.1.0", 0), ("1.2.0", 20)):
            # --exit-code: 20 when the server will need a restart (1.2.0 speaks another
            # protocol); without it an update that did what was asked exits 0 (issue 38)
            result = mux.run("update", "--version", version, "--json", "--exit-code")
            assert result.returncode == code, result.stderr
            doc = json.loads(result.stdout)
            [seen] = doc["servers"]
            assert (seen["pid"], seen["version"], seen["build_installed"]) == (pid, "1.0.0", True)
            assert (mux.home / "versions" / "1.0.0" / "mux").is_file()
        assert {k["version"]: k["kind"] for k in doc["kept_versions"]} == {
            "1.2.0": "active",
            "1.1.0": "previous",
            "1.0.0": "server",
        }

        # Hung: the OS names the real build's executable behind the socket.
        os.kill(pid, signal.SIGSTOP)
        try:
            pruned = mux.run("update", "--prune", "--json")
            assert pruned.returncode == 0, pruned.stderr
            kept = {k["version"]: k for k in json.loads(pruned.stdout)["kept_versions"]}
            assert (
                kept["1.0.0"]["reason"]
                == f"server {address} (pid {pid}, not answering) runs from it"
            )
            hung = server()
            assert (hung["state"], hung["executable"], hung["executable_source"]) == (
                "hung",
                built_from,
                "os",
            )
        finally:
            os.kill(pid, signal.SIGCONT)
        assert server()["pid"] == pid  # still serving after all that

        # The printed command, run by the new build through the link.
        restarted = mux.run(*shlex.split(seen["restart_command"])[1:])
        assert restarted.returncode == 0, restarted.stderr
        new = server()
        assert new["pid"] != pid
        assert (new["version"], new["protocol_version"]) == ("1.2.0", 3)
        assert new["executable"] == str((mux.home / "versions" / "1.2.0" / "mux").resolve())
        pruned = mux.run("update", "--prune", "--json")
        assert json.loads(pruned.stdout)["removed_versions"] == ["1.0.0"]
        assert mux.run("server", "stop").returncode == 0
