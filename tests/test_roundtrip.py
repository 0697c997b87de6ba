"""Round trip: what mux-release produces, mux update accepts; one flipped byte, it refuses.

The releases are packaged by release.publish.package, signed with keys made by the real `minisign`
tool (and by our own generator elsewhere), attested by a throwaway Sigstore instance, and
served over loopback HTTP.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from release.publish.package import rehash_sums, trusted_comment_for
from release.rehearsal.fake_sigstore import FakeSigstore
from tests.support.installs import Install, bootstrap
from tests.support.releases import make_keypair, make_release, serve_directory
from updater.formats import models
from updater.formats.trusted_comments import IndexComment

REPO = "acme/mux"
MINISIGN = shutil.which("minisign")


def minisign_keypair(directory: Path) -> tuple[Path, str]:
    """A key pair made by the real minisign (no password); returns (secret key, public key)."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [MINISIGN, "-G", "-W", "-p", directory / "mux.pub", "-s", directory / "mux.key"],
        check=True,
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )
    public = (directory / "mux.pub").read_text().splitlines()[1]
    return directory / "mux.key", public


def minisign_sign(file: Path, secret_key: Path, trusted_comment: str) -> None:
    subprocess.run(
        [
            MINISIGN,
            "-S",
            "-s",
            secret_key,
            "-m",
            file,
            "-x",
            file.with_name(file.name + ".minisig"),
            "-t",
            trusted_comment,
        ],
        check=True,
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def sigstore(tmp_path_factory: pytest.TempPathFactory) -> FakeSigstore:
    return FakeSigstore.create(tmp_path_factory.mktemp("sigstore"))


@pytest.fixture
def feed(tmp_path: Path, sigstore: FakeSigstore):
    if MINISIGN is None:
        pytest.skip("the minisign tool is not installed (.ci/run installs it)")
    secret, public = minisign_keypair(tmp_path / "keys")
    unused = make_keypair(tmp_path / "unused")  # make_release wants one; its signature is replaced
    feed = tmp_path / "feed"
    now = int(time.time()) - 60
    for number, (version, protocol) in enumerate((("0.1.0", 1), ("0.2.0", 2))):
        release = make_release(
            feed,
            version,
            protocol_version=protocol,
            keypair=unused,
            repo=REPO,
            sign=False,
            build={"minisign_keys": [public]},
        )
        subjects = {
            p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in release.iterdir()
            if p.name != "SHA256SUMS"
        }
        bundle = sigstore.attest(subjects, repository=REPO, ref=f"refs/tags/v{version}")
        (release / models.attestation_name(version)).write_bytes(bundle)
        rehash_sums(release)
        # The comment mux-release writes, by hand: the version and the signed time.
        minisign_sign(release / "SHA256SUMS", secret, trusted_comment_for(version, now + number))
    # The feed's index, signed by hand as docs/contracts.md says it may be.
    index = IndexComment(timestamp=now, seq=1, expires=now + 14 * 86400)
    minisign_sign(feed / "releases.json", secret, index.format())
    return feed, public


@pytest.fixture
def installed(tmp_path: Path, sandbox_env, feed, sigstore: FakeSigstore):
    path, public = feed
    with serve_directory(path) as url:
        # The development mux that bootstraps has no repository of its own; the releases list
        # their bundle in SHA256SUMS, so it checks their attestation against this one.
        env = {
            **sandbox_env,
            "MUX_SIGSTORE_TRUSTED_ROOT": str(sigstore.trusted_root_path),
            "MUX_REPO": REPO,
        }
        yield bootstrap(tmp_path, env, source=url, version="0.1.0", public_key=public)


def test_a_release_signed_by_real_minisign_installs_with_every_layer(installed: Install) -> None:
    result = installed.run("update", "-v")  # -v: every layer's line
    assert result.returncode == 0, result.stderr
    for layer in (
        "signature: ok",
        "manifest: ok",
        "digest: ok",
        "attestation: ok",
        "archive: ok",
        "smoke-test: ok",
    ):
        assert layer in result.stdout, result.stdout
    assert installed.active() == "0.2.0"


@pytest.mark.parametrize(
    ("name", "layer"),
    [
        ("mux-{target}.tar.gz", "digest"),
        ("manifest.json", "manifest"),
        ("SHA256SUMS", "signature"),
        ("SHA256SUMS.minisig", "signature"),
        ("mux-0.2.0.sigstore.json", "attestation"),
    ],
)
def test_one_flipped_byte_anywhere_is_refused(
    installed: Install, feed, name: str, layer: str
) -> None:
    from updater.config.targets import detect_target

    path = feed[0] / "v0.2.0" / name.format(target=detect_target())
    data = bytearray(path.read_bytes())
    # A byte in the middle, changed to another printable one, so that text files stay text.
    position = len(data) // 2
    data[position] = ord("A") if data[position] != ord("A") else ord("B")
    path.write_bytes(bytes(data))
    result = installed.run("update")
    assert result.returncode == 3, (result.stdout, result.stderr)
    assert f"verification failed ({layer})" in result.stderr
    assert installed.active() == "0.1.0"
