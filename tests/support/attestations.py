"""Sigstore attestations of a release, made with a throwaway instance
(``release.rehearsal.fake_sigstore``) the way the release workflow attests: :func:`attest`."""

from __future__ import annotations

import hashlib
from pathlib import Path

from release.rehearsal.fake_sigstore import FakeSigstore
from tests.support.installs import republish
from tests.support.releases import KeyPair
from updater.formats import models

REPO = "acme/mux"


def attest(release_dir: Path, keypair: KeyPair, sigstore: FakeSigstore, **overrides) -> None:
    """Attest a release's archives and manifest the way the release workflow does."""
    manifest = models.parse_manifest((release_dir / "manifest.json").read_bytes())
    subjects = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in release_dir.iterdir()
        if p.name.endswith(".tar.gz") or p.name == "manifest.json"
    }
    subjects.update(overrides.pop("subjects", {}))
    settings = {"repository": REPO, "ref": f"refs/tags/v{manifest.version}", **overrides}
    bundle = sigstore.attest(subjects, **settings)
    (release_dir / models.attestation_name(manifest.version)).write_bytes(bundle)
    republish(release_dir, keypair.secret_key())
