"""``mux-release verify``: the updater's verification layers, run on a release folder."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.installs import republish
from tests.support.processes import mux_release
from tests.support.releases import make_feed, make_keypair


def verify(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return mux_release("verify", folder, *args)


def test_verify_reports_every_layer_and_catches_one_flipped_byte(tmp_path: Path) -> None:
    feed = make_feed(tmp_path, versions=["0.3.0"])
    release = feed.releases["0.3.0"]
    key = feed.keypair.public_key
    ok = verify(release, "--public-key", key, "--insecure-skip-attestation")
    assert ok.returncode == 0, ok.stderr
    for layer in (
        "signature: ok",
        "manifest: ok",
        "digest: ok",
        "attestation: SKIPPED",
        "archive: ok",
        "smoke-test: ok",
    ):
        assert layer in ok.stdout, ok.stdout

    # Without a key or an attestation, verification fails closed.
    assert verify(release, "--insecure-skip-attestation").returncode == 3
    assert verify(release, "--public-key", key).returncode == 3

    other = make_keypair(tmp_path / "other")
    assert (
        verify(release, "--public-key", other.public_key, "--insecure-skip-attestation").returncode
        == 3
    )

    archive = next(release.glob("*.tar.gz"))
    data = bytearray(archive.read_bytes())
    data[100] ^= 0x40
    archive.write_bytes(bytes(data))
    flipped = verify(release, "--public-key", key, "--insecure-skip-attestation")
    assert flipped.returncode == 3
    assert "verification failed (digest)" in flipped.stderr
    lines = flipped.stderr.strip().splitlines()
    assert [line for line in lines if line.startswith("mux-release:")] == lines[-1:]


def test_verify_catches_a_consistently_republished_bad_archive(tmp_path: Path) -> None:
    import io
    import tarfile

    feed = make_feed(tmp_path, versions=["0.3.0"])
    release = feed.releases["0.3.0"]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo("../escape")
        archive.addfile(info, io.BytesIO(b""))
    republish(release, feed.keypair.secret_key(), archive=buffer.getvalue())
    result = verify(release, "--public-key", feed.keypair.public_key, "--insecure-skip-attestation")
    assert result.returncode == 3 and "verification failed (archive)" in result.stderr


def test_verify_a_published_tag_on_github_with_its_attestation(tmp_path: Path) -> None:
    """`mux-release verify <tag>`: a release on a (loopback) GitHub, every layer, as CI runs it."""
    import hashlib
    import os

    from release.publish.package import rehash_sums
    from release.rehearsal.fake_sigstore import FakeSigstore
    from tests.support.github import FakeGitHub, github_env, serve_github
    from tests.support.installs import republish as resign
    from tests.support.releases import make_release

    keypair = make_keypair(tmp_path / "keys")
    sigstore = FakeSigstore.create(tmp_path / "sigstore")
    root = tmp_path / "releases"
    release = make_release(root, "0.3.0", protocol_version=1, keypair=keypair, repo="acme/mux")
    subjects = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in release.iterdir()
        if p.name.endswith(".tar.gz")
    }
    (release / "mux-0.3.0.sigstore.json").write_bytes(
        sigstore.attest(subjects, repository="acme/mux", ref="refs/tags/v0.3.0")
    )
    rehash_sums(release)
    resign(release, keypair.secret_key())
    with serve_github(FakeGitHub(root=root)) as fake:
        env = {
            **os.environ,
            **github_env(fake),
            "MUX_SIGSTORE_TRUSTED_ROOT": str(sigstore.trusted_root_path),
            "MUX_MINISIGN_PUBLIC_KEY": keypair.public_key,
            "HOME": str(tmp_path),
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
        }
        result = mux_release("verify", "v0.3.0", env=env)
        assert result.returncode == 0, result.stderr
        assert "digest: ok" in result.stdout and "GitHub's asset digest" in result.stdout
        assert "attestation: ok: built by .github/workflows/release.yml@refs/tags/v0.3.0" in (
            result.stdout
        )
        # The same release, attested by another repository's workflow: refused.
        (release / "mux-0.3.0.sigstore.json").write_bytes(
            sigstore.attest(subjects, repository="someone/else", ref="refs/tags/v0.3.0")
        )
        rehash_sums(release)
        resign(release, keypair.secret_key())
        wrong = mux_release("verify", "v0.3.0", env=env)
        assert wrong.returncode == 3 and "verification failed (attestation)" in wrong.stderr
