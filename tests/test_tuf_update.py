"""``mux update`` of a build that trusts a TUF root, end to end: real installs, real processes,
loopback feeds whose ``metadata/`` was made by ``release.publish.tuf_repo``.

The installed 0.1.0 is a stand-in build with root v1 baked in; what it installs next is what
the verified TUF metadata lists, checked file by file against the signed lengths and digests,
and then by the existing layers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tuf.api.metadata import Root

from release.publish import tuf_repo
from release.publish.tuf_keys import LocalKeys
from tests.support.imports import matching
from tests.support.installs import Install, bootstrap, republish, snapshot
from tests.support.releases import serve_directory
from tests.support.tuf import TufFeed, make_tuf_feed
from tests.test_imports import CACHED_CHECK_ALLOWED, outside, run_released
from updater.formats.models import FEED_INDEX_NAME

REPO = "acme/mux"


@pytest.fixture
def feed(tmp_path: Path) -> TufFeed:
    return make_tuf_feed(tmp_path / "f", ["0.1.0", "0.2.0"], protocols={"0.2.0": 2})


@pytest.fixture
def served(feed: TufFeed):
    with serve_directory(feed.path) as url:
        yield url


@pytest.fixture
def installed(tmp_path: Path, sandbox_env, feed: TufFeed, served: str) -> Install:
    return bootstrap(
        tmp_path, sandbox_env, source=served, version="0.1.0", public_key=feed.keypair.public_key
    )


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
