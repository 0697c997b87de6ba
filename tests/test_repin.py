"""release/upkeep/repin.py against fixture releases on a loopback GitHub (tests/support/github.py).

Every refusal must leave pins.toml and the notices byte-for-byte unchanged, with no temp file
left behind.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from release.bill.components import LicenceText
from release.bill.third_party_notices import Distribution, generate_notices
from release.pins.pinfile import check_pins, load_pins
from release.publish.formats import format_releases_json, format_sha256sums
from release.rehearsal.fake_sigstore import FakeSigstore
from release.upkeep.repin import (
    Checkout,
    RepinRefused,
    RepinResult,
    Upstream,
    repin,
    write_together,
)
from tests.support.github import FakeGitHub, serve_github
from updater.errors import NetworkError, UsageError, VerificationError
from updater.formats.models import FeedRelease

REPO = "acme/libfoo"
ASSET = "libfoo-x86_64.tar.gz"
WORKFLOW = ".github/workflows/release.yml"
OLD_SHA = hashlib.sha256(b"libfoo v1.0.0").hexdigest()

PINS = f"""\
# Prebuilt artifacts (test copy). This comment must survive every rewrite.
schema = 1

# libfoo: the terminal library the server links. Never pin v0.9.x (it leaks fds).
[artifacts.libfoo]
repository = "{REPO}"  # the producer
asset = "{ASSET}"
license = "MIT"
license_file = "licenses/libfoo.txt"
license_url = "https://github.com/acme/libfoo/blob/0123abc/LICENSE"
tag = "v1.0.0"  # moved by repin only
url = "https://github.com/{REPO}/releases/download/v1.0.0/{ASSET}"
sha256 = "{OLD_SHA}"
size = 13

[artifacts.libfoo.attestation]
repository = "{REPO}"
signer_workflow = "{WORKFLOW}"

# libbar must never change when libfoo moves.
[artifacts.libbar]
repository = "acme/libbar"
asset = "libbar.zip"
license = "Apache-2.0"
license_file = "licenses/libbar.txt"
tag = "v3.0.0"
url = "https://github.com/acme/libbar/releases/download/v3.0.0/libbar.zip"
sha256 = "{"cd" * 32}"
size = 99

[artifacts.libbar.attestation]
repository = "acme/libbar"
signer_workflow = ".github/workflows/build.yml"
"""

DISTRIBUTIONS = [
    Distribution(
        "zz-dep",
        "1.0",
        "MIT",
        (LicenceText("zz_dep-1.0.dist-info/licenses/LICENSE", "MIT text\n"),),
    )
]


def asset_bytes(tag: str) -> bytes:
    # Big enough to span several chunks, distinct per tag.
    return f"libfoo {tag}".encode() * 20_000 if tag != "v1.0.0" else b"libfoo v1.0.0"


@pytest.fixture(scope="module")
def sigstore(tmp_path_factory: pytest.TempPathFactory) -> FakeSigstore:
    return FakeSigstore.create(tmp_path_factory.mktemp("sigstore"))


@dataclass
class World:
    root: Path
    releases: Path
    fake: FakeGitHub
    sigstore: FakeSigstore

    @property
    def pins_path(self) -> Path:
        return self.root / "release" / "pins.toml"

    @property
    def notices_path(self) -> Path:
        return self.root / "THIRD_PARTY_NOTICES.md"

    def publish(
        self,
        tag: str,
        *,
        sums: bool = True,
        attest: dict[str, Any] | None = None,
        data: bytes | None = None,
    ) -> str:
        """A release of libfoo with its asset, SHA256SUMS and an attestation; its sha256.

        ``attest`` overrides the attestation's identity (``{}``: publish no attestation).
        """
        folder = self.releases / tag
        folder.mkdir(parents=True)
        payload = data if data is not None else asset_bytes(tag)
        (folder / ASSET).write_bytes(payload)
        digest = hashlib.sha256(payload).hexdigest()
        if sums:
            (folder / "SHA256SUMS").write_bytes(format_sha256sums({ASSET: digest}))
        identity: dict[str, Any] = {
            "repository": REPO,
            "signer_workflow": WORKFLOW,
            "ref": f"refs/tags/{tag}",
        }
        identity.update(attest or {})
        if attest is None or attest:
            self.fake.attestations[digest] = self.sigstore.attest({ASSET: digest}, **identity)
        return digest

    def snapshot(self) -> dict[str, bytes]:
        """Every file of the checkout copy, so a refusal can be shown to change nothing."""
        return {
            str(path.relative_to(self.root)): path.read_bytes()
            for path in sorted(self.root.rglob("*"))
            if path.is_file()
        }

    def repin(
        self, tag: str | None = "v1.1.0", source: str | None = None, **options: Any
    ) -> RepinResult:
        options.setdefault("latest", tag is None)
        return repin(
            "libfoo",
            tag=tag,
            checkout=Checkout(self.pins_path, self.notices_path, DISTRIBUTIONS),
            upstream=Upstream(
                source=source,
                github_url=self.fake.web_url,
                api_url=self.fake.api_url,
                trusted_root=self.sigstore.trusted_root_path,
            ),
            **options,
        )


@pytest.fixture(scope="module")
def github(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGitHub]:
    """One loopback GitHub for the module (stopping one takes a second); reset per test."""
    fake = FakeGitHub(root=tmp_path_factory.mktemp("no-releases"), repo=REPO)
    with serve_github(fake):
        yield fake


def reset(fake: FakeGitHub, releases: Path) -> FakeGitHub:
    """Every knob back to its default, the servers' URLs kept."""
    web_url, api_url = fake.web_url, fake.api_url
    FakeGitHub.__init__(fake, root=releases, repo=REPO)
    fake.web_url, fake.api_url = web_url, api_url
    return fake


@pytest.fixture
def world(
    tmp_path: Path,
    sigstore: FakeSigstore,
    github: FakeGitHub,
    monkeypatch: pytest.MonkeyPatch,
) -> World:
    for variable in ("GITHUB_TOKEN", "MUX_GITHUB_TOKEN", "MUX_GITHUB_URL", "MUX_GITHUB_API_URL"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv("MUX_SIGSTORE_TRUSTED_ROOT", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the sources' ETag cache
    monkeypatch.setenv("MUX_HTTP_BACKOFF", "0.01")
    root = tmp_path / "checkout"
    (root / "release" / "licenses").mkdir(parents=True)
    (root / "release" / "licenses" / "libfoo.txt").write_text("libfoo MIT licence\n")
    (root / "release" / "licenses" / "libbar.txt").write_text("libbar Apache licence\n")
    (root / "release" / "pins.toml").write_text(PINS)
    notices = generate_notices(root / "release" / "pins.toml", distributions=DISTRIBUTIONS)
    (root / "THIRD_PARTY_NOTICES.md").write_text(notices)
    releases = tmp_path / "releases"
    releases.mkdir()
    world = World(root=root, releases=releases, fake=reset(github, releases), sigstore=sigstore)
    world.publish("v1.0.0")
    return world


def assert_unchanged(world: World, before: dict[str, bytes]) -> None:
    assert world.snapshot() == before  # same files, same bytes: no rewrite, no temp file


# --- the happy path -------------------------------------------------------------------------


def test_repin_rewrites_only_the_pins_fields_and_regenerates_the_notices(world: World) -> None:
    digest = world.publish("v1.1.0")
    size = len(asset_bytes("v1.1.0"))
    result = world.repin("v1.1.0")

    assert (
        result.changed,
        result.written,
        result.tag,
        result.single.sha256,
        result.single.size,
    ) == (
        True,
        True,
        "v1.1.0",
        digest,
        size,
    )
    assert result.single.digests == ("computed", "GitHub's asset digest", "SHA256SUMS")
    assert (
        result.single.attestation.repository == REPO
        and result.single.attestation.signer_ref == "refs/tags/v1.1.0"
    )
    new_url = f"{world.fake.web_url}/{REPO}/releases/download/v1.1.0/{ASSET}"
    expected = (
        PINS.replace('tag = "v1.0.0"  # moved', 'tag = "v1.1.0"  # moved')
        .replace(f"https://github.com/{REPO}/releases/download/v1.0.0/{ASSET}", new_url)
        .replace(OLD_SHA, digest)
        .replace("size = 13\n", f"size = {size}\n")
    )
    assert world.pins_path.read_text() == expected  # comments, order and libbar untouched

    notices = world.notices_path.read_text()
    assert f"<!-- pin: libfoo tag=v1.1.0 sha256={digest} -->" in notices
    assert OLD_SHA not in notices
    assert notices == generate_notices(world.pins_path, distributions=DISTRIBUTIONS)
    assert check_pins(world.pins_path, notices_path=world.notices_path) == []
    assert result.describe()[-1].startswith("commit: repin libfoo: v1.0.0 -> v1.1.0, sha256 ")

    # The download followed GitHub's redirect to the download host, like a real release asset.
    web_paths = [r.path for r in world.fake.requests_to("web")]
    assert f"/{REPO}/releases/download/v1.1.0/{ASSET}" in web_paths
    assert f"/_dl/v1.1.0/{ASSET}" in [r.path for r in world.fake.requests_to("api")]


def test_latest_follows_the_releases_latest_redirect(world: World) -> None:
    world.publish("v1.1.0")
    digest = world.publish("v1.2.0")
    result = world.repin(None)
    assert (result.tag, result.single.sha256) == ("v1.2.0", digest)
    assert load_pins(world.pins_path)[1].tag == "v1.2.0"  # sorted by name: libbar, libfoo


def test_dry_run_verifies_and_shows_the_diff_but_writes_nothing(world: World) -> None:
    digest = world.publish("v1.1.0")
    before = world.snapshot()
    result = world.repin("v1.1.0", dry_run=True)
    assert (result.changed, result.written) == (True, False)
    assert f'+sha256 = "{digest}"' in result.pins_diff
    assert f'-sha256 = "{OLD_SHA}"' in result.pins_diff
    assert f"+<!-- pin: libfoo tag=v1.1.0 sha256={digest} -->" in result.notices_diff
    assert "dry run: nothing written; this would change:" in result.describe()
    assert_unchanged(world, before)


def test_repinning_the_current_release_changes_nothing(world: World) -> None:
    world.publish("v1.1.0")
    world.repin("v1.1.0")
    before = world.snapshot()
    result = world.repin("v1.1.0")
    assert (result.changed, result.written) == (False, False)
    assert_unchanged(world, before)


def test_a_release_without_sha256sums_relies_on_the_other_digests(world: World) -> None:
    world.publish("v1.1.0", sums=False)
    assert world.repin("v1.1.0").single.digests == ("computed", "GitHub's asset digest")


def test_an_allowed_downgrade_goes_through(world: World) -> None:
    world.publish("v1.1.0")
    world.repin("v1.1.0")
    result = world.repin("v1.0.0", allow_downgrade=True)
    assert (result.tag, result.single.sha256, result.old_tag) == ("v1.0.0", OLD_SHA, "v1.1.0")


# --- refusals: each leaves every file unchanged --------------------------------------------


def test_an_api_digest_that_disagrees_is_refused(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.publish("v1.1.0")
    real_release_doc = world.fake.release_doc

    def lying_release_doc(tag: str) -> dict[str, Any]:
        doc = real_release_doc(tag)
        for asset in doc["assets"]:
            asset["digest"] = "sha256:" + "0" * 64
        return doc

    monkeypatch.setattr(world.fake, "release_doc", lying_release_doc)
    before = world.snapshot()
    with pytest.raises(
        VerificationError, match="digest mismatch: GitHub's asset digest says sha256 0000"
    ):
        world.repin("v1.1.0")
    assert_unchanged(world, before)


def test_a_sha256sums_line_that_disagrees_is_refused(world: World) -> None:
    world.publish("v1.1.0")
    (world.releases / "v1.1.0" / "SHA256SUMS").write_bytes(format_sha256sums({ASSET: "1" * 64}))
    before = world.snapshot()
    with pytest.raises(VerificationError, match="digest mismatch: SHA256SUMS says sha256 1111"):
        world.repin("v1.1.0")
    assert_unchanged(world, before)


def test_a_sha256sums_that_does_not_list_the_asset_is_refused(world: World) -> None:
    world.publish("v1.1.0")
    (world.releases / "v1.1.0" / "SHA256SUMS").write_bytes(
        format_sha256sums({"other.tar.gz": "1" * 64})
    )
    before = world.snapshot()
    with pytest.raises(VerificationError, match=f"SHA256SUMS does not list {ASSET}"):
        world.repin("v1.1.0")
    assert_unchanged(world, before)


@pytest.mark.parametrize(
    ("attest", "reason"),
    [
        ({"repository": "evil/libfoo"}, "source repository is https://github.com/evil/libfoo"),
        (
            {"signer_workflow": ".github/workflows/other.yml"},
            "signer workflow is .github/workflows/other.yml",
        ),
        ({"ref": "refs/heads/main"}, "refs/heads/main"),
        ({"runner_environment": "self-hosted"}, "runner environment is self-hosted"),
    ],
    ids=["another-repository", "another-workflow", "another-ref", "self-hosted"],
)
def test_an_attestation_from_another_identity_is_refused(
    world: World, attest: dict[str, str], reason: str
) -> None:
    world.publish("v1.1.0", attest=attest)
    before = world.snapshot()
    with pytest.raises(VerificationError, match=reason):
        world.repin("v1.1.0")
    assert_unchanged(world, before)


def test_an_attestation_from_an_untrusted_sigstore_is_refused(world: World, tmp_path: Path) -> None:
    world.publish("v1.1.0")
    other = FakeSigstore.create(tmp_path / "other-sigstore")
    digest = hashlib.sha256(asset_bytes("v1.1.0")).hexdigest()
    world.fake.attestations[digest] = other.attest(
        {ASSET: digest}, repository=REPO, signer_workflow=WORKFLOW, ref="refs/tags/v1.1.0"
    )
    before = world.snapshot()
    with pytest.raises(VerificationError, match="attestation"):
        world.repin("v1.1.0")
    assert_unchanged(world, before)


def test_an_unattested_asset_is_refused(world: World) -> None:
    world.publish("v1.1.0", attest={})
    before = world.snapshot()
    with pytest.raises(VerificationError, match="is not attested"):
        world.repin("v1.1.0")
    assert_unchanged(world, before)


def test_a_downgrade_is_refused_without_the_flag(world: World) -> None:
    world.publish("v0.9.0")
    before = world.snapshot()
    with pytest.raises(RepinRefused, match=r"v0.9.0 is older than the pinned v1.0.0") as caught:
        world.repin("v0.9.0")
    assert caught.value.hint == "pass --allow-downgrade if that is what you want"
    assert world.fake.requests == []  # refused before any download
    assert_unchanged(world, before)


@pytest.mark.parametrize("lie_length", [False, True], ids=["closed-early", "content-length-lie"])
def test_a_truncated_download_is_refused(world: World, lie_length: bool) -> None:
    world.publish("v1.1.0")
    world.fake.truncate = {ASSET: 1000}  # every answer, resumed ones too, stops after 1000 bytes
    world.fake.lie_length = lie_length
    before = world.snapshot()
    with pytest.raises(
        NetworkError, match=rf"download of .*/{ASSET} (failed after|stopped at) \d+ of"
    ):
        world.repin("v1.1.0")
    downloads = [r for r in world.fake.requests_to("api") if r.path.startswith("/_dl/v1.1.0/")]
    assert len(downloads) > 1  # it retried before giving up
    if not lie_length:
        assert "Range" in downloads[-1].headers  # ... resuming after the bytes it had
    assert_unchanged(world, before)


def test_an_asset_replaced_under_the_pinned_tag_is_refused(world: World) -> None:
    (world.releases / "v1.0.0" / ASSET).write_bytes(b"replaced")
    (world.releases / "v1.0.0" / "SHA256SUMS").write_bytes(
        format_sha256sums({ASSET: hashlib.sha256(b"replaced").hexdigest()})
    )
    before = world.snapshot()
    with pytest.raises(VerificationError, match="changed since it was pinned"):
        world.repin("v1.0.0")
    assert_unchanged(world, before)


def test_an_asset_over_the_size_cap_is_refused(world: World) -> None:
    world.publish("v1.1.0")
    world.pins_path.write_text(PINS.replace("size = 13\n", "size = 13\nmax_bytes = 1000\n"))
    before = world.snapshot()
    with pytest.raises(RepinRefused, match="more than max_bytes"):
        world.repin("v1.1.0")
    assert_unchanged(world, before)


def test_a_redirect_to_a_foreign_host_is_refused(world: World) -> None:
    world.publish("v1.1.0")
    world.fake.foreign_download_url = "http://localhost:9/_dl"
    before = world.snapshot()
    with pytest.raises(NetworkError, match="localhost:9 is not an allowed release host"):
        world.repin("v1.1.0")
    assert_unchanged(world, before)


def test_a_missing_release_or_asset_is_refused(world: World) -> None:
    before = world.snapshot()
    with pytest.raises(NetworkError, match="HTTP 404"):
        world.repin("v1.5.0")
    world.publish("v1.1.0")
    (world.releases / "v1.1.0" / ASSET).rename(world.releases / "v1.1.0" / "renamed.tar.gz")
    with pytest.raises(NetworkError, match=f"has no asset {ASSET}"):
        world.repin("v1.1.0")
    assert_unchanged(world, before)


def test_bad_requests_are_usage_errors(world: World) -> None:
    before = world.snapshot()
    with pytest.raises(UsageError, match="exactly one of --tag TAG and --latest"):
        world.repin("v1.1.0", latest=True)
    with pytest.raises(UsageError, match="does not end in a version"):
        world.repin("nightly")
    with pytest.raises(Exception, match="has no artifact named 'nope'"):
        repin("nope", tag="v1.0.0", checkout=Checkout(world.pins_path, world.notices_path))
    assert_unchanged(world, before)


def test_a_failure_while_writing_changes_neither_file(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.publish("v1.1.0")
    before = world.snapshot()
    real_replace = os.replace
    calls: list[str] = []

    def failing_second_replace(source: Any, target: Any) -> None:
        if Path(target).is_relative_to(world.root):  # not the sources' ETag cache
            calls.append(str(target))
            if len(calls) == 2:
                raise OSError(28, "No space left on device")
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", failing_second_replace)
    with pytest.raises(OSError, match="No space left"):
        world.repin("v1.1.0")
    monkeypatch.undo()
    assert calls[:2] == [str(world.pins_path), str(world.notices_path)]  # pins.toml went first
    assert_unchanged(world, before)  # ... and was put back


def test_write_together_creates_and_removes_nothing_else(tmp_path: Path) -> None:
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("old a")
    write_together([(first, "new a"), (second, "new b")])
    assert (first.read_text(), second.read_text()) == ("new a", "new b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]


# --- a mirror ---------------------------------------------------------------------------------


def test_repin_from_a_mirror_folder_requires_sums_and_an_attestation_asset(world: World) -> None:
    mirror = world.root.parent / "mirror"
    digest = world.publish("v1.1.0")
    bundle = world.fake.attestations[digest]
    (mirror / "v1.1.0").mkdir(parents=True)
    (mirror / "v1.1.0" / ASSET).write_bytes(asset_bytes("v1.1.0"))
    (mirror / "v1.1.0" / f"{ASSET}.sigstore.json").write_bytes(bundle)
    (mirror / "releases.json").write_bytes(format_releases_json([FeedRelease("v1.1.0", False)]))
    before = world.snapshot()

    with pytest.raises(NetworkError, match="SHA256SUMS"):  # a mirror has no API digest
        world.repin("v1.1.0", source=str(mirror))
    (mirror / "v1.1.0" / "SHA256SUMS").write_bytes(format_sha256sums({ASSET: digest}))
    with pytest.raises(VerificationError, match="a mirror has no attestations API"):
        world.repin(None, source=str(mirror))
    assert_unchanged(world, before)

    world.pins_path.write_text(
        PINS.replace("size = 13\n", f'size = 13\nattestation_asset = "{ASSET}.sigstore.json"\n')
    )
    result = world.repin(None, source=str(mirror))
    assert result.single.digests == ("computed", "SHA256SUMS")
    # The pin names the artifact on GitHub, not the mirror that served it.
    assert result.single.url == f"https://github.com/{REPO}/releases/download/v1.1.0/{ASSET}"
    assert world.fake.requests == []


# --- the command ------------------------------------------------------------------------------


def run_cli(world: World, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {**env, "MUX_GITHUB_URL": world.fake.web_url, "MUX_GITHUB_API_URL": world.fake.api_url}
    command = [sys.executable, "-c", "from release.cli import main; main()", "repin", "libfoo"]
    options = [
        "--pins",
        str(world.pins_path),
        "--notices",
        str(world.notices_path),
        "--trusted-root",
        str(world.sigstore.trusted_root_path),
    ]
    return subprocess.run(
        [*command, *args, *options],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_command_repins_and_refuses_with_one_line_and_exit_3(
    world: World, sandbox_env: dict[str, str]
) -> None:
    world.publish("v1.1.0", attest={"signer_workflow": ".github/workflows/other.yml"})
    before = world.snapshot()
    refused = run_cli(world, sandbox_env, "--tag", "v1.1.0")
    assert refused.returncode == 3, refused.stderr
    progress = ("[", "downloading ", "downloaded ")  # step lines, the downloader's two lines
    (error,) = [line for line in refused.stderr.splitlines() if not line.startswith(progress)]
    assert error.startswith("mux-release: error: attestation: signer workflow is")
    assert_unchanged(world, before)

    digest = world.publish("v1.2.0")
    done = run_cli(world, sandbox_env, "--latest")
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout.splitlines()[0]
        == f"libfoo: v1.2.0 sha256 {digest} ({len(asset_bytes('v1.2.0'))} bytes)"
    )
    assert f'sha256 = "{digest}"' in world.pins_path.read_text()
    # The command regenerated the notices from the installed distributions, for the new pin.
    notices = world.notices_path.read_text()
    assert f"<!-- pin: libfoo tag=v1.2.0 sha256={digest} -->" in notices
    assert "### httpx " in notices
    assert check_pins(world.pins_path, notices_path=world.notices_path) == []
