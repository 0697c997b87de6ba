"""``mux update`` from a loopback GitHub impersonator, with Sigstore attestations.

The attestations come from a throwaway Sigstore instance (release.rehearsal.fake_sigstore) whose
trusted root mux is pointed at with MUX_SIGSTORE_TRUSTED_ROOT; everything else (signature,
digests, GitHub's asset digest, the attestation policy) is the production path.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

from release.rehearsal.fake_sigstore import FakeSigstore
from tests.support.attestations import REPO, attest
from tests.support.github import FakeGitHub, github_env, serve_github
from tests.support.installs import Install, bootstrap, republish, snapshot
from tests.support.releases import KeyPair, make_keypair, make_release
from updater.formats import models


def assert_unchanged(install: Install, before: dict[str, str]) -> None:
    """The install is byte for byte as it was (the lock file aside) and still runs 0.1.0."""
    after = snapshot(install.home, install.bin_dir)
    assert {k: v for k, v in after.items() if not k.endswith("/.lock")} == {
        k: v for k, v in before.items() if not k.endswith("/.lock")
    }
    assert install.active() == "0.1.0"


@pytest.fixture(scope="module")
def sigstore(tmp_path_factory: pytest.TempPathFactory) -> FakeSigstore:
    return FakeSigstore.create(tmp_path_factory.mktemp("sigstore"))


@pytest.fixture(scope="module")
def keypair(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_keypair(tmp_path_factory.mktemp("keys"))


@pytest.fixture
def github(tmp_path: Path, keypair: KeyPair, sigstore: FakeSigstore):
    root = tmp_path / "releases"
    for version, protocol in (("0.1.0", 1), ("0.2.0", 2)):
        release = make_release(root, version, protocol_version=protocol, keypair=keypair, repo=REPO)
        attest(release, keypair, sigstore)
    with serve_github(FakeGitHub(root=root, repo=REPO)) as fake:
        yield fake


@pytest.fixture
def installed(tmp_path: Path, sandbox_env, github: FakeGitHub, sigstore, keypair) -> Install:
    env = {
        **sandbox_env,
        **github_env(github),
        "MUX_SIGSTORE_TRUSTED_ROOT": str(sigstore.trusted_root_path),
    }
    return bootstrap(tmp_path, env, source="github", version="0.1.0", public_key=keypair.public_key)


def test_github_update_verifies_every_layer(installed: Install, github: FakeGitHub) -> None:
    result = installed.run("update", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    layers = {layer["layer"]: layer for layer in report["verification"]}
    assert [layer["status"] for layer in report["verification"]] == ["ok"] * 6
    assert "GitHub's asset digest" in layers["digest"]["detail"]
    assert ".github/workflows/release.yml@refs/tags/v0.2.0" in layers["attestation"]["detail"]
    assert installed.active() == "0.2.0"
    # The check and the download went around the API; only digests used it.
    api = [r.path for r in github.requests_to("api") if not r.path.startswith("/_dl/")]
    assert api == ["/repos/acme/mux/releases/tags/v0.2.0"] or all(
        "/releases/tags/" in p for p in api
    )


def test_attestation_from_the_api_when_the_release_has_none(
    installed: Install, github: FakeGitHub, keypair: KeyPair
) -> None:
    """A release published without its bundle (SHA256SUMS does not list one): the
    attestations API has it."""
    release = github.root / "v0.2.0"
    bundle_path = release / "mux-0.2.0.sigstore.json"
    archive = next(release.glob("*.tar.gz"))
    github.attestations[hashlib.sha256(archive.read_bytes()).hexdigest()] = bundle_path.read_bytes()
    bundle_path.unlink()
    republish(release, keypair.secret_key())

    result = installed.run("update", "--json")
    assert result.returncode == 0, result.stderr
    detail = {x["layer"]: x["detail"] for x in json.loads(result.stdout)["verification"]}
    assert "attestations API" in detail["attestation"]


def test_a_bundle_the_signed_sums_list_cannot_be_dropped(
    installed: Install, github: FakeGitHub
) -> None:
    """The signed SHA256SUMS lists the bundle, but it is gone (the API would have one): a
    refusal, not a fallback, so nothing the signed list names can be stripped."""
    release = github.root / "v0.2.0"
    bundle_path = release / "mux-0.2.0.sigstore.json"
    archive = next(release.glob("*.tar.gz"))
    github.attestations[hashlib.sha256(archive.read_bytes()).hexdigest()] = bundle_path.read_bytes()
    bundle_path.unlink()
    before = snapshot(installed.home, installed.bin_dir)
    result = installed.run("update")
    assert result.returncode == 3, result.stderr
    assert (
        "verification failed (attestation): the Sigstore bundle mux-0.2.0.sigstore.json, "
        "listed in the signed SHA256SUMS, could not be read"
    ) in result.stderr
    assert_unchanged(installed, before)


def test_an_api_that_wants_a_token_is_named_and_the_bundle_asset_serves_instead(
    installed: Install, github: FakeGitHub, keypair: KeyPair
) -> None:
    """GitHub's attestations API may refuse anonymous requests: with the release's bundle
    asset mux never needs it; without one, it says what refused and how to go on."""
    github.attestations_need_token = True
    release = github.root / "v0.2.0"
    bundle_path = release / "mux-0.2.0.sigstore.json"
    archive = next(release.glob("*.tar.gz"))
    github.attestations[hashlib.sha256(archive.read_bytes()).hexdigest()] = bundle_path.read_bytes()
    bundle = bundle_path.read_bytes()
    bundle_path.unlink()
    republish(release, keypair.secret_key())
    before = snapshot(installed.home, installed.bin_dir)
    refused = installed.run("update")
    assert refused.returncode == 3, refused.stderr
    line = refused.stderr.strip().splitlines()[-1]
    assert line.startswith("mux: error: verification failed (attestation): no attestation found (")
    assert "the release has no mux-0.2.0.sigstore.json, and GitHub's attestations API " in line
    assert "refused an anonymous request" in line and "Requires authentication" in line
    assert "MUX_GITHUB_TOKEN" in line
    assert_unchanged(installed, before)

    bundle_path.write_bytes(bundle)
    republish(release, keypair.secret_key())
    github.requests.clear()
    result = installed.run("update", "--json")
    assert result.returncode == 0, result.stderr
    detail = {x["layer"]: x["detail"] for x in json.loads(result.stdout)["verification"]}
    assert "release asset" in detail["attestation"]
    assert not [r for r in github.requests if "/attestations/" in r.path]


BAD_ATTESTATIONS = {
    "another repository": ({"repository": "evil/mux"}, "repository"),
    "another workflow": ({"signer_workflow": ".github/workflows/other.yml"}, "workflow"),
    "another tag": ({"ref": "refs/tags/v9.9.9"}, "refs/tags/v0.2.0"),
    "self-hosted runner": ({"runner_environment": "self-hosted"}, "runner"),
    "another digest": ({"subjects": {"x": "00" * 32}}, "sha256"),
    "no log entry": ({"with_tlog_entry": False}, "transparency-log entry"),
}


@pytest.mark.parametrize("case", sorted(BAD_ATTESTATIONS))
def test_bad_attestation_is_refused(
    case: str, installed: Install, github: FakeGitHub, keypair: KeyPair, sigstore: FakeSigstore
) -> None:
    overrides, word = BAD_ATTESTATIONS[case]
    release = github.root / "v0.2.0"
    if case == "another digest":
        # Attest only something else: the archive's digest is then not a subject.
        manifest = models.parse_manifest((release / "manifest.json").read_bytes())
        bundle = sigstore.attest(
            {"x": "00" * 32}, repository=REPO, ref=f"refs/tags/v{manifest.version}"
        )
        (release / "mux-0.2.0.sigstore.json").write_bytes(bundle)
        republish(release, keypair.secret_key())
    else:
        attest(release, keypair, sigstore, **overrides)
    before = snapshot(installed.home, installed.bin_dir)
    result = installed.run("update")
    assert result.returncode == 3, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("mux: error: verification failed (attestation)") and word in error, (
        error
    )
    assert_unchanged(installed, before)


def test_attestation_from_an_untrusted_sigstore(
    installed: Install, github: FakeGitHub, keypair: KeyPair, tmp_path: Path
) -> None:
    stranger = FakeSigstore.create(tmp_path / "stranger")
    attest(github.root / "v0.2.0", keypair, stranger)
    before = snapshot(installed.home, installed.bin_dir)
    result = installed.run("update")
    assert result.returncode == 3 and "verification failed (attestation)" in result.stderr
    assert_unchanged(installed, before)


def test_missing_attestation_fails_closed_unless_skipped_loudly(
    installed: Install, github: FakeGitHub, keypair: KeyPair
) -> None:
    release = github.root / "v0.2.0"
    (release / "mux-0.2.0.sigstore.json").unlink()
    republish(release, keypair.secret_key())
    before = snapshot(installed.home, installed.bin_dir)
    refused = installed.run("update")
    assert refused.returncode == 3 and "no attestation" in refused.stderr
    assert_unchanged(installed, before)
    # The dry run is the plan: it refuses what the run refuses (issue 38: it said "ok").
    planned = installed.run("update", "--dry-run")
    assert planned.returncode == 3, planned.stdout + planned.stderr
    assert "verification failed (attestation): no attestation" in planned.stderr
    assert_unchanged(installed, before)
    skipped = installed.run("update", "--insecure-skip-attestation", "-v")
    assert skipped.returncode == 0, skipped.stderr
    assert "mux: warning: --insecure-skip-attestation" in skipped.stderr
    assert "attestation: SKIPPED" in skipped.stdout
    assert installed.active() == "0.2.0"


def test_truncated_download_is_retried_then_refused(installed: Install, github: FakeGitHub) -> None:
    archive = next((github.root / "v0.2.0").glob("*.tar.gz")).name
    github.truncate[archive] = 1000
    github.lie_length = True
    before = snapshot(installed.home, installed.bin_dir)
    result = installed.run("update")
    assert result.returncode == 1, result.stderr
    assert "download of" in result.stderr
    assert_unchanged(installed, before)


def test_redirect_to_a_foreign_host_is_refused(installed: Install, github: FakeGitHub) -> None:
    foreign = FakeGitHub(root=github.root)
    before = snapshot(installed.home, installed.bin_dir)
    with serve_github(foreign):
        github.foreign_download_url = foreign.api_url.replace("127.0.0.1", "localhost") + "/_dl"
        result = installed.run("update")
    assert result.returncode == 1 and "not an allowed release host" in result.stderr
    assert foreign.requests == []
    assert_unchanged(installed, before)


def test_api_digest_disagreement_is_refused(installed: Install, github: FakeGitHub) -> None:
    original = github.release_doc

    def lying(tag: str):
        doc = original(tag)
        for asset in doc["assets"]:
            asset["digest"] = "sha256:" + "11" * 32
        return doc

    github.release_doc = lying  # type: ignore[method-assign]
    before = snapshot(installed.home, installed.bin_dir)
    result = installed.run("update")
    assert result.returncode == 3 and "GitHub's asset digest" in result.stderr
    assert_unchanged(installed, before)


def test_dropped_connection_resumes_with_range(installed: Install, github: FakeGitHub) -> None:
    archive = next((github.root / "v0.2.0").glob("*.tar.gz")).name
    github.truncate[archive] = 4096
    github.lie_length = True
    github.truncate_once = True
    result = installed.run("update")
    assert result.returncode == 0, result.stderr
    ranges = [
        r.headers.get("Range") for r in github.requests_to("api") if f"v0.2.0/{archive}" in r.path
    ]
    assert ranges == [None, "bytes=4096-"]
    assert installed.active() == "0.2.0"


def test_stalled_download_times_out(installed: Install, github: FakeGitHub) -> None:
    archive = next((github.root / "v0.2.0").glob("*.tar.gz")).name
    github.hang.add(archive)
    env = {**installed.env, "MUX_HTTP_TIMEOUT": "1", "MUX_HTTP_RETRIES": "1"}
    stalled = Install(installed.home, installed.bin_dir, env)
    before = snapshot(installed.home, installed.bin_dir)
    result = stalled.run("update", timeout=60)
    assert result.returncode == 1, result.stderr
    assert "download of" in result.stderr and "ReadTimeout" in result.stderr
    assert_unchanged(installed, before)


@pytest.mark.parametrize("case", ["another-version", "signed-before-the-installed-one"])
def test_the_signed_version_and_time_apply_on_github_too(
    case: str, installed: Install, github: FakeGitHub, keypair: KeyPair
) -> None:
    """GitHub decides the latest tag over TLS; the release's signed comment must still name
    it, and a release signed before the installed one is still a downgrade."""
    from release.publish.package import trusted_comment_for

    release = github.root / "v0.2.0"
    sums = (release / "SHA256SUMS").read_bytes()
    if case == "another-version":
        comment = trusted_comment_for("0.1.0", int(time.time()))
        text = "SHA256SUMS.minisig is for another version (0.1.0, not 0.2.0"
    else:
        record = json.loads((installed.home / "install.json").read_text())
        comment = trusted_comment_for("0.2.0", record["versions"]["0.1.0"]["signed_at"] - 1)
        text = "mux 0.2.0 was signed"
    (release / "SHA256SUMS.minisig").write_bytes(keypair.secret_key().sign(sums, comment))
    before = snapshot(installed.home, installed.bin_dir)
    for args in (("update", "--check"), ("update",)):
        result = installed.run(*args)
        if case == "signed-before-the-installed-one" and "--check" in args:
            assert result.returncode == 0, result.stderr  # nothing to offer: it says why
            assert "was signed before this mux" in result.stdout
            continue
        assert result.returncode == 3, result.stderr
        assert text in result.stderr.strip().splitlines()[-1]
    assert_unchanged(installed, before)
