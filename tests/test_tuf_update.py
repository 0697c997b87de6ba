"""``mux update`` of a build that trusts a TUF root, end to end: real installs, real processes,
loopback feeds whose ``metadata/`` was made by ``release.publish.tuf_repo``.

The installed 0.1.0 is a stand-in build with root v1 baked in; what it installs next is what
the verified TUF metadata lists, checked file by file against the signed lengths and digests,
and then by the existing layers."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest
from tuf.api.metadata import Metadata, Root, Snapshot, Timestamp

from release.publish import tuf_repo
from release.publish.tuf_keys import LocalKeys
from release.rehearsal.fake_sigstore import FakeSigstore
from release.rehearsal.serve import serving, url_of
from tests.support.attacks import max_rss
from tests.support.attestations import attest
from tests.support.github import FakeGitHub, github_env, serve_github
from tests.support.imports import CACHED_CHECK_ALLOWED, matching, outside, run_released
from tests.support.installs import Install, bootstrap, republish, snapshot
from tests.support.installsh import make_toolbox, render_install_sh, run_install
from tests.support.releases import make_feed, serve_directory
from tests.support.tuf import (
    TufFeed,
    add_repository,
    feed,
    forge,
    installed,
    make_tuf_feed,
    served,
)
from updater.formats.models import FEED_INDEX_NAME

__all__ = ["feed", "installed", "served"]  # fixtures, imported for pytest

REPO = "acme/mux"


def refused(install: Install, before: dict[str, str], *args: str, env=None) -> str:
    """``mux update`` exits 3 with one line (and its hint) and changes nothing."""
    result = with_env(install, env or {}).run("update", *args)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    after = snapshot(install.home, install.bin_dir)
    for state in (after, before):
        state.pop(str(install.home / ".lock"), None)
    assert after == before
    assert install.active() == "0.1.0"
    return next(ln for ln in result.stderr.splitlines() if not ln.startswith("download"))


def with_env(install: Install, extra: dict[str, str]) -> Install:
    return Install(home=install.home, bin_dir=install.bin_dir, env={**install.env, **extra})


def test_the_releases_and_digests_come_from_tuf(installed: Install, feed: TufFeed) -> None:
    # Not releases.json: a build that trusts a TUF root never reads it.
    (feed.path / FEED_INDEX_NAME).unlink()
    checked = installed.run("update", "--check", "--json")
    assert checked.returncode == 10, checked.stderr
    assert json.loads(checked.stdout)["latest"]["version"] == "0.2.0"
    result = installed.run("update", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    layers = {layer["layer"]: layer["status"] for layer in report["verification"]}
    assert layers["tuf"] == "ok" and layers["signature"] == "ok" and layers["smoke-test"] == "ok"
    assert installed.active() == "0.2.0"
    # The trusted metadata is kept in the user's state dir, per repository.
    state = Path(installed.env["XDG_STATE_HOME"]) / "mux" / "tuf"
    (kept,) = state.iterdir()
    assert (kept / "timestamp.json").is_file() and (kept / "root.json").is_file()


def test_a_frozen_mirror_is_refused_once_its_timestamp_expires(
    installed: Install, feed: TufFeed
) -> None:
    before = snapshot(installed.home, installed.bin_dir)
    line = refused(installed, before, env={"MUX_TUF_CLOCK_AHEAD": "25h"})
    assert "timestamp metadata" in line and "expired at" in line
    # And the check says the same, exit 3.
    checked = with_env(installed, {"MUX_TUF_CLOCK_AHEAD": "25h"}).run("update", "--check")
    assert checked.returncode == 3 and "expired at" in checked.stderr


def test_a_release_file_nobody_signed_in_tuf_is_refused(installed: Install, feed: TufFeed) -> None:
    """Arbitrary software: a stolen minisign key re-signs 0.2.0 with another archive; TUF's
    signed digests do not match, nothing is installed."""
    release = feed.releases["0.2.0"]
    archive = next(release.glob("*.tar.gz"))
    republish(release, feed.keypair.secret_key(), archive=archive.read_bytes() + b"\0" * 512)
    before = snapshot(installed.home, installed.bin_dir)
    line = refused(installed, before)
    assert "verification failed (tuf)" in line and "SHA256SUMS of v0.2.0" in line


def test_a_version_asked_for_must_be_listed(installed: Install, feed: TufFeed) -> None:
    shutil.copytree(feed.releases["0.2.0"], feed.path / "v0.3.0")  # on the mirror, not signed
    result = installed.run("update", "--version", "0.3.0")
    assert result.returncode != 0 and "do not list v0.3.0" in result.stderr
    assert installed.active() == "0.1.0"


def test_root_v1_follows_three_rotations_and_still_updates(
    installed: Install, feed: TufFeed, tmp_path: Path
) -> None:
    keys = feed.keys
    new = LocalKeys.generate(tmp_path / "new")
    revoked = keys.public("root-1").keyid
    tuf_repo.rotate(
        feed.path,
        [tuf_repo.KeyChange(Root.type, add=[new.public("root-1")])],
        keys.signers("root-1", "root-2") + new.signers("root-1"),
    )
    tuf_repo.rotate(
        feed.path,
        [tuf_repo.KeyChange(Root.type, remove=[revoked[:16]])],
        keys.signers("root-2", "root-3"),
    )
    tuf_repo.rotate(
        feed.path,
        [tuf_repo.KeyChange(Root.type, threshold=3)],
        keys.signers("root-2", "root-3") + new.signers("root-1"),
    )
    assert tuf_repo.Repository(feed.path).root_versions() == [1, 2, 3, 4]
    result = installed.run("update", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    tuf_line = next(v for v in json.loads(result.stdout)["verification"] if v["layer"] == "tuf")
    assert "root v4" in tuf_line["detail"]


def test_the_cached_check_imports_no_tuf(
    tmp_path: Path, sandbox_env, feed: TufFeed, served: str
) -> None:
    release = feed.releases["0.1.0"]
    unpacked = tmp_path / "build"
    archive = next(release.glob("*.tar.gz"))
    shutil.unpack_archive(archive, unpacked)
    (lib,) = unpacked.glob("*/lib/mux_entry.py")
    env = {**sandbox_env, "MUX_UPDATE_SOURCE": served}
    filled, imported = run_released(lib, ["update", "--check", "--json"], env)
    assert filled.returncode == 10, filled.stderr[-2000:]
    assert matching(imported, ["tuf"])  # the uncached check reads TUF
    result, imported = run_released(lib, ["update", "--check", "--max-age", "1h"], env)
    assert result.returncode == 10, result.stderr[-2000:]
    assert "from the check at" in result.stdout
    assert not matching(imported, ["tuf", "securesystemslib"])
    assert outside(imported, CACHED_CHECK_ALLOWED) == []


def test_a_build_without_a_tuf_root_never_imports_tuf(tmp_path: Path, sandbox_env) -> None:
    """Its uncached check reads the signed index: python-tuf (some 120 modules) is not loaded,
    even when the feed has a TUF repository beside it."""
    feed = make_feed(tmp_path / "f", ["0.1.0", "0.2.0"])
    add_repository(feed.path)  # a TUF repository beside the index: not this build's to read
    (unpacked := tmp_path / "build").mkdir()
    shutil.unpack_archive(next(feed.releases["0.1.0"].glob("*.tar.gz")), unpacked)
    (lib,) = unpacked.glob("*/lib/mux_entry.py")
    with serve_directory(feed.path) as url:
        result, imported = run_released(
            lib, ["update", "--check", "--json"], {**sandbox_env, "MUX_UPDATE_SOURCE": url}
        )
    assert result.returncode == 10, result.stderr[-2000:]
    assert json.loads(result.stdout)["lifecycle"]["origin"].startswith("the signed release list")
    assert not matching(imported, ["tuf", "securesystemslib", "urllib3"])


@pytest.mark.parametrize("where", ["url", "folder"])
def test_a_signed_sums_without_a_bundle_is_refused_by_a_build_that_knows_its_repository(
    tmp_path: Path, sandbox_env, where: str
) -> None:
    feed = make_tuf_feed(tmp_path / "f", ["0.1.0", "0.2.0"], repo=REPO)
    with serve_directory(feed.path) as url:
        install = bootstrap(
            tmp_path, sandbox_env, source=url, version="0.1.0", public_key=feed.keypair.public_key
        )
        if where == "folder":
            install.env["MUX_UPDATE_SOURCE"] = str(feed.path)
        before = snapshot(install.home, install.bin_dir)
        line = refused(install, before)
        assert "attestation" in line
        skipped = install.run("update", "--insecure-skip-attestation")
        assert skipped.returncode == 0, skipped.stdout + skipped.stderr
        assert "attestation" in skipped.stdout + skipped.stderr


def test_github_discovery_comes_from_tuf_and_files_from_the_release(
    tmp_path: Path, sandbox_env
) -> None:
    """The default source of a TUF build: metadata from the repository's Pages (here
    MUX_TUF_METADATA_URL, a loopback copy), files from /releases/download/, no /releases/latest
    and no release list from the API; every layer still runs, the attestation included."""
    sigstore = FakeSigstore.create(tmp_path / "sigstore")
    feed = make_tuf_feed(tmp_path / "f", ["0.1.0", "0.2.0"], repo=REPO, publish=False)
    for release in feed.releases.values():
        attest(release, feed.keypair, sigstore)
    feed.publish()
    with (
        serve_github(FakeGitHub(root=feed.path, repo=REPO)) as fake,
        serve_directory(feed.path) as pages,
    ):
        env = {
            **sandbox_env,
            **github_env(fake),
            "MUX_SIGSTORE_TRUSTED_ROOT": str(sigstore.trusted_root_path),
        }
        install = bootstrap(
            tmp_path, env, source="github", version="0.1.0", public_key=feed.keypair.public_key
        )
        install.env["MUX_TUF_METADATA_URL"] = f"{pages}/metadata"
        fake.requests.clear()
        result = install.run("update", "--json")
        assert result.returncode == 0, result.stdout + result.stderr
        layers = {v["layer"]: v["status"] for v in json.loads(result.stdout)["verification"]}
        assert layers["tuf"] == "ok" and layers["attestation"] == "ok"
        assert install.active() == "0.2.0"
        paths = [r.path for r in fake.requests]
        assert not any(p.endswith("/releases/latest") for p in paths), paths
        assert not any(p.rstrip("/").endswith("/releases") for p in paths), paths
        assert any("/releases/download/v0.2.0/" in p for p in paths)
        # Without its repository the TUF build refuses: it never falls back to the redirect.
        install.env["MUX_TUF_METADATA_URL"] = f"{pages}/nothing-here"
        refused = install.run("update", "--check")
        assert refused.returncode == 3, refused.stdout + refused.stderr
        assert "does not serve its signed" in refused.stderr


# -- the attack classes against the installed mux, through a hostile copy of the feed ---------


class HostileMirror(http.server.SimpleHTTPRequestHandler):
    """The feed's files, except that ``endless`` paths never end and ``trickled`` paths send
    a byte every half second."""

    endless: ClassVar[frozenset[str]] = frozenset()
    trickled: ClassVar[frozenset[str]] = frozenset()

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path in self.endless or path in self.trickled:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            try:
                while True:
                    if path in self.trickled:
                        self.wfile.write(b" ")
                        self.wfile.flush()
                        threading.Event().wait(0.5)  # the attack's pace, not a synchronisation
                    else:
                        self.wfile.write(b" " * 65536)
            except OSError:
                return
        super().do_GET()


@contextlib.contextmanager
def hostile(
    feed: TufFeed, *, endless: frozenset[str] = frozenset(), trickled: frozenset[str] = frozenset()
):
    handler = type(
        "Mirror",
        (HostileMirror,),
        {"endless": endless, "trickled": trickled},
    )
    with serving(functools.partial(handler, directory=str(feed.path))) as server:
        yield url_of(server)


def peak_rss(install: Install, *args: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """The installed mux's result and its peak RSS in KiB (wait4's rusage)."""
    return max_rss([str(install.mux), *args], install.env)


def test_a_replayed_timestamp_is_a_rollback(installed: Install, feed: TufFeed) -> None:
    old = (feed.metadata / "timestamp.json").read_bytes()
    feed.refresh()
    assert installed.run("update", "--check").returncode == 10  # trusts the newer one now
    (feed.metadata / "timestamp.json").write_bytes(old)
    line = refused(installed, snapshot(installed.home, installed.bin_dir))
    assert "timestamp metadata" in line and "went back" in line


def test_a_snapshot_of_another_state_is_mix_and_match(installed: Install, feed: TufFeed) -> None:
    version = tuf_repo.Repository(feed.path).snapshot().signed.version
    path = feed.metadata / f"{version}.snapshot.json"
    md = Metadata.from_bytes(path.read_bytes())
    md.signed.meta["release-workflow.json"].version = 1  # the state before any release
    forge(feed.path, md, feed.signers(feed.keys.ONLINE), name=path.name)
    line = refused(installed, snapshot(installed.home, installed.bin_dir))
    assert "snapshot metadata" in line and "mixed" in line


def test_a_fast_forwarded_timestamp_is_left_behind_by_rotating_the_online_key(
    installed: Install, feed: TufFeed, tmp_path: Path
) -> None:
    """Fast-forward: with the stolen online key an attacker signs timestamp v1000, and the
    installed mux takes it (it verifies). The maintainers rotate the online key in root v2
    and sign a timestamp of a lower version with the new key: the installed mux follows (the
    old timestamp is dropped when its keys change) and updates."""
    stamp = Metadata.from_bytes((feed.metadata / "timestamp.json").read_bytes())
    stamp.signed.version = 1000
    forge(feed.path, stamp, feed.signers(feed.keys.ONLINE), name="timestamp.json")
    taken = installed.run("update", "--check", "--json")
    assert taken.returncode == 10, taken.stdout + taken.stderr
    assert "timestamp v1000" in json.dumps(json.loads(taken.stdout))

    new = LocalKeys.generate(tmp_path / "new")
    old_online = feed.keys.public(feed.keys.ONLINE).keyid
    tuf_repo.rotate(
        feed.path,
        [
            tuf_repo.KeyChange(role, add=[new.public(new.ONLINE)], remove=[old_online])
            for role in (Timestamp.type, Snapshot.type)
        ],
        feed.signers("root-1", "root-2"),
    )
    stamp.signed.version = 5  # the publisher's own count, below the attacker's
    forge(feed.path, stamp, [], name="timestamp.json")
    tuf_repo.refresh(feed.path, new.signers(new.ONLINE))
    result = installed.run("update", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    tuf_line = next(v for v in json.loads(result.stdout)["verification"] if v["layer"] == "tuf")
    assert "root v2, timestamp v6" in tuf_line["detail"], tuf_line
    assert installed.active() == "0.2.0"


def test_wrong_software_for_this_target_is_refused_before_a_byte_is_read(
    installed: Install, feed: TufFeed
) -> None:
    """The release key alone lists 0.2.0's archive as a build for another target (the file
    itself unchanged): the installed mux refuses it, nothing installed, nothing left."""
    md = tuf_repo.Repository(feed.path).targets(tuf_repo.RELEASE_ROLE)
    for path, info in md.signed.targets.items():
        if path.startswith("v0.2.0/") and path.endswith(".tar.gz"):
            info.unrecognized_fields["custom"]["mux"]["target"] = "aarch64-apple-darwin"
    md.signed.version += 1
    forge(
        feed.path,
        md,
        feed.signers(feed.keys.RELEASE),
        name=f"{md.signed.version}.{tuf_repo.RELEASE_ROLE}.json",
    )
    feed.refresh()
    line = refused(installed, snapshot(installed.home, installed.bin_dir))
    assert "signed as a build for aarch64-apple-darwin" in line, line
    assert not list(installed.home.rglob(".download-*"))


def test_one_stolen_targets_key_signs_nothing(installed: Install, feed: TufFeed) -> None:
    targets = tuf_repo.Repository(feed.path).targets()
    targets.signed.version += 1
    forge(feed.path, targets, feed.signers("targets-2"), name="2.targets.json")
    feed.refresh()
    line = refused(installed, snapshot(installed.home, installed.bin_dir))
    assert "targets metadata" in line and "1 of the 2 signatures it needs" in line


def test_endless_metadata_is_cut_and_memory_stays_flat(installed: Install, feed: TufFeed) -> None:
    with hostile(feed) as url:
        ordinary, baseline = peak_rss(
            with_env(installed, {"MUX_UPDATE_SOURCE": url}), "update", "--check"
        )
    assert ordinary.returncode == 10, ordinary.stderr
    with hostile(feed, endless=frozenset({"/metadata/timestamp.json"})) as url:
        mirror = with_env(installed, {"MUX_UPDATE_SOURCE": url})
        result, peak = peak_rss(mirror, "update", "--check")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "timestamp metadata" in result.stderr and "larger than" in result.stderr
    assert peak < baseline + 16 * 1024, (baseline, peak)


def test_slow_metadata_gives_up_at_the_deadline(installed: Install, feed: TufFeed) -> None:
    with hostile(feed, trickled=frozenset({"/metadata/timestamp.json"})) as url:
        mirror = with_env(installed, {"MUX_UPDATE_SOURCE": url, "MUX_HTTP_DEADLINE": "3"})
        started = time.monotonic()
        result = mirror.run("update", "--check")
        took = time.monotonic() - started
    assert result.returncode == 1, result.stdout + result.stderr
    assert "timestamp metadata" in result.stderr
    assert took < 60, took  # 3 s of trickle; the rest is this loaded machine starting mux
    assert installed.active() == "0.1.0"


def test_mux_and_install_sh_choose_the_same_release_from_one_repository(
    tmp_path: Path, sandbox_env
) -> None:
    """install.sh reads releases.json (minisign), the TUF build reads metadata/; both written
    by mux-release from the same release folders (released out of version order), both
    choose 0.3.0; a release folder neither list names is chosen by neither."""
    feed = make_tuf_feed(tmp_path / "f", ["0.1.0", "0.3.0", "0.2.0"])
    shutil.copytree(feed.releases["0.3.0"], feed.path / "v0.9.0")  # unlisted on the mirror
    script = render_install_sh(tmp_path / "install.sh", keys=[feed.keypair.public_key])
    with serve_directory(feed.path) as url:
        shell_env = {
            **sandbox_env,
            "PATH": str(make_toolbox(tmp_path / "tools")),
            "SHELL": "/bin/sh",
            "MUX_DOWNLOAD_URL": url,
        }
        by_script = run_install(script, env=shell_env)
        assert by_script.returncode == 0, by_script.stderr
        mux = Path(sandbox_env["HOME"]) / ".local" / "bin" / "mux"
        assert Path(os.readlink(mux)).parent.name == "0.3.0"
        checked = subprocess.run(
            [str(mux), "update", "--check", "--json", "--source", url],
            env=sandbox_env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert checked.returncode == 0, checked.stderr  # up to date: the same release
        assert json.loads(checked.stdout)["latest"]["tag"] == "v0.3.0"
