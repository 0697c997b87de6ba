"""Layer 3 of mux update: Sigstore attestations, against a throwaway Sigstore instance.

The instance (release/rehearsal/fake_sigstore.py) has its own Fulcio, CT log and Rekor keys and a
trusted_root.json; sigstore-python verifies its bundles for real. Every wrong attestation
must fail with one VerificationError line naming the check that failed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from release.rehearsal.fake_sigstore import FakeSigstore
from updater.config import settings as mux_settings
from updater.config.settings import TRUSTED_ROOT_ENV
from updater.errors import VerificationError
from updater.trust.attestation import (
    MAX_BUNDLE_BYTES,
    AttestationIdentity,
    AttestationReport,
    AttestedSubject,
    verify_attestation,
)
from updater.trust.trust_policy import sigstore_root

REPO = "mux-dev/mux"
TAG_REF = "refs/tags/v1.2.3"
ARCHIVE = "mux-x86_64-unknown-linux-gnu.tar.gz"
ARCHIVE_SHA = hashlib.sha256(b"the archive").hexdigest()
MANIFEST_SHA = hashlib.sha256(b"the manifest").hexdigest()
SUBJECTS = {ARCHIVE: ARCHIVE_SHA, "manifest.json": MANIFEST_SHA}
SIGNED_AT = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
IDENTITY = AttestationIdentity(
    repository=REPO, signer_workflow=".github/workflows/release.yml", ref=TAG_REF
)


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> FakeSigstore:
    return FakeSigstore.create(tmp_path_factory.mktemp("fake-sigstore"))


@pytest.fixture(scope="module")
def untrusted(tmp_path_factory: pytest.TempPathFactory) -> FakeSigstore:
    return FakeSigstore.create(tmp_path_factory.mktemp("untrusted-sigstore"))


@pytest.fixture(scope="module")
def good_bundle(fake: FakeSigstore) -> bytes:
    return fake.attest(SUBJECTS, repository=REPO, ref=TAG_REF, signed_at=SIGNED_AT)


@pytest.fixture(autouse=True)
def _sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # sigstore writes its TUF cache where platformdirs says; keep it out of the real home.
    for variable, folder in (
        ("HOME", "home"),
        ("XDG_CACHE_HOME", "cache"),
        ("XDG_DATA_HOME", "data"),
    ):
        monkeypatch.setenv(variable, str(tmp_path / folder))
    monkeypatch.delenv(TRUSTED_ROOT_ENV, raising=False)


def _verify(
    fake: FakeSigstore,
    bundle: bytes | list[bytes],
    digests: str | list[str] = ARCHIVE_SHA,
    identity: AttestationIdentity = IDENTITY,
) -> AttestationReport:
    return verify_attestation(bundle, digests, identity, trusted_root=fake.trusted_root_path)


def _rejected(fake: FakeSigstore, bundle: bytes | list[bytes], **kwargs: Any) -> str:
    with pytest.raises(VerificationError) as caught:
        _verify(fake, bundle, **kwargs)
    message = caught.value.message
    assert "\n" not in message and message.startswith("attestation: ")
    assert caught.value.exit_code == 3
    return message


def _edit(bundle: bytes, change: Callable[[dict[str, Any]], None]) -> bytes:
    document = json.loads(bundle)
    change(document)
    return json.dumps(document).encode()


def _flip_base64(text: str, index: int = 10) -> str:
    raw = bytearray(base64.b64decode(text))
    raw[index] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


# -- the valid attestation ------------------------------------------------------------------------


def test_valid_attestation_verifies_and_reports_the_identity(
    fake: FakeSigstore, good_bundle: bytes
) -> None:
    report = _verify(fake, good_bundle)

    assert report.repository == REPO
    assert report.source_repository_uri == f"https://github.com/{REPO}"
    assert (
        report.signer_identity
        == f"https://github.com/{REPO}/.github/workflows/release.yml@{TAG_REF}"
    )
    assert report.signer_workflow == ".github/workflows/release.yml"
    assert report.signer_ref == TAG_REF
    assert report.source_ref == TAG_REF
    assert report.issuer == "https://token.actions.githubusercontent.com"
    assert report.runner_environment == "github-hosted"
    assert report.predicate_type == "https://slsa.dev/provenance/v1"
    assert report.subjects == (AttestedSubject(ARCHIVE, ARCHIVE_SHA),)
    assert report.log_index == 0
    assert report.integrated_time == SIGNED_AT
    assert report.trust_root == f"file:{fake.trusted_root_path}"
    assert report.to_json()["integrated_time"] == "2025-01-01T12:00:00Z"


def test_every_given_digest_must_be_a_subject(fake: FakeSigstore, good_bundle: bytes) -> None:
    report = _verify(fake, good_bundle, digests=[ARCHIVE_SHA, MANIFEST_SHA.upper()])
    assert {s.sha256 for s in report.subjects} == {ARCHIVE_SHA, MANIFEST_SHA}

    missing = hashlib.sha256(b"not attested").hexdigest()
    message = _rejected(fake, good_bundle, digests=[ARCHIVE_SHA, missing])
    assert f"no subject has sha256 {missing}" in message


def test_bundle_minted_now_verifies(fake: FakeSigstore) -> None:
    bundle = fake.attest(SUBJECTS, repository=REPO, ref=TAG_REF)
    report = _verify(fake, bundle)
    assert report.integrated_time is not None
    assert abs(report.integrated_time - datetime.now(UTC)) < timedelta(minutes=5)


def test_any_ref_when_the_identity_names_none(fake: FakeSigstore) -> None:
    bundle = fake.attest(SUBJECTS, repository=REPO, ref="refs/heads/main", signed_at=SIGNED_AT)
    any_ref = AttestationIdentity(REPO, ".github/workflows/release.yml", ref=None)
    assert _verify(fake, bundle, identity=any_ref).signer_ref == "refs/heads/main"


def test_repository_names_compare_case_insensitively(
    fake: FakeSigstore, good_bundle: bytes
) -> None:
    shouting = AttestationIdentity("MUX-DEV/Mux", ".github/workflows/release.yml", TAG_REF)
    assert _verify(fake, good_bundle, identity=shouting).signer_workflow == (
        ".github/workflows/release.yml"
    )


def test_trusted_root_from_the_environment(
    fake: FakeSigstore, good_bundle: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TRUSTED_ROOT_ENV, str(fake.trusted_root_path))
    # The environment is read once, into the settings, which hand the root to the verifier.
    trusted_root = sigstore_root(mux_settings.load())
    report = verify_attestation(
        good_bundle, ARCHIVE_SHA, IDENTITY, trusted_root=trusted_root, warn=pytest.fail
    )
    assert report.trust_root == f"file:{fake.trusted_root_path}"


def test_trusted_root_wrapped_in_a_client_trust_config(
    fake: FakeSigstore, good_bundle: bytes, tmp_path: Path
) -> None:
    config = tmp_path / "trust_config.json"
    config.write_text(
        json.dumps(
            {
                "mediaType": "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json",
                "trustedRoot": json.loads(fake.trusted_root_path.read_text()),
                "signingConfig": {
                    "mediaType": "application/vnd.dev.sigstore.signingconfig.v0.2+json"
                },
            }
        )
    )
    report = verify_attestation(good_bundle, ARCHIVE_SHA, IDENTITY, trusted_root=config)
    assert report.trust_root == f"file:{config}"


def test_json_lines_succeed_when_one_bundle_verifies(
    fake: FakeSigstore, good_bundle: bytes
) -> None:
    other = fake.attest(SUBJECTS, repository="someone/else", ref=TAG_REF, signed_at=SIGNED_AT)
    lines = b"\n".join(
        [
            b"not json",
            json.dumps(json.loads(other)).encode(),
            json.dumps(json.loads(good_bundle)).encode(),
        ]
    )
    assert _verify(fake, lines).subjects == (AttestedSubject(ARCHIVE, ARCHIVE_SHA),)

    message = _rejected(fake, lines.rpartition(b"\n")[0])
    assert message.startswith("attestation: none of the 2 bundles verified")
    assert "line 1: bundle is not valid JSON" in message
    assert "line 2: source repository is https://github.com/someone/else" in message


def test_a_sequence_of_bundles_succeeds_when_one_verifies(
    fake: FakeSigstore, good_bundle: bytes
) -> None:
    other = fake.attest(SUBJECTS, repository="someone/else", ref=TAG_REF, signed_at=SIGNED_AT)
    # Pretty-printed bundles from separate sources: never joined into (broken) JSON lines.
    assert _verify(fake, [b"{truncated", other, good_bundle]).signer_ref == TAG_REF

    message = _rejected(fake, [b"{truncated", other])
    assert message.startswith("attestation: none of the 2 bundles verified (bundle 1: bundle is")
    assert "bundle 2: source repository is https://github.com/someone/else" in message
    assert "no bundle to verify" in _rejected(fake, [])


# -- wrong identities and statements: each names its check ----------------------------------------

WRONG_ATTESTATIONS: dict[str, tuple[dict[str, Any], str]] = {
    "another repository": (
        {"repository": "evil/mux"},
        "source repository is https://github.com/evil/mux, expected https://github.com/mux-dev/mux",
    ),
    "another workflow": (
        {"signer_workflow": ".github/workflows/other.yml"},
        "signer workflow is .github/workflows/other.yml@refs/tags/v1.2.3, "
        "expected .github/workflows/release.yml@refs/tags/v1.2.3",
    ),
    "another tag": (
        {"ref": "refs/tags/v9.9.9"},
        "signer workflow is .github/workflows/release.yml@refs/tags/v9.9.9, "
        "expected .github/workflows/release.yml@refs/tags/v1.2.3",
    ),
    "a branch": (
        {"ref": "refs/heads/main"},
        "signer workflow is .github/workflows/release.yml@refs/heads/main",
    ),
    "a self-hosted runner": (
        {"runner_environment": "self-hosted"},
        "runner environment is self-hosted, expected github-hosted",
    ),
    "another issuer": (
        {"issuer": "https://token.actions.githubusercontent.com/enterprise"},
        "OIDC issuer is https://token.actions.githubusercontent.com/enterprise, "
        "expected https://token.actions.githubusercontent.com",
    ),
    "another digest": (
        {"subjects": {ARCHIVE: hashlib.sha256(b"another archive").hexdigest()}},
        f"subject digest mismatch: no subject has sha256 {ARCHIVE_SHA} "
        f"(the statement lists 1 sha256 subject(s): {ARCHIVE})",
    ),
    "a wrong predicate type": (
        {"predicate_type": "https://spdx.dev/Document/v2.3"},
        "predicate type is https://spdx.dev/Document/v2.3, expected https://slsa.dev/provenance/v1",
    ),
    "a wrong payload type": (
        {"payload_type": "application/json"},
        "payload type is application/json, expected application/vnd.in-toto+json",
    ),
    "an in-toto v0.1 statement": (
        {"statement_type": "https://in-toto.io/Statement/v0.1"},
        "statement type is https://in-toto.io/Statement/v0.1, expected https://in-toto.io/Statement/v1",
    ),
    "no transparency-log entry": (
        {"with_tlog_entry": False},
        "bundle has no transparency-log entry",
    ),
}


@pytest.mark.parametrize("case", WRONG_ATTESTATIONS, ids=list(WRONG_ATTESTATIONS))
def test_wrong_attestation_is_rejected_naming_the_check(fake: FakeSigstore, case: str) -> None:
    changes, expected = WRONG_ATTESTATIONS[case]
    mint: dict[str, Any] = {
        "subjects": SUBJECTS,
        "repository": REPO,
        "ref": TAG_REF,
        "signed_at": SIGNED_AT,
    }
    mint.update(changes)
    subjects = mint.pop("subjects")
    bundle = fake.attest(subjects, **mint)

    assert expected in _rejected(fake, bundle)


def test_signer_chosen_text_cannot_break_the_error_line(fake: FakeSigstore) -> None:
    # Anyone can sign with Sigstore; what a statement says is the signer's choice.
    bundle = fake.attest(
        SUBJECTS,
        repository=REPO,
        ref=TAG_REF,
        signed_at=SIGNED_AT,
        predicate_type="https://evil.example/\n\x1b[2Jmux: verified OK" + "x" * 1000,
    )
    message = _rejected(fake, bundle)
    assert "\x1b" not in message and "\\x1b[2J" in message and "\\n" in message
    assert message.startswith("attestation: predicate type is https://evil.example/")
    assert len(message) < 500


def test_bundle_from_an_untrusted_instance(untrusted: FakeSigstore, fake: FakeSigstore) -> None:
    bundle = untrusted.attest(SUBJECTS, repository=REPO, ref=TAG_REF, signed_at=SIGNED_AT)
    assert _verify(untrusted, bundle).repository == REPO  # valid for its own root

    message = _rejected(fake, bundle)
    assert "signing certificate does not chain to the trusted Sigstore root" in message


def test_reusable_workflow_elsewhere_must_be_named_in_full(fake: FakeSigstore) -> None:
    shared = "https://github.com/org/shared/.github/workflows/attest.yml"
    # A reusable workflow signs: the SAN names it, the source repository stays ours.
    bundle = fake.attest(
        SUBJECTS, repository=REPO, ref=TAG_REF, signed_at=SIGNED_AT, signer_workflow=f"{shared}@v1"
    )
    message = _rejected(fake, bundle)
    assert message == (
        f"attestation: signer workflow is {shared}@v1, "
        f"expected https://github.com/{REPO}/.github/workflows/release.yml@{TAG_REF}"
    )

    pinned = AttestationIdentity(REPO, f"{shared}@v1", TAG_REF)
    report = _verify(fake, bundle, identity=pinned)
    assert (report.signer_workflow, report.signer_ref, report.source_ref) == (shared, "v1", TAG_REF)
    assert (
        _verify(fake, bundle, identity=AttestationIdentity(REPO, shared, TAG_REF)).signer_ref
        == "v1"
    )

    wrong_pin = AttestationIdentity(REPO, f"{shared}@v2", TAG_REF)
    assert f"expected {shared}@v2" in _rejected(fake, bundle, identity=wrong_pin)


TAMPERINGS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "flipped signature byte": (
        lambda doc: doc["dsseEnvelope"]["signatures"][0].update(
            sig=_flip_base64(doc["dsseEnvelope"]["signatures"][0]["sig"])
        ),
        "Sigstore verification failed (DSSE: invalid signature)",
    ),
    "tampered payload": (
        lambda doc: doc["dsseEnvelope"].update(
            payload=base64.b64encode(
                base64.b64decode(doc["dsseEnvelope"]["payload"]).replace(
                    ARCHIVE_SHA.encode(), hashlib.sha256(b"evil").hexdigest().encode()
                )
            ).decode()
        ),
        "Sigstore verification failed (DSSE: invalid signature)",
    ),
    "corrupted SET": (
        lambda doc: doc["verificationMaterial"]["tlogEntries"][0]["inclusionPromise"].update(
            signedEntryTimestamp=_flip_base64(
                doc["verificationMaterial"]["tlogEntries"][0]["inclusionPromise"][
                    "signedEntryTimestamp"
                ]
            )
        ),
        "invalid log entry: SET: invalid inclusion promise",
    ),
    "corrupted inclusion proof": (
        lambda doc: doc["verificationMaterial"]["tlogEntries"][0]["inclusionProof"].update(
            rootHash=_flip_base64(
                doc["verificationMaterial"]["tlogEntries"][0]["inclusionProof"]["rootHash"], 0
            )
        ),
        "invalid log entry: inclusion proof contains invalid root hash",
    ),
    "log time outside the certificate's validity": (
        lambda doc: doc["verificationMaterial"]["tlogEntries"][0].update(integratedTime="1"),
        "does not chain to the trusted Sigstore root at the signing time "
        "(failed to build timestamp certificate chain: validation failed: "
        "cert is not valid at validation time",
    ),
    "log time moved within the certificate's validity": (
        lambda doc: doc["verificationMaterial"]["tlogEntries"][0].update(
            integratedTime=str(int(SIGNED_AT.timestamp()) + 60)
        ),
        "Sigstore verification failed (invalid log entry: SET: invalid inclusion promise",
    ),
    "missing certificate": (
        lambda doc: doc["verificationMaterial"].pop("certificate"),
        "malformed bundle",
    ),
    "unknown media type": (
        lambda doc: doc.update(mediaType="application/vnd.dev.sigstore.bundle.v9+json"),
        "bundle media type is application/vnd.dev.sigstore.bundle.v9+json, "
        "expected application/vnd.dev.sigstore.bundle.v0.3+json",
    ),
}


@pytest.mark.parametrize("case", TAMPERINGS, ids=list(TAMPERINGS))
def test_tampered_bundle_is_rejected(fake: FakeSigstore, good_bundle: bytes, case: str) -> None:
    change, expected = TAMPERINGS[case]
    assert expected in _rejected(fake, _edit(good_bundle, change))


# -- malformed input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bundle", "expected"),
    [
        (b"{this is not json", "bundle is not valid JSON"),
        (b"", "bundle is empty"),
        (b"\xff\xfe\x00garbage", "bundle is not UTF-8 text"),
        (b"[1, 2, 3]", "bundle is not a JSON object"),
        (
            b'{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json"}',
            "no transparency-log entry",
        ),
        (b'{"verificationMaterial": {}}', "bundle media type is None"),
        (b"[" * 100_000, "bundle is not valid JSON"),
    ],
    ids=[
        "garbage",
        "empty",
        "not utf-8",
        "json array",
        "no material",
        "no media type",
        "deep nesting",
    ],
)
def test_malformed_bundle(fake: FakeSigstore, bundle: bytes, expected: str) -> None:
    assert expected in _rejected(fake, bundle)


def test_truncated_bundle(fake: FakeSigstore, good_bundle: bytes) -> None:
    for cut in (len(good_bundle) // 3, len(good_bundle) // 2, len(good_bundle) - 5):
        assert "bundle is not valid JSON" in _rejected(fake, good_bundle[:cut])


def test_oversized_bundle_is_refused_before_parsing(fake: FakeSigstore) -> None:
    message = _rejected(fake, b" " * (MAX_BUNDLE_BYTES + 1))
    assert f"more than the {MAX_BUNDLE_BYTES} allowed" in message


@pytest.mark.parametrize(
    ("digests", "expected"),
    [
        ("abc", "'abc' is not a sha256 hex digest"),
        ([], "no sha256 digest given"),
        (["sha256:" + "g" * 64], "is not a sha256 hex digest"),
    ],
)
def test_expected_digests_are_checked(
    fake: FakeSigstore, good_bundle: bytes, digests: str | list[str], expected: str
) -> None:
    assert expected in _rejected(fake, good_bundle, digests=digests)


def test_sha256_prefix_is_accepted(fake: FakeSigstore, good_bundle: bytes) -> None:
    assert _verify(fake, good_bundle, digests=f"sha256:{ARCHIVE_SHA}").subjects[0].name == ARCHIVE


def test_identity_without_repository_fails_closed(fake: FakeSigstore, good_bundle: bytes) -> None:
    nobody = AttestationIdentity("", ".github/workflows/release.yml", TAG_REF)
    assert "is not 'owner/name'" in _rejected(fake, good_bundle, identity=nobody)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read trusted root"),
        ("{not json", "is not a Sigstore trusted root"),
        ('{"mediaType": "application/vnd.example+json"}', "is not a Sigstore trusted root"),
    ],
    ids=["missing", "garbage", "wrong media type"],
)
def test_unusable_trusted_root(
    good_bundle: bytes, tmp_path: Path, content: str | None, expected: str
) -> None:
    root = tmp_path / "trusted_root.json"
    if content is not None:
        root.write_text(content)
    with pytest.raises(VerificationError, match=expected):
        verify_attestation(good_bundle, ARCHIVE_SHA, IDENTITY, trusted_root=root)


# -- fuzzing: nothing but VerificationError ----------------------------------------------------------

JSON_MODULES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=st.binary(max_size=2048) | JSON_MODULES.map(lambda value: json.dumps(value).encode()))
def test_arbitrary_bytes_only_raise_verification_error(fake: FakeSigstore, raw: bytes) -> None:
    with pytest.raises(VerificationError):
        _verify(fake, raw)


def _leaf_paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _leaf_paths(child, (*path, key))
    elif isinstance(value, list) and value:
        for index, child in enumerate(value):
            yield from _leaf_paths(child, (*path, index))
    else:
        yield path


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_bundle_with_any_field_replaced_verifies_or_raises_verification_error(
    fake: FakeSigstore, good_bundle: bytes, data: st.DataObject
) -> None:
    document = json.loads(good_bundle)
    path = data.draw(st.sampled_from(sorted(_leaf_paths(document), key=repr)))
    replacement = data.draw(JSON_MODULES)
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = replacement
    try:
        _verify(fake, json.dumps(document).encode())
    except VerificationError as exc:
        assert "\n" not in exc.message


# -- trust root refresh and fallback ------------------------------------------------------------------


def test_failed_online_refresh_warns_and_falls_back_to_the_shipped_root(
    good_bundle: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sigstore.errors import TUFError
    from sigstore.models import ClientTrustConfig

    real_production = ClientTrustConfig.production
    online_attempts: list[bool] = []

    def production(offline: bool = False) -> ClientTrustConfig:
        if not offline:
            online_attempts.append(True)
            raise TUFError("Failed to refresh TUF metadata")
        return real_production(offline=True)

    monkeypatch.setattr(ClientTrustConfig, "production", staticmethod(production))
    warnings: list[str] = []
    with pytest.raises(VerificationError) as caught:
        verify_attestation(good_bundle, ARCHIVE_SHA, IDENTITY, warn=warnings.append)

    assert online_attempts == [True]
    assert warnings == [
        "attestation: could not refresh Sigstore's trust root online (Failed to refresh TUF "
        "metadata); using the last cached copy or the one that ships with sigstore"
    ]
    # Production Sigstore never signed the fake bundle: the fallback still fails closed.
    assert "does not chain to the trusted Sigstore root" in caught.value.message


def test_hanging_online_refresh_is_abandoned_after_the_timeout(
    good_bundle: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
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
        with pytest.raises(VerificationError, match="does not chain"):
            verify_attestation(
                good_bundle, ARCHIVE_SHA, IDENTITY, refresh_timeout=0.2, warn=warnings.append
            )
    finally:
        release.set()
    assert len(warnings) == 1 and "no answer within 0.2 s" in warnings[0]


def test_offline_uses_the_shipped_root_without_a_refresh_or_warning(
    good_bundle: bytes, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from sigstore.models import ClientTrustConfig

    real_production = ClientTrustConfig.production

    def production(offline: bool = False) -> ClientTrustConfig:
        assert offline, "offline=True must not refresh online"
        return real_production(offline=True)

    monkeypatch.setattr(ClientTrustConfig, "production", staticmethod(production))
    with pytest.raises(VerificationError, match="does not chain"):
        verify_attestation(good_bundle, ARCHIVE_SHA, IDENTITY, offline=True, warn=pytest.fail)
    # sigstore's cache went to the sandboxed XDG cache dir, not the real home.
    assert list((tmp_path / "cache" / "sigstore-python" / "tuf").glob("*/trusted_root.json"))


# -- fake instance lifecycle and import cost ----------------------------------------------------------


def test_instance_reloads_from_its_directory(fake: FakeSigstore) -> None:
    reloaded = FakeSigstore.load(fake.directory)
    bundle = reloaded.attest(SUBJECTS, repository=REPO, ref=TAG_REF, signed_at=SIGNED_AT)
    assert _verify(fake, bundle).log_index == 0
    with pytest.raises(FileExistsError):
        FakeSigstore.create(fake.directory)
    assert (fake.directory / "rekor.key.pem").stat().st_mode & 0o077 == 0


def test_minting_outside_the_instance_validity_is_refused(fake: FakeSigstore) -> None:
    with pytest.raises(ValueError, match="outside the instance's validity"):
        fake.attest(
            SUBJECTS, repository=REPO, ref=TAG_REF, signed_at=datetime(2019, 1, 1, tzinfo=UTC)
        )


def test_importing_the_module_does_not_import_sigstore() -> None:
    probe = (
        "import sys, updater.trust.attestation; "
        "heavy = [m for m in ('sigstore', 'cryptography', 'pydantic') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == ""
