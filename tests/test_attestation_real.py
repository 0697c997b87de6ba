"""Real GitHub attestation bundles (cli/cli test data) against Sigstore's production root.

The bundles are in tests/fixtures/real-attestations/ (its README lists their origin, licence,
identities and expected outcomes); the module skips when the folder is absent.
Verification uses the production trust root that ships with sigstore, offline: no network.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from updater.config.settings import TRUSTED_ROOT_ENV
from updater.errors import VerificationError
from updater.trust.attestation import AttestationIdentity, AttestationReport, verify_attestation

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "real-attestations"
if not FIXTURES.is_dir():
    pytest.skip(f"real attestation fixtures not found at {FIXTURES}", allow_module_level=True)

HAMMER_TIME = "https://token.actions.githubusercontent.com/hammer-time"
CUSTOM_ISSUER = AttestationIdentity(
    repository="too-legit/attest",
    signer_workflow=".github/workflows/integration.yml",
    ref="refs/heads/main",
    issuer=HAMMER_TIME,
)
SHARED_ATTEST_WORKFLOW = (
    "https://github.com/github/artifact-attestations-workflows/.github/workflows/attest.yml"
)
REUSABLE = AttestationIdentity(
    repository="malancas/attest-demo",
    signer_workflow=f"{SHARED_ATTEST_WORKFLOW}@09b495c3f12c7881b3cc17209a327792065c1a1d",
    ref="refs/heads/main",
)


def _read(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def _sha256(name: str) -> str:
    return hashlib.sha256(_read(name)).hexdigest()


@pytest.fixture(autouse=True)
def _sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # sigstore's offline mode writes its shipped trusted root into the user cache dir.
    for variable, folder in (
        ("HOME", "home"),
        ("XDG_CACHE_HOME", "cache"),
        ("XDG_DATA_HOME", "data"),
    ):
        monkeypatch.setenv(variable, str(tmp_path / folder))
    monkeypatch.delenv(TRUSTED_ROOT_ENV, raising=False)
    return tmp_path


def _verify_offline(bundle: str, artifact: str, identity: AttestationIdentity) -> AttestationReport:
    return verify_attestation(
        _read(bundle), _sha256(artifact), identity, offline=True, warn=pytest.fail
    )


def _rejected(bundle: str, artifact: str, identity: AttestationIdentity) -> str:
    with pytest.raises(VerificationError) as caught:
        _verify_offline(bundle, artifact, identity)
    assert "\n" not in caught.value.message
    return caught.value.message


# -- the two pairs that verify ----------------------------------------------------------------------


def test_custom_issuer_bundle_verifies_against_its_real_identity(_sandbox: Path) -> None:
    report = verify_attestation(
        _read("custom-issuer.sigstore.json"),
        _sha256("custom-issuer-artifact"),
        CUSTOM_ISSUER,
        offline=True,
        warn=pytest.fail,
    )
    assert report.signer_identity == (
        "https://github.com/too-legit/attest/.github/workflows/integration.yml@refs/heads/main"
    )
    assert report.signer_workflow == ".github/workflows/integration.yml"
    assert report.source_ref == "refs/heads/main"
    assert report.source_commit == "283bf967fa3c591925dd25e6a6e8e781542117bf"
    assert report.issuer == HAMMER_TIME
    assert report.runner_environment == "github-hosted"
    assert [s.name for s in report.subjects] == ["artifact"]
    assert report.log_index == 129601213
    assert report.integrated_time == datetime.fromtimestamp(1726082343, tz=UTC)
    assert report.trust_root == "sigstore production (offline copy)"
    # The shipped root went to the sandboxed cache (platformdirs), not the real home.
    assert list((_sandbox / "cache" / "sigstore-python" / "tuf").glob("*/trusted_root.json"))


def test_reusable_workflow_bundle_verifies_against_its_real_identity() -> None:
    report = _verify_offline(
        "reusable-workflow-attestation.sigstore.json", "reusable-workflow-artifact", REUSABLE
    )
    assert report.signer_workflow == SHARED_ATTEST_WORKFLOW
    assert report.source_repository_uri == "https://github.com/malancas/attest-demo"
    # The subject's name is not the file's: only digests are matched.
    assert [s.name for s in report.subjects] == ["github_provenance_demo-0.0.0-py3-none-any.whl"]


# -- the same bundles against other identities -----------------------------------------------------


@pytest.mark.parametrize(
    ("identity", "expected"),
    [
        (
            AttestationIdentity(
                "too-legit/other",
                ".github/workflows/integration.yml",
                "refs/heads/main",
                issuer=HAMMER_TIME,
            ),
            "attestation: source repository is https://github.com/too-legit/attest, "
            "expected https://github.com/too-legit/other",
        ),
        (
            AttestationIdentity(
                "too-legit/attest", ".github/workflows/integration.yml", "refs/heads/main"
            ),
            f"attestation: OIDC issuer is {HAMMER_TIME}, "
            "expected https://token.actions.githubusercontent.com",
        ),
        (
            AttestationIdentity(
                "too-legit/attest",
                ".github/workflows/release.yml",
                "refs/heads/main",
                issuer=HAMMER_TIME,
            ),
            "attestation: signer workflow is .github/workflows/integration.yml@refs/heads/main, "
            "expected .github/workflows/release.yml@refs/heads/main",
        ),
        (
            AttestationIdentity(
                "too-legit/attest",
                ".github/workflows/integration.yml",
                "refs/tags/v1.0.0",
                issuer=HAMMER_TIME,
            ),
            "attestation: signer workflow is .github/workflows/integration.yml@refs/heads/main, "
            "expected .github/workflows/integration.yml@refs/tags/v1.0.0",
        ),
    ],
    ids=["other repository", "default issuer", "other workflow", "other ref"],
)
def test_custom_issuer_bundle_fails_against_other_identities(
    identity: AttestationIdentity, expected: str
) -> None:
    assert _rejected("custom-issuer.sigstore.json", "custom-issuer-artifact", identity) == expected


def test_changed_artifact_fails_the_subject_check() -> None:
    changed = hashlib.sha256(_read("custom-issuer-artifact") + b"!").hexdigest()
    with pytest.raises(VerificationError, match=f"no subject has sha256 {changed}"):
        verify_attestation(
            _read("custom-issuer.sigstore.json"), changed, CUSTOM_ISSUER, offline=True
        )


def test_reusable_workflow_bundle_fails_when_the_caller_workflow_is_expected() -> None:
    caller = AttestationIdentity(
        "malancas/attest-demo", ".github/workflows/shared.yml", "refs/heads/main"
    )
    message = _rejected(
        "reusable-workflow-attestation.sigstore.json", "reusable-workflow-artifact", caller
    )
    assert message == (
        f"attestation: signer workflow is {SHARED_ATTEST_WORKFLOW}"
        "@09b495c3f12c7881b3cc17209a327792065c1a1d, expected "
        "https://github.com/malancas/attest-demo/.github/workflows/shared.yml@refs/heads/main"
    )


# -- the two pairs that must be rejected -------------------------------------------------------------


def test_private_instance_bundle_is_rejected_as_unsupported() -> None:
    identity = AttestationIdentity(
        "actions/attest-demo", ".github/workflows/build-python.yml", "refs/heads/main"
    )
    message = _rejected(
        "github_provenance_demo-0.0.12-py3-none-any-bundle.jsonl",
        "github_provenance_demo-0.0.12-py3-none-any.whl",
        identity,
    )
    assert message.startswith("attestation: bundle has no transparency-log entry")


def test_npm_intoto_entry_is_rejected() -> None:
    identity = AttestationIdentity(
        "sigstore/sigstore-js", ".github/workflows/release.yml", "refs/heads/main"
    )
    message = _rejected("sigstore-js-2.1.0-bundle.json", "sigstore-js-2.1.0.tgz", identity)
    assert message == (
        "attestation: Sigstore verification failed "
        "(Integrated time only supported for dsse/hashedrekord 0.0.1 types)"
    )


# -- production trust root: online refresh, fallback, quiet logs ----------------------------------------


def test_failed_refresh_falls_back_to_the_shipped_root_and_still_verifies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sigstore.errors import TUFError
    from sigstore.models import ClientTrustConfig

    real_production = ClientTrustConfig.production

    def production(offline: bool = False) -> ClientTrustConfig:
        if not offline:
            raise TUFError("Failed to refresh TUF metadata")
        return real_production(offline=True)

    monkeypatch.setattr(ClientTrustConfig, "production", staticmethod(production))
    warnings: list[str] = []
    report = verify_attestation(
        _read("custom-issuer.sigstore.json"),
        _sha256("custom-issuer-artifact"),
        CUSTOM_ISSUER,
        warn=warnings.append,
    )
    assert report.trust_root == "sigstore production (offline copy)"
    assert len(warnings) == 1 and "could not refresh Sigstore's trust root online" in warnings[0]


def test_hanging_refresh_falls_back_within_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    from sigstore.errors import TUFError
    from sigstore.models import ClientTrustConfig

    real_production = ClientTrustConfig.production
    release = threading.Event()

    def production(offline: bool = False) -> ClientTrustConfig:
        if not offline:
            # A TUF server that never answers. Once released (at teardown) the abandoned
            # thread must not touch the cache: HOME may already point back at the real one.
            release.wait(60)
            raise TUFError("released by the test")
        return real_production(offline=True)

    monkeypatch.setattr(ClientTrustConfig, "production", staticmethod(production))
    warnings: list[str] = []
    try:
        report = verify_attestation(
            _read("custom-issuer.sigstore.json"),
            _sha256("custom-issuer-artifact"),
            CUSTOM_ISSUER,
            refresh_timeout=0.2,
            warn=warnings.append,
        )
    finally:
        release.set()
    assert report.log_index == 129601213
    assert len(warnings) == 1 and "no answer within 0.2 s" in warnings[0]


def test_verification_in_a_fresh_process_prints_nothing(_sandbox: Path) -> None:
    # sigstore logs "TUF repository is loaded in offline mode" as a warning; without logging
    # configured, Python would print it on stderr next to mux's own output.
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from updater.trust.attestation import AttestationIdentity, verify_attestation\n"
        "folder = Path(sys.argv[1])\n"
        "identity = AttestationIdentity('too-legit/attest', '.github/workflows/integration.yml',\n"
        f"    'refs/heads/main', issuer={HAMMER_TIME!r})\n"
        "report = verify_attestation((folder / 'custom-issuer.sigstore.json').read_bytes(),\n"
        f"    {_sha256('custom-issuer-artifact')!r}, identity, offline=True)\n"
        "print(report.log_index)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(FIXTURES)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "129601213\n", "")
