"""mux against a hostile mirror, network or server (issue 13), one test per attack class: what
mux decides on is signed, fresh and bounded, or refused.

Each test serves real files (or a misbehaving real server) on 127.0.0.1 and runs mux: the
development mux in this process (tests/support/inprocess.py) for ``mux update --check`` and
the server commands (trusting the release key with ``--trust-key``, as a mirror's user
would), and an installed mux as a real process (bootstrapped from the genuine feed; its build
trusts the release key and the next one) for ``mux update``; memory is measured on real
processes. Each asserts the
refusal, its exit code and message, and that nothing changed on disk: the install (but its
empty lock file) and the feed-seq state (a check's cache may record the failed answer).
The shared feed has 0.1.0, 0.2.0 and 0.3.0, signed an hour apart in that order, and 0.4.0rc1,
a pre-release by its version; each attack serves a copy of it with one thing changed.
install.sh's side of the same attacks is tests/test_install_sh_attacks.py.
"""

from __future__ import annotations

import fcntl
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from release.rehearsal.fake_sigstore import FakeSigstore
from release.rehearsal.serve import serve_handler
from tests.support.attacks import key_id, lock_is_free, max_rss, mirror, seq_file
from tests.support.github import FakeGitHub, github_env, serve_github
from tests.support.inprocess import run_in_process
from tests.support.installs import Install, bootstrap, republish, snapshot
from tests.support.installsh import Site, make_toolbox, render_install_sh, run_install, serve_site
from tests.support.processes import run_mux
from tests.support.releases import (
    Feed,
    KeyPair,
    make_keypair,
    make_release,
    serve_directory,
    sign_index,
    sign_release_dir,
)
from updater.config.targets import detect_target
from updater.timestamps import utc_text

TARGET = detect_target()
ARCHIVE = f"mux-{TARGET}.tar.gz"
VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.4.0rc1")
STABLE = "0.3.0"
ESC, BEL = "\x1b", "\x07"
# Erase the line, then set the clipboard: what a hostile value tries on a terminal.
PAYLOAD = f"{ESC}[2K\r{ESC}]52;c;ZWNobyBwd25lZA=={BEL}"


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def next_key(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    """The project's next release key: the builds trust it already (rotation)."""
    return make_keypair(tmp_path_factory.mktemp("next-key"), name="next")


@pytest.fixture(scope="module")
def feed(tmp_path_factory: pytest.TempPathFactory, next_key: KeyPair) -> Feed:
    root = tmp_path_factory.mktemp("feed")
    keypair = make_keypair(root / "keys")
    feed = Feed(path=root / "feed", keypair=keypair)
    now = int(time.time())
    for number, version in enumerate(VERSIONS):
        feed.releases[version] = make_release(
            feed.path,
            version,
            protocol_version=1,
            keypair=keypair,
            prerelease=version.endswith("rc1"),
            signed_at=now - 3600 * (len(VERSIONS) - number),
            build={"minisign_keys": [keypair.public_key, next_key.public_key]},
        )
    return feed


@pytest.fixture
def env(sandbox_env: dict[str, str]) -> dict[str, str]:
    return dict(sandbox_env)


def install_at(version: str, feed: Feed, env: dict[str, str], tmp_path: Path) -> Install:
    """``version`` installed from the genuine feed by the development mux (which records the
    feed's seq, 4, as any verified update does)."""
    with serve_directory(feed.path) as url:
        return bootstrap(
            tmp_path, env, source=url, version=version, public_key=feed.keypair.public_key
        )


@pytest.fixture
def installed(feed: Feed, env: dict[str, str], tmp_path: Path) -> Install:
    return install_at("0.1.0", feed, env, tmp_path)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Site]:
    site = Site(root=tmp_path / "mirror")
    with serve_site(site):
        yield site


def check(
    env: dict[str, str], source: str, *args: str, keypair: KeyPair
) -> subprocess.CompletedProcess[str]:
    """The development mux's ``update --check --json`` against ``source``."""
    command = ["update", "--check", "--json", "--source", source, "--trust-key", keypair.public_key]
    return run_in_process([*command, *args], env)


def update(install: Install, source: str, *args: str, env: dict[str, str] | None = None):
    """The installed mux's ``update`` from ``source`` (in this process: Install.run)."""
    return Install(install.home, install.bin_dir, env or install.env).run(
        "update", "--source", source, *args
    )


def on_disk(env: dict[str, str], install: Install | None = None) -> dict[str, str]:
    """The feed-seq state and the install (home and bin dir), for "nothing changed"."""
    roots = [Path(env["XDG_STATE_HOME"])]
    if install is not None:
        roots += [install.home, install.bin_dir]
    return snapshot(*roots)


def refused(result: subprocess.CompletedProcess[str], code: int, *texts: str) -> str:
    """The one error line of a refusal, after checking its exit code, words and safety."""
    assert result.returncode == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("mux: "), result.stderr
    assert [line for line in lines if line.startswith("mux: ")] == lines[-1:], result.stderr
    for text in texts:
        assert text in lines[-1], lines[-1]
    assert "Traceback" not in result.stderr
    assert ESC not in result.stdout + result.stderr
    return lines[-1]


def served_paths(site: Site) -> list[str]:
    return site.paths()


# -- arbitrary software: only what a trusted key signed ------------------------------------


@pytest.mark.parametrize("case", ["other-key", "list-edited-after-signing", "no-signature"])
def test_an_unsigned_or_forged_release_list_is_refused(
    case: str, feed: Feed, installed: Install, env: dict[str, str], served: Site, tmp_path: Path
) -> None:
    root = mirror(feed, served.root)
    if case == "other-key":
        sign_index(root, make_keypair(tmp_path / "attacker"), seq=10**9)
        text = "is not signed by a key this mux trusts"
    elif case == "list-edited-after-signing":
        sign_index(root, feed.keypair, seq=10**9)
        # A made-up release appended to the genuinely signed list.
        doc = json.loads((root / "releases.json").read_text())
        doc["releases"].append({"tag": "v9.9.9", "prerelease": False})
        (root / "releases.json").write_text(json.dumps(doc, indent=2))
        text = "is not signed by a key this mux trusts"
    else:
        text = "could not download the signature of the release list"
    before = on_disk(env, installed)
    for result in (check(env, served.url, keypair=feed.keypair), update(installed, served.url)):
        refused(result, 3, text, f"{served.url}/releases.json")
    assert on_disk(env, installed) == before
    assert not [p for p in served_paths(served) if p.startswith("/v")]  # no release was read


# -- rollback: an older list (seq), an older release (signed timestamp) ----------------------


def test_the_sequence_number_is_recorded_and_a_lower_one_is_refused(
    feed: Feed, installed: Install, env: dict[str, str], served: Site
) -> None:
    state = seq_file(env)
    assert state.read_text() == f"{key_id(feed.keypair)} 4\n"  # the bootstrap's update
    # Another key's counter and a line no reader understands are there too.
    state.write_text(state.read_text() + "FFFF 12\nnot a line\n")
    root = mirror(feed, served.root)
    sign_index(root, feed.keypair, seq=5)
    assert check(env, served.url, keypair=feed.keypair).returncode == 10
    assert state.read_text() == "".join(sorted([f"{key_id(feed.keypair)} 5\n", "FFFF 12\n"]))

    # The mirror now serves a list signed earlier (seq 2), still valid: a rollback.
    shutil.rmtree(root)
    root = mirror(feed, served.root, "v0.1.0", "v0.2.0")
    sign_index(root, feed.keypair, seq=2)
    before = on_disk(env, installed)
    for result in (check(env, served.url, keypair=feed.keypair), update(installed, served.url)):
        error = refused(
            result, 3, "sequence number 2, lower than 5", "(a rollback to an older list)"
        )
        assert key_id(feed.keypair) in error and str(state) in error
    assert on_disk(env, installed) == before

    # The same number again is no rollback (a mirror that has not changed since).
    sign_index(root, feed.keypair, seq=5)
    again = check(env, served.url, keypair=feed.keypair)
    assert again.returncode == 10, again.stderr
    assert on_disk(env, installed) == before


def test_an_older_signed_release_is_a_downgrade(
    feed: Feed, env: dict[str, str], served: Site, tmp_path: Path
) -> None:
    """0.3.0 installed; a fresh, higher-seq list that names only older releases (signed
    earlier): refused, unless asked for by version with --allow-downgrade."""
    install = install_at(STABLE, feed, env, tmp_path)
    root = mirror(feed, served.root, "v0.1.0", "v0.2.0")
    sign_index(root, feed.keypair, seq=50)
    before = on_disk(env, install)
    for args in ((), ("--version", "0.2.0")):
        error = refused(
            update(install, served.url, *args),
            3,
            "mux 0.2.0 was signed",
            f"before the installed mux {STABLE}",
            "a downgrade (or an old release replayed)",
        )
        assert "--version 0.2.0 --allow-downgrade" in error
    assert on_disk(env, install) == before
    # The check offers nothing older than what is installed.
    up_to_date = install.run("update", "--check", "--json", "--source", served.url)
    assert up_to_date.returncode == 0, up_to_date.stderr
    assert json.loads(up_to_date.stdout)["update_available"] is False

    chosen = update(install, served.url, "--version", "0.2.0", "--allow-downgrade")
    assert chosen.returncode == 0, chosen.stderr
    assert install.active() == "0.2.0"
    record = json.loads((install.home / "install.json").read_text())
    signed = {
        version: int(
            (feed.releases[version] / "SHA256SUMS.minisig")
            .read_text()
            .split("timestamp:")[1]
            .split("\t")[0]
        )
        for version in ("0.2.0", STABLE)
    }
    assert {v: record["versions"][v]["signed_at"] for v in signed} == signed


# -- indefinite freeze: an expired list ----------------------------------------------------


def test_an_expired_list_is_refused_unless_asked_for_loudly(
    feed: Feed, installed: Install, env: dict[str, str], served: Site
) -> None:
    root = mirror(feed, served.root)
    expired_at = int(time.time()) - 86400
    sign_index(root, feed.keypair, seq=100, expires=expired_at)
    before = on_disk(env, installed)
    for result in (check(env, served.url, keypair=feed.keypair), update(installed, served.url)):
        refused(
            result,
            3,
            f"the feed {served.url} expired at {utc_text(expired_at)}",
            "(a mirror that stopped updating, or a replay)",
            "--allow-expired-feed",
            "MUX_ALLOW_EXPIRED_FEED=1",
        )
    assert on_disk(env, installed) == before

    # An air-gapped site takes it on purpose: a loud warning, and the seq recorded.
    allowed = check({**env, "MUX_ALLOW_EXPIRED_FEED": "1"}, served.url, keypair=feed.keypair)
    assert allowed.returncode == 10, allowed.stderr
    assert any(
        f"THE FEED {served.url} EXPIRED at {utc_text(expired_at)}" in note
        for note in json.loads(allowed.stdout)["notes"]
    )
    flag = update(installed, served.url, "--allow-expired-feed")
    assert flag.returncode == 0, flag.stderr
    assert f"mux: warning: THE FEED {served.url} EXPIRED at {utc_text(expired_at)}" in flag.stderr
    assert installed.active() == STABLE
    assert seq_file(env).read_text() == f"{key_id(feed.keypair)} 100\n"


def test_the_machine_policy_decides_the_expiry_and_the_keys_of_a_feed(
    feed: Feed, env: dict[str, str], served: Site, tmp_path: Path
) -> None:
    """The policy's allow_expired_feed and trusted_keys reach the index rules through the
    settings: false refuses the flag and the variable (exit 4), true accepts an expired index
    loudly, and its keys are the ones the index must verify with."""
    root = mirror(feed, served.root)
    expired_at = int(time.time()) - 86400
    sign_index(root, feed.keypair, seq=100, expires=expired_at)
    policy = tmp_path / "admin" / "policy.toml"
    policy.parent.mkdir()
    policed = {**env, "MUX_POLICY_FILE": str(policy)}
    before = on_disk(env)

    policy.write_text("allow_expired_feed = false\n")
    for extra_args, extra_env in (
        (["--allow-expired-feed"], {}),
        ([], {"MUX_ALLOW_EXPIRED_FEED": "1"}),
    ):
        result = check({**policed, **extra_env}, served.url, *extra_args, keypair=feed.keypair)
        refused(result, 4, f"the machine policy {policy} sets allow_expired_feed = false")
    refused(check(policed, served.url, keypair=feed.keypair), 3, "expired at")

    def policed_check() -> subprocess.CompletedProcess[str]:
        return run_in_process(["update", "--check", "--json"], policed)

    other = make_keypair(tmp_path / "other")
    policy.write_text(
        f'source = "{served.url}"\nallow_expired_feed = true\n'
        f'trusted_keys = ["{other.public_key}"]\n'
    )
    refused(policed_check(), 3, "is not signed by a key this mux trusts")
    assert on_disk(env) == before

    policy.write_text(
        f'source = "{served.url}"\nallow_expired_feed = true\n'
        f'trusted_keys = ["{feed.keypair.public_key}"]\n'
    )
    allowed = policed_check()
    assert allowed.returncode == 10, allowed.stderr
    doc = json.loads(allowed.stdout)
    assert doc["latest"]["version"] == STABLE
    assert any(f"THE FEED {served.url} EXPIRED at" in note for note in doc["notes"]), doc
    assert seq_file(env).read_text() == f"{key_id(feed.keypair)} 100\n"


# -- fast-forward: a stolen key signed a huge seq; rotating the key recovers ---------------


def test_a_fast_forwarded_counter_is_left_behind_by_rotating_the_key(
    feed: Feed, next_key: KeyPair, installed: Install, env: dict[str, str], served: Site
) -> None:
    old, new = key_id(feed.keypair), key_id(next_key)
    root = mirror(feed, served.root)
    # The attacker's list, signed with the stolen (current) key: seq 10**30, seen once.
    sign_index(root, feed.keypair, seq=10**30)
    assert check(env, served.url, keypair=feed.keypair).returncode == 10
    assert seq_file(env).read_text() == f"{old} {10**30}\n"

    # The project's genuine list under the old key can no longer get through...
    sign_index(root, feed.keypair, seq=5)
    before = on_disk(env, installed)
    refused(update(installed, served.url), 3, f"sequence number 5, lower than {10**30}", old)
    assert on_disk(env, installed) == before
    # ...so it signs with the next key, which the builds already trust: its counter starts
    # afresh, and the old key's line stays (and stays the maximum).
    sign_index(root, next_key, seq=1)
    recovered = update(installed, served.url)
    assert recovered.returncode == 0, recovered.stderr
    assert installed.active() == STABLE
    assert seq_file(env).read_text() == "".join(sorted([f"{old} {10**30}\n", f"{new} 1\n"]))


def sign_index_comment(root: Path, keypair: KeyPair, comment: str) -> None:
    """Sign ``root/releases.json`` with a trusted comment written by hand (as ``minisign -S
    -t`` would), whatever it says."""
    index = (root / "releases.json").read_bytes()
    (root / "releases.json.minisig").write_bytes(keypair.secret_key().sign(index, comment))


def test_a_seq_too_long_to_read_is_refused_and_a_record_of_one_locks_out_only_its_key(
    feed: Feed, next_key: KeyPair, installed: Install, env: dict[str, str], served: Site
) -> None:
    """A fast-forward with a seq of 5000 digits (more than Python reads as a number): it once
    crashed every mux with a traceback, and once an older install.sh had recorded it in
    feed-seq, every later check and update crashed too, whatever key signed their list, so
    rotating the key recovered nothing. Now such a seq is malformed (exit 3), and a recorded
    one counts as higher than any seq: the old key's lists are refused, the next key's are
    not."""
    old, new = key_id(feed.keypair), key_id(next_key)
    root = mirror(feed, served.root)
    now = int(time.time())
    huge = "9" * 5000
    sign_index_comment(
        root,
        feed.keypair,
        f"timestamp:{now}\tfile:releases.json\thashed\tseq:{huge}\texpires:{now + 86400}",
    )
    before = on_disk(env, installed)
    for result in (check(env, served.url, keypair=feed.keypair), update(installed, served.url)):
        refused(result, 3, "does not say file:releases.json, seq, expires and timestamp")
    assert on_disk(env, installed) == before

    # What an older install.sh recorded from that list (it read decimals of any length).
    seq_file(env).write_text(f"{old} {huge}\n")
    sign_index(root, feed.keypair, seq=5)
    before = on_disk(env, installed)
    for result in (check(env, served.url, keypair=feed.keypair), update(installed, served.url)):
        refused(result, 3, "lower than a number of more than 1000 digits", old, "(a rollback")
    assert on_disk(env, installed) == before
    # The project signs with its next key: that recovers, and the old key stays locked out.
    sign_index(root, next_key, seq=1)
    recovered = update(installed, served.url)
    assert recovered.returncode == 0, recovered.stderr
    assert installed.active() == STABLE
    lines = dict(line.split(" ") for line in seq_file(env).read_text().splitlines())
    assert lines[new] == "1"
    assert len(lines[old].lstrip("0")) > 1000  # still above any seq a list can carry
    sign_index(root, feed.keypair, seq=6)
    refused(check(env, served.url, keypair=feed.keypair), 3, "lower than a number of more")


# -- mix and match: the signed version, the manifest and the tag must agree ----------------


def _mixed(case: str, feed: Feed, root: Path, url: str) -> str:
    """v0.3.0 in ``root`` made of pieces that do not belong together; the expected words."""
    release = root / f"v{STABLE}"
    signature = f"the signature {url}/v{STABLE}/SHA256SUMS.minisig"
    if case == "signature-of-another-release":
        # 0.3.0's files, its sums signed again (with the real key) as being 0.2.0's.
        sign_release_dir(release, feed.keypair, version="0.2.0")
        return f"{signature} is for another version (0.2.0, not 0.3.0"
    if case == "another-release-under-this-tag":
        # All of 0.2.0, genuinely signed, served as v0.3.0.
        shutil.rmtree(release)
        shutil.copytree(feed.releases["0.2.0"], release)
        return f"{signature} is for another version (0.2.0, not 0.3.0"
    if case == "manifest-of-another-release":
        # 0.2.0's manifest and sums under a signature whose version says 0.3.0.
        shutil.rmtree(release)
        shutil.copytree(feed.releases["0.2.0"], release)
        sign_release_dir(release, feed.keypair, version=STABLE)
        return "manifest.json says version 0.2.0, expected 0.3.0"
    if case == "signature-without-a-version":
        sums = (release / "SHA256SUMS").read_bytes()
        comment = f"timestamp:{int(time.time())}\tfile:SHA256SUMS\thashed"
        (release / "SHA256SUMS.minisig").write_bytes(feed.keypair.secret_key().sign(sums, comment))
        return f"{signature} is for another version (none named, not 0.3.0"
    raise AssertionError(case)


@pytest.mark.parametrize(
    "case",
    [
        "signature-of-another-release",
        "another-release-under-this-tag",
        "manifest-of-another-release",
        "signature-without-a-version",
    ],
)
def test_mixed_releases_are_refused(
    case: str, feed: Feed, installed: Install, env: dict[str, str], served: Site
) -> None:
    root = mirror(feed, served.root, "v0.1.0", f"v{STABLE}")
    sign_index(root, feed.keypair, seq=10)
    text = _mixed(case, feed, root, served.url)
    before = on_disk(env, installed)
    for result in (check(env, served.url, keypair=feed.keypair), update(installed, served.url)):
        refused(result, 3, text)
    assert on_disk(env, installed) == before
    assert f"/v{STABLE}/{ARCHIVE}" not in served_paths(served)


# -- channel: the version string decides, and the highest stable wins ----------------------


def test_a_mislabelled_pre_release_is_never_offered_and_list_order_does_not_matter(
    feed: Feed, installed: Install, env: dict[str, str], served: Site
) -> None:
    root = mirror(feed, served.root, "v0.1.0", "v0.4.0rc1", f"v{STABLE}", "v0.2.0")
    # Every flag says "stable", and the pre-release and an old release come first.
    assert json.loads((root / "releases.json").read_text())["releases"][0]["tag"] == "v0.1.0"
    sign_index(root, feed.keypair, seq=10)
    offered = installed.run("update", "--check", "--json", "--source", served.url)
    assert offered.returncode == 10, offered.stderr
    assert json.loads(offered.stdout)["latest"]["version"] == STABLE
    result = update(installed, served.url)
    assert result.returncode == 0, result.stderr
    assert installed.active() == STABLE
    assert not any("0.4.0rc1" in path for path in served_paths(served))
    # Asked for by name, a pre-release is installed.
    pre = update(installed, served.url, "--version", "0.4.0rc1")
    assert pre.returncode == 0, pre.stderr
    assert installed.active() == "0.4.0rc1"


def test_a_list_with_only_pre_releases_offers_nothing(
    feed: Feed, env: dict[str, str], served: Site
) -> None:
    root = mirror(feed, served.root, "v0.4.0rc1")
    sign_index(root, feed.keypair, seq=10)
    refused(check(env, served.url, keypair=feed.keypair), 1, "names no stable release")
    pre = check(env, served.url, "--pre", keypair=feed.keypair)
    assert json.loads(pre.stdout)["latest"]["version"] == "0.4.0rc1", pre.stderr


def test_a_version_the_signed_list_does_not_name_is_refused(
    feed: Feed, installed: Install, env: dict[str, str], served: Site
) -> None:
    """The folder is there (a release someone put on the mirror), the signed list is not."""
    root = mirror(feed, served.root, "v0.1.0", f"v{STABLE}")
    shutil.copytree(feed.releases["0.2.0"], root / "v0.2.0")
    sign_index(root, feed.keypair, seq=10)
    before = on_disk(env, installed)
    text = f"the signed release list of {served.url} does not list v0.2.0"
    refused(check(env, served.url, "--version", "0.2.0", keypair=feed.keypair), 1, text)
    refused(update(installed, served.url, "--version", "0.2.0"), 1, text)
    assert "/v0.2.0/manifest.json" not in served_paths(served)
    assert on_disk(env, installed) == before


def test_github_latest_that_is_a_pre_release_by_its_version_is_refused(
    feed: Feed, env: dict[str, str]
) -> None:
    """GitHub's "latest" flag is not signed: a release not marked pre-release that is one by
    its version (0.4.0rc1 here) is not offered without --version."""
    with serve_github(FakeGitHub(root=feed.path, repo="acme/mux")) as github:
        github_env_ = {**env, **github_env(github)}
        result = run_in_process(["update", "--check", "--json"], github_env_)
        error = refused(
            result,
            3,
            "GitHub's latest release of acme/mux is v0.4.0rc1, a pre-release by its version",
        )
        assert "--version 0.4.0rc1" in error
        chosen = run_in_process(["update", "--check", "--json", "--version", STABLE], github_env_)
    assert chosen.returncode == 10, chosen.stderr


# -- invented releases: --check reports only what verifies ---------------------------------


def _invent(root: Path) -> None:
    """A made-up v9.9.9: a manifest, and no SHA256SUMS at all."""
    (root / "v9.9.9").mkdir()
    manifest = json.loads((root / f"v{STABLE}" / "manifest.json").read_text())
    manifest["version"] = "9.9.9"
    (root / "v9.9.9" / "manifest.json").write_text(json.dumps(manifest))


def test_an_invented_release_is_never_reported(
    feed: Feed, env: dict[str, str], served: Site, tmp_path: Path
) -> None:
    root = mirror(feed, served.root, "v0.1.0", f"v{STABLE}")
    sign_index(root, feed.keypair, seq=10)
    _invent(root)
    # The signed list does not name it: the newest is still 0.3.0, asked for it is refused.
    newest = check(env, served.url, keypair=feed.keypair)
    assert json.loads(newest.stdout)["latest"]["version"] == STABLE, newest.stderr
    refused(
        check(env, served.url, "--version", "9.9.9", keypair=feed.keypair),
        1,
        f"the signed release list of {served.url} does not list v9.9.9",
    )
    # Listing it means editing the signed list.
    doc = json.loads((root / "releases.json").read_text())
    doc["releases"].append({"tag": "v9.9.9", "prerelease": False})
    (root / "releases.json").write_text(json.dumps(doc))
    refused(
        check(env, served.url, keypair=feed.keypair), 3, "is not signed by a key this mux trusts"
    )
    assert not any(path.startswith("/v9.9.9/") for path in served_paths(served))

    # From GitHub (TLS decides the latest tag): without SHA256SUMS there is nothing to check
    # the manifest against, so nothing is reported; with a SHA256SUMS that does not list it
    # (or lists another digest), the same.
    github_root = tmp_path / "github"
    shutil.copytree(feed.releases[STABLE], github_root / f"v{STABLE}")
    _invent(github_root)
    with serve_github(FakeGitHub(root=github_root, repo="acme/mux")) as github:
        github_env_ = {**env, **github_env(github)}
        missing = run_in_process(["update", "--check", "--json"], github_env_)
        refused(missing, 1, "/v9.9.9/SHA256SUMS was not found (HTTP 404)")
        assert "9.9.9" not in missing.stdout.replace("v9.9.9/SHA256SUMS", "")
        shutil.copy(github_root / f"v{STABLE}" / "SHA256SUMS", github_root / "v9.9.9")
        other = run_in_process(["update", "--check"], github_env_)
        refused(other, 3, "verification failed (manifest): manifest.json has sha256")
        assert "is available" not in other.stdout


# -- endless data: every body capped; memory stays flat ------------------------------------


@pytest.mark.parametrize("status", [200, 404])
def test_an_endless_body_is_cut_and_memory_stays_flat(
    status: int, feed: Feed, env: dict[str, str], served: Site, tmp_path: Path
) -> None:
    """A chunked releases.json (or 404 page) that never ends: the list is cut at its 1 MiB
    cap, an error page at 64 KiB, the connection is closed, and the peak RSS is that of an
    ordinary check (it once grew with the body: a 600 MiB 404 page took 1.2 GiB)."""
    genuine = mirror(feed, tmp_path / "genuine")
    sign_index(genuine, feed.keypair, seq=10)
    command = [sys.executable, "-m", "updater", "update", "--check", "--json"]
    trust = ["--trust-key", feed.keypair.public_key]
    with serve_directory(genuine) as url:
        ordinary, baseline = max_rss([*command, "--source", url, *trust], env)
    assert ordinary.returncode == 10, ordinary.stderr

    served.root.mkdir()
    served.endless["/releases.json"] = status
    started = time.monotonic()
    result, peak = max_rss([*command, "--source", served.url, *trust], env)
    took = time.monotonic() - started
    if status == 200:
        refused(result, 1, f"{served.url}/releases.json is larger than 1048576 bytes")
    else:
        refused(result, 1, f"{served.url}/releases.json was not found (HTTP 404)")
    assert served.client_left.wait(10)
    assert served.sent["/releases.json"] < 64 << 20  # socket buffers hold some more, no more
    assert took < 20, took
    assert peak < baseline + 16 * 1024, (baseline, peak)


@contextmanager
def serve_answer(status: int, headers: dict[str, str]) -> Iterator[str]:
    """A loopback server answering every GET with ``status`` and ``headers`` (sent as
    Latin-1, as HTTP carries them) and an empty body."""

    class Answer(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

    with serve_handler(Answer) as url:
        yield url


@pytest.mark.parametrize(
    "headers",
    [
        {"Retry-After": "\u00b2"},  # "²": str.isdigit() says yes, float() says no
        {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "\u00b2"},
        {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1", "X-RateLimit-Limit": "\u00b2"},
        {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1", "X-RateLimit-Limit": "9" * 5000},
        {"Retry-After": "9" * 5000},
    ],
    ids=["retry-after", "reset", "limit", "limit-5000-digits", "retry-after-5000-digits"],
)
def test_a_rate_limit_answer_with_numbers_mux_cannot_read_is_one_error(
    headers: dict[str, str], feed: Feed, env: dict[str, str]
) -> None:
    """A mirror's 429 whose rate-limit headers hold a number Python's float()/int() refuse
    (a superscript two passes str.isdigit(); int() takes at most 4300 digits): one error
    line and, with --json, a JSON answer (it was a traceback and no JSON at all)."""
    with serve_answer(429, headers) as url:
        result = check(env, url, keypair=feed.keypair)
    refused(result, 1, f"{url}/releases.json")
    assert json.loads(result.stdout)["exit_code"] == 1


def test_an_archive_larger_than_its_signed_size_is_cut_and_removed(
    feed: Feed, installed: Install, env: dict[str, str], served: Site
) -> None:
    root = mirror(feed, served.root, f"v{STABLE}")
    sign_index(root, feed.keypair, seq=10)
    served.endless[f"/v{STABLE}/{ARCHIVE}"] = 200
    size = json.loads((root / f"v{STABLE}" / "manifest.json").read_text())["assets"][0]["size"]
    before = on_disk(env, installed)
    result = update(installed, served.url)
    refused(result, 3, f"{ARCHIVE} is larger than the {size} bytes it should have")
    assert served.client_left.wait(10)
    after = on_disk(env, installed)
    assert {k: v for k, v in after.items() if not k.endswith("feed-seq")} == {
        k: v for k, v in before.items() if not k.endswith("feed-seq")
    }
    assert installed.active() == "0.1.0"


# -- slow retrieval: a deadline per document, a minimum speed per archive ------------------


LIMITS = {"MUX_HTTP_DEADLINE": "3", "MUX_HTTP_MIN_SPEED": "1024", "MUX_HTTP_SPEED_WINDOW": "3"}


@pytest.mark.parametrize("what", ["trickled-list", "silent-list", "trickled-headers"])
def test_a_slow_document_gives_up_at_the_deadline(
    what: str, feed: Feed, env: dict[str, str], served: Site
) -> None:
    """A server that sends a byte every half second (or nothing, or its headers a byte at a
    time) holds mux no longer than MUX_HTTP_DEADLINE, all tries included."""
    root = mirror(feed, served.root, f"v{STABLE}")
    sign_index(root, feed.keypair, seq=10)
    if what == "trickled-list":
        served.trickle["/releases.json"] = 0.5
    elif what == "silent-list":
        served.silent.add("/releases.json")
    else:
        served.trickle_headers["/releases.json"] = 0.5
    before = on_disk(env)
    started = time.monotonic()
    result = check({**env, **LIMITS}, served.url, keypair=feed.keypair)
    took = time.monotonic() - started
    refused(
        result,
        1,
        f"could not download {served.url}/releases.json: no answer within 3 s (MUX_HTTP_DEADLINE)",
    )
    assert 3 <= took < 8, took
    assert served.client_left.wait(10)
    assert on_disk(env) == before


def test_a_slow_archive_gives_up_and_the_lock_is_released(
    feed: Feed, installed: Install, env: dict[str, str], served: Site
) -> None:
    """A trickled archive: mux update holds the install lock while it waits, gives up once
    less than MUX_HTTP_MIN_SPEED arrived over the window, and the lock is free as it exits."""
    root = mirror(feed, served.root, f"v{STABLE}")
    sign_index(root, feed.keypair, seq=10)
    served.trickle[f"/v{STABLE}/{ARCHIVE}"] = 0.5
    before = on_disk(env, installed)
    started = time.monotonic()
    process = subprocess.Popen(
        [str(installed.mux), "update", "--source", served.url],
        env={**installed.env, **LIMITS},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while served.sent.get(f"/v{STABLE}/{ARCHIVE}", 0) < 1:
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        assert not lock_is_free(installed.home)  # held while the archive trickles
    finally:
        stdout, stderr = process.communicate(timeout=60)
    took = time.monotonic() - started
    result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    refused(
        result,
        1,
        f"could not download {served.url}/v{STABLE}/{ARCHIVE}: slower than 1024 bytes/s over 3 s "
        "(MUX_HTTP_MIN_SPEED, MUX_HTTP_SPEED_WINDOW)",
    )
    assert f"downloading {ARCHIVE}" in stderr and f"downloaded {ARCHIVE}" not in stderr, stderr
    assert 3 <= took < 10, took
    assert lock_is_free(installed.home)
    assert on_disk(env, installed) == before


# -- terminal injection --------------------------------------------------------------------


C1 = "\u009b2K\u009d52;c;ZWNobyBwd25lZA==\u009c"  # the same, in 8-bit controls (CSI, OSC, ST)


def _is_control(char: str) -> bool:
    """C0 (but the line break that ends a line), DEL or C1: what a terminal acts on."""
    code = ord(char)
    return char != "\n" and (code < 0x20 or 0x7F <= code <= 0x9F)


def _no_controls(result: subprocess.CompletedProcess[str]) -> str:
    shown = result.stdout + result.stderr
    assert not [c for c in shown if _is_control(c)], shown
    return shown


def test_no_escape_byte_from_a_mirror_reaches_the_terminal(
    feed: Feed, env: dict[str, str], served: Site, tmp_path: Path
) -> None:
    """Values from the network, shown escaped in text and in JSON: a redirect to a URL with
    8-bit terminal controls (what HTTP lets through: 7-bit ones are refused as a header), a
    release's released_at and a manifest's target name carrying ESC sequences (from GitHub,
    where a build without a key checks no signature)."""
    served.root.mkdir()
    served.redirects["/releases.json"] = f"http://evil.invalid/{C1}"
    for args in ([], ["--json"]):
        result = run_in_process(
            [
                "update",
                "--check",
                "--source",
                served.url,
                "--trust-key",
                feed.keypair.public_key,
                *args,
            ],
            env,
        )
        refused(result, 1, "refusing http://evil.invalid/\\x9b2K\\x9d52;c;")
        _no_controls(result)

    github_root = tmp_path / "github"
    release = github_root / "v9.0.0"
    shutil.copytree(feed.releases[STABLE], release)
    manifest = json.loads((release / "manifest.json").read_text())
    manifest.update(version="9.0.0", released_at=f"2026-01-01T00:00:00Z{PAYLOAD}")
    (release / "manifest.json").write_text(json.dumps(manifest))
    republish(release, feed.keypair.secret_key())
    with serve_github(FakeGitHub(root=github_root, repo="acme/mux")) as github:
        for args in ([], ["--json"]):
            result = run_in_process(["update", "--check", *args], {**env, **github_env(github)})
            refused(result, 3, "released_at", "is not an RFC 3339 time", "\\x1b[2K")
            _no_controls(result)
        manifest.update(released_at="2026-01-01T00:00:00Z")
        for asset in manifest["assets"]:
            asset["target"] = f"evil{PAYLOAD}"
        (release / "manifest.json").write_text(json.dumps(manifest))
        republish(release, feed.keypair.secret_key())
        result = run_in_process(
            ["update", "--home", str(tmp_path / "home"), "--version", "9.0.0"],
            {**env, **github_env(github), "MUX_INSTALL_DIR": str(tmp_path / "bin")},
        )
    refused(result, 1, f"has no build for {TARGET}", "it has: evil\\x1b[2K\\r\\x1b]52;c;")
    _no_controls(result)


def test_no_escape_byte_from_a_server_reaches_the_terminal(
    feed: Feed, env: dict[str, str], tmp_path: Path
) -> None:
    """A live "mux server" whose status line carries terminal controls in every field mux
    prints: `mux update --check` and `mux server status` show them escaped."""
    from tests.support.servers import start_fake_server

    runtime = Path(env["XDG_RUNTIME_DIR"]) / "mux"
    runtime.mkdir(mode=0o700)
    status = json.dumps(
        {
            "service": "mux",
            "protocol_version": 99,
            "version": f"6.6.6{PAYLOAD}",
            "started_at": f"now{PAYLOAD}",
        }
    ).encode()
    head = f"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(status)}\r\n\r\n"
    evil = start_fake_server("raw", runtime / f"evil{ESC}[2K.sock", payload=head.encode() + status)
    genuine = mirror(feed, tmp_path / "genuine")
    sign_index(genuine, feed.keypair, seq=10)
    try:
        with serve_directory(genuine) as url:
            checked = run_in_process(
                ["update", "--check", "--source", url, "--trust-key", feed.keypair.public_key], env
            )
        listed = run_in_process(["server", "status"], env)
        as_json = run_in_process(["server", "status", "--json"], env)
    finally:
        evil.close()
    assert checked.returncode == 10, checked.stderr  # 0.3.0 is newer than this checkout
    assert "speak another protocol" in checked.stdout  # the server's line is shown...
    assert listed.returncode == 0, listed.stderr
    for result in (checked, listed):
        shown = _no_controls(result)
        assert "6.6.6\\x1b[2K\\r\\x1b]52;c;ZWNobyBwd25lZA==\\x07" in shown, shown
        assert "evil\\x1b[2K.sock" in shown, shown
    assert ESC not in as_json.stdout
    [server] = json.loads(as_json.stdout)["servers"]
    assert server["status"]["version"] == f"6.6.6{PAYLOAD}"  # JSON stays JSON, escaped by it


def _strict_json(text: str) -> Any:
    """What a strict JSON parser reads (jq, JSON.parse): no NaN, no Infinity, no overflow."""

    def finite(number: str) -> float:
        value = float(number)
        assert value not in (float("inf"), float("-inf")), number
        return value

    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse, parse_float=finite)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_server_s_nan_or_infinity_is_refused_and_never_written(
    feed: Feed, env: dict[str, str], tmp_path: Path, value: str
) -> None:
    """A "mux server" whose status line, or a watch event, holds a non-standard number: the
    server is reported as garbage, and `--check --json`, `server status --json` and `server
    watch` write only standard JSON."""
    from tests.support.servers import start_fake_server

    runtime = Path(env["XDG_RUNTIME_DIR"]) / "mux"
    runtime.mkdir(mode=0o700)
    good = b'{"service": "mux", "protocol_version": 1, "version": "0.3.0", "pid": 7'
    bad = good + b', "load": ' + value.encode() + b"}"
    head = b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(bad)
    stream = b"HTTP/1.0 200 OK\r\n\r\n"
    event = b'{"type": "update-available", "data": {"tag": ' + value.encode() + b"}}"
    fakes = [
        start_fake_server("raw", runtime / "nan.sock", payload=head + bad),
        start_fake_server("raw", runtime / "first.sock", payload=stream + bad + b"\n"),
    ]
    genuine = mirror(feed, tmp_path / "genuine")
    sign_index(genuine, feed.keypair, seq=10)
    try:
        with serve_directory(genuine) as url:
            checked = run_in_process(
                [
                    "update",
                    "--check",
                    "--json",
                    "--source",
                    url,
                    "--trust-key",
                    feed.keypair.public_key,
                ],
                {**env, "MUX_SERVER_URL": f"unix://{runtime / 'nan.sock'}"},
            )
        listed = run_in_process(["server", "status", "--json"], env)
        first = run_in_process(["server", "watch", "--name", "first"], env)
        for fake in fakes:
            fake.close()
        fakes = [
            start_fake_server(
                "raw", runtime / "event.sock", payload=stream + good + b"}\n" + event + b"\n"
            )
        ]
        streamed = run_in_process(["server", "watch", "--name", "event"], env)
    finally:
        for fake in fakes:
            fake.close()
    assert checked.returncode == 10, checked.stderr
    [server] = _strict_json(checked.stdout)["servers"]
    assert (server["state"], server["status"]) == ("garbage", None), server
    assert "standard JSON" in server["detail"], server
    servers = {Path(s["address"]).name: s for s in _strict_json(listed.stdout)["servers"]}
    assert servers["nan.sock"]["state"] == "garbage"
    assert "standard JSON" in servers["nan.sock"]["detail"]
    assert (first.returncode, first.stdout) == (1, ""), first.stderr
    assert "did not start its stream with a status line" in first.stderr, first.stderr
    assert "standard JSON" in first.stderr
    assert streamed.returncode == 1, streamed.stderr
    assert "not an event" in streamed.stderr and "standard JSON" in streamed.stderr
    printed = [_strict_json(line) for line in streamed.stdout.splitlines()]
    assert [line.get("type") for line in printed] == ["status", "server"]  # nothing of the event
    for result in (checked, listed, first, streamed):
        assert "Traceback" not in result.stderr


def test_no_control_byte_from_a_live_servers_fields_reaches_the_terminal(
    feed: Feed, env: dict[str, str], tmp_path: Path
) -> None:
    """A real server run from an installed build whose path (the executable the server and the
    OS report) and socket name carry terminal controls: every human line that shows them (the
    server's status, the versions an update keeps and why, the check, prune) escapes them, and
    every --json answer is valid JSON carrying the values as they are."""
    hostile = f"evil{ESC}[31m\x9b2J{BEL}"
    mux = install_at("0.1.0", feed, env, tmp_path / hostile)
    runtime = Path(mux.env["XDG_RUNTIME_DIR"]) / "mux"
    socket = runtime / f"s{ESC}]0;pwned{BEL}.sock"
    started = mux.run("server", "start", "--socket", str(socket))
    assert started.returncode == 0, started.stderr
    try:
        with serve_directory(feed.path) as url:
            results = {
                "status": mux.run("server", "status"),
                "update": update(mux, url, "--version", "0.2.0"),
                "update again": update(mux, url),  # 0.3.0: 0.1.0 is kept for the server
                "check": update(mux, url, "--check"),
                "prune": mux.run("update", "--prune"),
            }
            as_json = {
                "status": mux.run("server", "status", "--json"),
                "check": update(mux, url, "--check", "--json"),
                "prune": mux.run("update", "--prune", "--json"),
            }
    finally:
        stopped = mux.run("server", "stop", "--socket", str(socket))
    assert stopped.returncode == 0, stopped.stderr
    _no_controls(stopped)
    for name, result in results.items():
        shown = _no_controls(result)
        assert result.returncode == 0 and "Traceback" not in shown, (name, shown)
        if name != "update":  # the server and its build are named from the second update on
            assert "s\\x1b]0;pwned\\x07.sock" in shown, (name, shown)
    assert "evil\\x1b[31m\\x9b2J\\x07" in results["status"].stdout  # the executable
    assert "kept 0.1.0" in results["update again"].stdout
    for name, result in as_json.items():
        assert not [c for c in result.stdout if _is_control(c)], (name, result.stdout)
        doc = json.loads(result.stdout)  # valid JSON, the values unchanged inside it
        assert any(str(socket) in text for text in _strings(doc)), (name, doc)


def _strings(doc: object) -> set[str]:
    """Every string inside a JSON document."""
    if isinstance(doc, str):
        return {doc}
    items = doc.values() if isinstance(doc, dict) else doc if isinstance(doc, list) else ()
    return set().union(*(_strings(item) for item in items))


# -- signer identity: the attestation's URI compared exactly -------------------------------


@pytest.fixture(scope="module")
def sigstore(tmp_path_factory: pytest.TempPathFactory) -> FakeSigstore:
    return FakeSigstore.create(tmp_path_factory.mktemp("sigstore"))


def _attest(release: Path, version: str, sigstore: FakeSigstore, keypair: KeyPair, **how) -> None:
    subjects = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in release.iterdir()
        if p.name.endswith(".tar.gz") or p.name == "manifest.json"
    }
    bundle = sigstore.attest(subjects, repository="acme/mux", ref=f"refs/tags/v{version}", **how)
    (release / f"mux-{version}.sigstore.json").write_bytes(bundle)
    republish(release, keypair.secret_key())


@pytest.fixture(scope="module")
def github_releases(
    tmp_path_factory: pytest.TempPathFactory, sigstore: FakeSigstore
) -> tuple[Path, KeyPair]:
    """0.1.0 (attested by the release workflow) and 0.2.0 (not attested yet), for GitHub."""
    root = tmp_path_factory.mktemp("github")
    keypair = make_keypair(root / "keys")
    for version in ("0.1.0", "0.2.0"):
        release = make_release(
            root / "releases", version, protocol_version=1, keypair=keypair, repo="acme/mux"
        )
        if version == "0.1.0":
            _attest(release, version, sigstore, keypair)
    return root / "releases", keypair


@pytest.mark.parametrize(
    "signer",
    [
        "https://github.com/acme/mux/.github/workflows/release.yml?x.yml@refs/tags/v0.2.0",
        "https://github.com/acme/mux/.github/workflows/release.yml#x@refs/tags/v0.2.0",
        "https://evil@github.com/acme/mux/.github/workflows/release.yml@refs/tags/v0.2.0",
        "https://github.com:443/acme/mux/.github/workflows/release.yml@refs/tags/v0.2.0",
    ],
    ids=["query", "fragment", "userinfo", "port"],
)
def test_a_signer_uri_with_a_query_or_fragment_is_refused(
    signer: str,
    sigstore: FakeSigstore,
    github_releases: tuple[Path, KeyPair],
    env: dict[str, str],
    tmp_path: Path,
) -> None:
    """Stripping the query would read `release.yml?x.yml` as `release.yml`; GitHub issues no
    such URI, so it is refused (`gh attestation verify` compares the exact string too)."""
    releases, keypair = github_releases
    root = tmp_path / "releases"
    shutil.copytree(releases, root)
    _attest(root / "v0.2.0", "0.2.0", sigstore, keypair, signer_workflow=signer)
    with serve_github(FakeGitHub(root=root, repo="acme/mux")) as github:
        github_env_ = {
            **env,
            **github_env(github),
            "MUX_SIGSTORE_TRUSTED_ROOT": str(sigstore.trusted_root_path),
        }
        install = bootstrap(
            tmp_path, github_env_, source="github", version="0.1.0", public_key=keypair.public_key
        )
        before = on_disk(env, install)
        result = install.run("update")
    refused(
        result,
        3,
        "verification failed (attestation): the URI",
        "has a query, a fragment, user info or a port",
    )
    assert on_disk(env, install) == before
    assert install.active() == "0.1.0"


# -- secrets: no token and no signed URL in any output, cache or log -----------------------

SECRET = "ghp_4c0ffee5ecret0t0kenZZ"


def written_by_mux(env: dict[str, str]) -> str:
    """Everything mux may have kept: every file under the sandbox's cache and state dirs
    (the check cache, the rate limits, the ETag store, feed-seq)."""
    texts = []
    for variable in ("XDG_CACHE_HOME", "XDG_STATE_HOME"):
        for path in Path(env[variable]).rglob("*"):
            if path.is_file() and not path.is_symlink():
                texts.append(path.read_bytes().decode(errors="replace"))
    return "\n".join(texts)


@pytest.mark.parametrize(
    ("variable", "token"),
    [
        ("MUX_GITHUB_TOKEN", SECRET + "\n"),  # a CI secret or $(cat file) with its newline
        ("GITHUB_TOKEN", SECRET + '"\noutput = "/tmp/x'),  # what curl's config would obey
        ("MUX_GITHUB_TOKEN", f"Bearer {SECRET}"),  # white space
        ("GITHUB_TOKEN", SECRET + "\x7f"),
    ],
)
def test_a_token_http_cannot_carry_is_one_error_naming_its_variable_never_its_value(
    feed: Feed, env: dict[str, str], tmp_path: Path, variable: str, token: str
) -> None:
    """A token that is no header value: one usage error naming the variable (exit 2), never
    the value, in --check (text and JSON), mux update and a server's check child; nothing is
    sent with it, nothing cached (without the token the next check asks afresh)."""
    with serve_github(FakeGitHub(root=feed.path, repo="acme/mux")) as github:
        github_env_ = {**env, **github_env(github), variable: token}
        pinned = ["--version", STABLE]
        results = [
            run_in_process(["update", "--check", *pinned], github_env_),
            run_in_process(["update", "--check", "--json", *pinned], github_env_),
            run_in_process(
                ["update", *pinned, "--home", str(tmp_path / "home")],
                {**github_env_, "MUX_INSTALL_DIR": str(tmp_path / "bin")},
            ),
        ]
        for result in results:
            line = refused(result, 2, f"{variable} is not a token HTTP can carry")
            assert SECRET not in result.stdout + result.stderr, line
        child = run_in_process(["server", "check-updates"], github_env_)  # what a server logs
        assert json.loads(child.stdout)["ok"] is False, child.stdout
        assert variable in child.stdout and SECRET not in child.stdout + child.stderr
        assert not [r for r in github.requests if "Authorization" in r.headers]
        assert SECRET not in written_by_mux(env)
        assert not (tmp_path / "home" / "versions").exists()

        without = {k: v for k, v in github_env_.items() if k != variable}
        fresh = run_in_process(["update", "--check", "--json", "--max-age", "1h", *pinned], without)
    assert fresh.returncode == 10, fresh.stdout + fresh.stderr
    assert json.loads(fresh.stdout)["cached"] is False


class _SignedStorage:
    """A storage host that refuses every pre-signed link (an expired one)."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        storage = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                storage.paths.append(self.path)
                body = b"<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>"
                self.send_response(403)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.handler = Handler


SIGNED_QUERY = (
    "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAEXAMPLE5ECRET%2F20260101"
    "&X-Amz-Signature=5eb1e5f00dcafe0123456789abcdef&response-content-disposition=attachment"
)


def test_a_pre_signed_url_is_shown_and_cached_without_its_query(
    feed: Feed, env: dict[str, str], tmp_path: Path
) -> None:
    """GitHub sends a download to a storage host with a pre-signed link; that host refuses
    it (HTTP 403). The error names the URL without its query, in text, JSON, mux update and
    the check cache, and says no "needs a token": that host never sees one."""
    storage = _SignedStorage()
    with (
        serve_handler(storage.handler) as storage_url,
        serve_github(FakeGitHub(root=feed.path, repo="acme/mux")) as github,
    ):
        github.foreign_download_url = storage_url
        github.foreign_download_query = SIGNED_QUERY
        github_env_ = {
            **env,
            **github_env(github),
            "MUX_GITHUB_DOWNLOAD_HOSTS": storage_url.removeprefix("http://"),
        }
        pinned = ["--version", STABLE]
        results = [
            run_in_process(["update", "--check", *pinned], github_env_),
            run_in_process(["update", "--check", "--json", *pinned], github_env_),
            run_in_process(
                ["update", "--check", "--max-age", "1h", *pinned], github_env_
            ),  # cached
            run_in_process(
                ["update", *pinned, "--home", str(tmp_path / "home")],
                {**github_env_, "MUX_INSTALL_DIR": str(tmp_path / "bin")},
            ),
        ]
    assert storage.paths and all("X-Amz-Signature=" in path for path in storage.paths)
    for result in results:
        line = refused(result, 1, f"{storage_url}/v{STABLE}/", "refused access (HTTP 403)")
        output = result.stdout + result.stderr
        for secret in ("X-Amz", "5eb1e5f00dcafe", "AKIAEXAMPLE", "?"):
            assert secret not in output, line
        assert "needs a token" not in output and "set MUX_GITHUB_TOKEN" not in output
    assert "cached result" in results[2].stderr
    assert "X-Amz" not in written_by_mux(env) and "5eb1e5f00dcafe" not in written_by_mux(env)


# -- the lock file -------------------------------------------------------------------------


def test_the_lock_file_is_never_removed_so_every_run_locks_the_same_inode(
    feed: Feed, installed: Install, env: dict[str, str], served: Site
) -> None:
    """A failed update and a successful one leave the lock file where it was (same inode),
    and a run that finds it held waits, then says so."""
    lock = installed.home / ".lock"
    inode = lock.stat().st_ino
    root = mirror(feed, served.root)
    sign_index(root, feed.keypair, seq=10)
    archive = root / f"v{STABLE}" / ARCHIVE
    genuine = archive.read_bytes()
    archive.write_bytes(genuine[:-1] + bytes([genuine[-1] ^ 1]))
    refused(update(installed, served.url), 3, "verification failed (digest)")
    assert lock.stat().st_ino == inode and lock.read_bytes() == b""
    archive.write_bytes(genuine)
    done = update(installed, served.url)
    assert done.returncode == 0, done.stderr
    assert lock.stat().st_ino == inode
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        busy = update(
            installed,
            served.url,
            "--version",
            "0.2.0",
            "--allow-downgrade",
            env={**installed.env, "MUX_LOCK_TIMEOUT": "1"},
        )
    refused(busy, 1, "another mux update is running")
    assert installed.active() == STABLE and lock.stat().st_ino == inode


# -- mux and install.sh agree --------------------------------------------------------------


def test_mux_and_install_sh_pick_the_same_release_and_share_the_seq_state(
    feed: Feed, next_key: KeyPair, sandbox_env: dict[str, str], served: Site, tmp_path: Path
) -> None:
    """One feed, both clients: install.sh installs the newest stable release (the list is
    out of order and its flags lie), the installed mux says that very release is the newest,
    and each refuses a list older than the one the other saw."""
    root = mirror(feed, served.root, "v0.1.0", "v0.4.0rc1", f"v{STABLE}", "v0.2.0")
    sign_index(root, feed.keypair, seq=10)
    script = render_install_sh(
        tmp_path / "install.sh", keys=[feed.keypair.public_key, next_key.public_key]
    )
    shell_env = {
        **dict(sandbox_env),
        "PATH": str(make_toolbox(tmp_path / "tools")),
        "SHELL": "/bin/sh",
        "MUX_DOWNLOAD_URL": served.url,
    }
    installed_by_script = run_install(script, env=shell_env)
    assert installed_by_script.returncode == 0, installed_by_script.stderr
    state = seq_file(sandbox_env)
    assert state.read_text() == f"{key_id(feed.keypair)} 10\n"
    home = Path(sandbox_env["HOME"])
    mux = home / ".local" / "bin" / "mux"
    assert Path(os.readlink(mux)).parent.name == STABLE

    env = dict(sandbox_env)
    same = run_mux(
        ["update", "--check", "--json", "--source", served.url], env, executable=[str(mux)]
    )
    assert same.returncode == 0, same.stderr  # up to date: the same release
    assert json.loads(same.stdout)["latest"]["tag"] == f"v{STABLE}"

    # A list older than what install.sh saw: mux refuses it.
    sign_index(root, feed.keypair, seq=9)
    refused(
        run_mux(["update", "--check", "--source", served.url], env, executable=[str(mux)]),
        3,
        "sequence number 9, lower than 10",
    )
    # mux sees seq 11 (and records it); install.sh then refuses 10.
    sign_index(root, feed.keypair, seq=11)
    assert (
        run_mux(
            ["update", "--check", "--source", served.url], env, executable=[str(mux)]
        ).returncode
        == 0
    )
    assert state.read_text() == f"{key_id(feed.keypair)} 11\n"
    sign_index(root, feed.keypair, seq=10)
    again = run_install(script, env=shell_env)
    assert again.returncode == 3, again.stderr
    assert "sequence number 10, lower than 11" in again.stderr
    # The record install.sh wrote carries the signed time mux compares with.
    record = json.loads((home / ".local" / "share" / "mux" / "install.json").read_text())
    signed = (feed.releases[STABLE] / "SHA256SUMS.minisig").read_text()
    assert record["versions"][STABLE]["signed_at"] == int(
        signed.split("timestamp:")[1].split("\t")[0]
    )
