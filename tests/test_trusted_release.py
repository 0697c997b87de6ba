"""The trusted release (``updater.trust.trusted_release``), in process: fed plain bytes, digests
and verdicts, with no network, no files and no child process.

Every step taken out of order raises :class:`OutOfOrder` and leaves the state as it was; a
table of inputs gives each refusal the layer's one line (on a delta's way, the reason it is
given up), and the unchanged inputs give "verified" with every layer in order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from release.publish.formats import file_list_document, format_sha256sums, manifest_document
from updater.core.transfer import DELTA, FULL, Transfer
from updater.errors import MuxError, NetworkError, VerificationError
from updater.formats import models
from updater.formats.delta import (
    FILE,
    ArchiveRef,
    DeltaRef,
    FileList,
    TreeEntry,
    delta_name,
    file_list_name,
)
from updater.trust.attested import AttestationVerdict
from updater.trust.delta import DeltaUnusable
from updater.trust.layers import LayerResult, VerificationLog, layer_failure
from updater.trust.smoke import Expected
from updater.trust.trust_policy import TrustPolicy
from updater.trust.trusted_release import OutOfOrder, Step, TrustedRelease
from updater.trust.tuf_targets import SignedFile

VERSION, TAG, TARGET = "1.2.0", "v1.2.0", "x86_64-unknown-linux-gnu"
ARCHIVE = models.archive_name(TARGET)
ARCHIVE_BYTES = b"the archive" * 1000
ARCHIVE_SHA = hashlib.sha256(ARCHIVE_BYTES).hexdigest()
DELTA_NAME = delta_name(TARGET, "1.1.0")
DELTA_BYTES = b"the delta"
DELTA_SHA = hashlib.sha256(DELTA_BYTES).hexdigest()
LIST_NAME = file_list_name(TARGET)
FOLDER = Path("/nowhere/staging")  # never touched: the object writes nothing
POLICY = TrustPolicy(
    minisign_keys=(),
    require_signature=False,
    repository="",
    signer_workflow="",
    oidc_issuer="",
    require_attestation=False,
)


def _manifest(version: str = VERSION, sha256: str = ARCHIVE_SHA) -> bytes:
    asset = models.ManifestAsset(ARCHIVE, TARGET, len(ARCHIVE_BYTES), sha256)
    manifest = models.Manifest("mux", version, 1, "2026-01-01T00:00:00Z", (asset,))
    return json.dumps(manifest_document(manifest)).encode()


def _file_list(version: str = VERSION, delta_from: str = "1.1.0") -> bytes:
    mux = TreeEntry("mux", FILE, 10, 0o755, "a" * 64)
    return file_list_document(
        FileList(
            version,
            TARGET,
            ArchiveRef(ARCHIVE, len(ARCHIVE_BYTES), ARCHIVE_SHA),
            0,
            (mux,),
            (DeltaRef(delta_from, DELTA_NAME, len(DELTA_BYTES), DELTA_SHA),),
        )
    )


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _passed(sha256: str) -> AttestationVerdict:
    return AttestationVerdict(sha256, (LayerResult("attestation", "ok", "built by us"),))


@dataclass
class Feed:
    """Everything the driver would feed, as a release published it: each row changes one."""

    manifest: bytes = field(default_factory=_manifest)
    file_list: bytes = field(default_factory=_file_list)
    listed: dict[str, str | None] = field(default_factory=dict)  # SHA256SUMS lines changed
    manifest_target: SignedFile | None = None
    archive_target: SignedFile | None = None
    api_digest: str | None = None
    archive: tuple[int, str] = (len(ARCHIVE_BYTES), ARCHIVE_SHA)
    delta: tuple[int, str] = (len(DELTA_BYTES), DELTA_SHA)
    verdict: Callable[[str], AttestationVerdict] = _passed
    kept: tuple[str, ...] = ("1.1.0",)
    smoke_target: str | None = TARGET

    def sums(self) -> bytes:
        lines = {
            models.MANIFEST_NAME: _sha(self.manifest),
            ARCHIVE: ARCHIVE_SHA,
            LIST_NAME: _sha(self.file_list),
            DELTA_NAME: DELTA_SHA,
        }
        lines.update(self.listed)
        return format_sha256sums({k: v for k, v in lines.items() if v is not None})


def _asset() -> models.ManifestAsset:
    return models.ManifestAsset(ARCHIVE, TARGET, len(ARCHIVE_BYTES), ARCHIVE_SHA)


def _steps(feed: Feed, way: str) -> list[tuple[str, Callable[[TrustedRelease], Any]]]:
    """The steps of one way, in order, each a call with ``feed``'s inputs."""
    head = [
        ("sums", lambda t: t.sums(feed.sums(), None, signature_url="SHA256SUMS.minisig")),
        ("manifest", lambda t: t.manifest(feed.manifest, feed.manifest_target)),
    ]
    if way == FULL:
        middle = [
            ("archive", lambda t: t.archive(_asset(), feed.archive_target, feed.api_digest)),
            ("archive_digest", lambda t: t.archive_digest(*feed.archive)),
        ]
        transfer = Transfer(FULL, len(ARCHIVE_BYTES), len(ARCHIVE_BYTES))
        attested = ARCHIVE_SHA
    else:
        middle = [
            ("file_list", lambda t: t.file_list(_asset(), feed.file_list, None, feed.kept)),
            ("delta_digest", lambda t: t.delta_digest(*feed.delta, feed.api_digest)),
        ]
        transfer = Transfer(DELTA, len(DELTA_BYTES), len(ARCHIVE_BYTES), "1.1.0")
        attested = _sha(feed.file_list)
    tail = [
        ("attestation", lambda t: t.attestation(feed.verdict(attested))),
        ("tree", lambda t: t.tree(FOLDER, None, transfer)),
        ("smoke_test_for", lambda t: t.smoke_test_for(feed.smoke_target)),
        ("verified", lambda t: t.verified()),
    ]
    return head + middle + tail


def _run(feed: Feed, way: str) -> tuple[TrustedRelease, Any]:
    trusted = TrustedRelease(TAG, POLICY, VerificationLog())
    answer = None
    for _name, step in _steps(feed, way):
        answer = step(trusted)
    return trusted, answer


def _layers(trusted: TrustedRelease) -> list[tuple[str, str]]:
    return [(layer.layer, layer.status) for layer in trusted.log.layers]


# -- the two ways through, in order -----------------------------------------------------------


def test_an_archive_that_passes_every_step_is_verified_with_every_layer_in_order() -> None:
    trusted, verified = _run(Feed(), FULL)
    assert trusted.step is Step.VERIFIED
    assert (verified.asset, verified.archive_sha256, verified.folder) == (
        _asset(),
        ARCHIVE_SHA,
        FOLDER,
    )
    assert _layers(trusted) == [
        ("signature", "skipped"),
        ("manifest", "ok"),
        ("digest", "ok"),
        ("attestation", "ok"),
        ("archive", "ok"),
        ("smoke-test", "ok"),
    ]


def test_a_delta_that_passes_every_step_is_verified_by_the_file_list_it_was_built_from() -> None:
    trusted, verified = _run(Feed(), DELTA)
    assert verified.transfer.method == DELTA and verified.archive_sha256 == ARCHIVE_SHA
    assert trusted.attesting == _sha(_file_list())  # layer 3 attests the file list
    assert _layers(trusted) == [
        ("signature", "skipped"),
        ("manifest", "ok"),
        ("digest", "ok"),  # the file list
        ("digest", "ok"),  # the delta
        ("attestation", "ok"),
        ("archive", "ok"),
        ("smoke-test", "ok"),
    ]
    assert "built from 1.1.0's files" in trusted.log.layers[-2].detail


def test_a_build_for_another_target_is_verified_without_running_it() -> None:
    trusted = TrustedRelease(TAG, POLICY, VerificationLog())
    steps = _steps(Feed(smoke_target="aarch64-apple-darwin"), FULL)
    for _name, step in steps[:-2]:
        step(trusted)
    assert trusted.smoke_test_for("aarch64-apple-darwin") is None
    trusted.verified()
    assert trusted.log.layers[-1] == LayerResult(
        "smoke-test", "skipped", f"{ARCHIVE}: built for another target ({TARGET})"
    )


def test_the_smoke_test_asked_for_is_what_the_manifest_says() -> None:
    trusted = TrustedRelease(TAG, POLICY, VerificationLog())
    for _name, step in _steps(Feed(), FULL)[:-2]:
        step(trusted)
    assert trusted.smoke_test_for(TARGET) == Expected(VERSION, 1, TARGET)


def test_a_tuf_listing_comes_first_and_only_first() -> None:
    class Targets:
        location = "https://tuf.example/metadata"
        versions = type("V", (), {"timestamp_expires": 0})()

        def describe(self) -> str:
            return "root v1"

    trusted = TrustedRelease(TAG, POLICY, VerificationLog())
    trusted.tuf(Targets())  # type: ignore[arg-type]
    trusted.sums(Feed().sums(), None, signature_url="SHA256SUMS.minisig")
    with pytest.raises(OutOfOrder, match=r"tuf\(\) at step sums; it follows step new"):
        trusted.tuf(Targets())  # type: ignore[arg-type]
    assert _layers(trusted)[0] == ("tuf", "ok")


# -- every wrong order ------------------------------------------------------------------------


@pytest.mark.parametrize("way", [FULL, DELTA])
def test_every_step_taken_out_of_order_raises_and_changes_nothing(way: str) -> None:
    """After the first ``done`` steps, every step but the next one (an earlier one again, a
    later one, the other way's) raises and leaves the state as it was; the next one still
    passes, and so on to the end."""
    steps = _steps(Feed(), way)
    other = _steps(Feed(), DELTA if way == FULL else FULL)[2:4]
    calls = dict(steps + other)
    refused = 0
    for done in range(len(steps) + 1):
        right = {steps[done][0]} if done < len(steps) else set()
        if done == 2:
            right.add(other[0][0])  # after the manifest, either way may start
        for name, call in calls.items():
            if name in right:
                continue
            trusted = TrustedRelease(TAG, POLICY, VerificationLog())
            for _name, step in steps[:done]:
                step(trusted)
            before = (trusted.step, list(trusted.log.layers))
            with pytest.raises(OutOfOrder, match=rf"TrustedRelease\.{name}\(\)"):
                call(trusted)
            assert (trusted.step, trusted.log.layers) == before, (done, name)
            for _name, step in steps[done:]:
                step(trusted)
            assert trusted.step is Step.VERIFIED
            refused += 1
    assert refused == (len(steps) + 1) * len(calls) - len(steps) - 1


def test_the_steps_of_the_other_way_are_refused_after_step_3() -> None:
    trusted = TrustedRelease(TAG, POLICY, VerificationLog())
    for _name, step in _steps(Feed(), FULL)[:3]:
        step(trusted)
    with pytest.raises(OutOfOrder, match=r"delta_digest\(\) after step 3 chose the archive"):
        trusted.delta_digest(len(DELTA_BYTES), DELTA_SHA, None)


def test_what_a_step_accepted_is_not_read_before_it() -> None:
    trusted = TrustedRelease(TAG, POLICY, VerificationLog())
    with pytest.raises(OutOfOrder, match="release before step manifest"):
        trusted.release  # noqa: B018
    with pytest.raises(OutOfOrder, match="attesting before step"):
        trusted.attesting  # noqa: B018
    with pytest.raises(OutOfOrder, match="accepted_file_list before step file_list"):
        trusted.accepted_file_list  # noqa: B018
    with pytest.raises(OutOfOrder, match=r"delta_offered\(\) at step new"):
        trusted.delta_offered(_asset())


def test_resume_starts_after_the_manifest() -> None:
    first, _ = _run(Feed(), FULL)
    trusted = TrustedRelease.resume(first.release, POLICY, VerificationLog())
    assert trusted.step is Step.MANIFEST
    with pytest.raises(OutOfOrder):
        trusted.manifest(_manifest(), None)
    for _name, step in _steps(Feed(), FULL)[2:]:
        step(trusted)
    assert trusted.step is Step.VERIFIED


# -- inputs -> verdict ------------------------------------------------------------------------


def _target(sha256: str = ARCHIVE_SHA, *, target: str = TARGET, **facts: Any) -> SignedFile:
    mux = {"target": target, **facts}
    return SignedFile(f"{TAG}/{ARCHIVE}", len(ARCHIVE_BYTES), sha256, {"mux": mux}, "targets")


def _failing(error: BaseException) -> Callable[[str], AttestationVerdict]:
    return lambda sha256: AttestationVerdict(sha256, (), error)


OTHER = "0" * 64
VERDICTS: list[tuple[str, str, dict[str, Any], type[BaseException] | None, str]] = [
    ("unchanged", FULL, {}, None, "verified"),
    ("unchanged", DELTA, {}, None, "verified"),
    (
        "manifest not listed",
        FULL,
        {"listed": {models.MANIFEST_NAME: None}},
        VerificationError,
        "verification failed (manifest): SHA256SUMS does not list manifest.json",
    ),
    (
        "manifest swapped",
        FULL,
        {"listed": {models.MANIFEST_NAME: OTHER}},
        VerificationError,
        f"verification failed (manifest): manifest.json has sha256 {_sha(_manifest())}, "
        f"SHA256SUMS says {OTHER}",
    ),
    (
        "manifest of another release",
        FULL,
        {"manifest": _manifest(version="1.1.0")},
        VerificationError,
        "verification failed (manifest): manifest.json says version 1.1.0, expected 1.2.0",
    ),
    (
        "manifest whose signed target says another protocol",
        FULL,
        {"manifest_target": _target(protocol_version=2)},
        VerificationError,
        "verification failed (tuf): manifest.json of v1.2.0 says protocol 1, its signed target "
        "says 2",
    ),
    (
        "archive not what SHA256SUMS signs",
        FULL,
        {"listed": {ARCHIVE: OTHER}},
        VerificationError,
        "verification failed (digest): manifest.json",
    ),
    (
        "archive signed in TUF with another digest",
        FULL,
        {"archive_target": _target(OTHER)},
        VerificationError,
        f"verification failed (tuf): {ARCHIVE} of v1.2.0: its signed target gives",
    ),
    (
        "archive signed in TUF for another target",
        FULL,
        {"archive_target": _target(target="aarch64-apple-darwin")},
        VerificationError,
        f"verification failed (tuf): {ARCHIVE} of v1.2.0 is signed as a build for "
        "aarch64-apple-darwin",
    ),
    (
        "download with another digest",
        FULL,
        {"archive": (len(ARCHIVE_BYTES), OTHER)},
        VerificationError,
        f"verification failed (digest): {ARCHIVE} has sha256 {OTHER}, SHA256SUMS says "
        f"{ARCHIVE_SHA}",
    ),
    (
        "download of another size",
        FULL,
        {"archive": (1, ARCHIVE_SHA)},
        VerificationError,
        f"verification failed (digest): {ARCHIVE} is 1 bytes, the manifest says "
        f"{len(ARCHIVE_BYTES)}",
    ),
    (
        "GitHub's digest differs",
        FULL,
        {"api_digest": OTHER},
        VerificationError,
        f"verification failed (digest): {ARCHIVE} has sha256 {ARCHIVE_SHA}, GitHub's asset "
        f"digest is {OTHER}",
    ),
    (
        "attestation missing",
        FULL,
        {"verdict": _failing(layer_failure("attestation", f"no attestation for sha256 {OTHER}"))},
        VerificationError,
        f"verification failed (attestation): no attestation for sha256 {OTHER}",
    ),
    (
        "attestation for another digest",
        FULL,
        {"verdict": lambda _sha256: _passed(OTHER)},
        VerificationError,
        f"verification failed (attestation): the download has sha256 {ARCHIVE_SHA}, the "
        f"attestation was verified for {OTHER}",
    ),
    (
        "attestation check that could not reach its bundle",
        FULL,
        {"verdict": _failing(NetworkError("the bundle store is down"))},
        VerificationError,
        "verification failed (attestation): the bundle store is down",
    ),
    (
        "attestation check that broke",
        FULL,
        {"verdict": _failing(RuntimeError("the bundle store fell over"))},
        VerificationError,
        "verification failed (attestation): RuntimeError: the bundle store fell over",
    ),
    (
        "interrupted attestation",
        FULL,
        {"verdict": _failing(KeyboardInterrupt())},
        KeyboardInterrupt,
        "",
    ),
    (
        "no file list",
        DELTA,
        {"listed": {LIST_NAME: None}},
        DeltaUnusable,
        f"the release has no {LIST_NAME}",
    ),
    (
        "file list swapped",
        DELTA,
        {"listed": {LIST_NAME: OTHER}},
        DeltaUnusable,
        f"{LIST_NAME} has sha256 {_sha(_file_list())}, SHA256SUMS says {OTHER}",
    ),
    (
        "file list of another release",
        DELTA,
        {"file_list": _file_list(version="1.1.9")},
        DeltaUnusable,
        f"{LIST_NAME} describes another build than {ARCHIVE}",
    ),
    (
        "file list that does not parse",
        DELTA,
        {"file_list": b"{"},
        DeltaUnusable,
        LIST_NAME,
    ),
    (
        "no delta from a kept version",
        DELTA,
        {"kept": ("1.0.0",)},
        DeltaUnusable,
        "the release has no delta from a version this install keeps",
    ),
    (
        "delta not what the lists sign",
        DELTA,
        {"delta": (len(DELTA_BYTES), OTHER)},
        DeltaUnusable,
        f"{DELTA_NAME} is {len(DELTA_BYTES)} bytes with sha256 {OTHER}; the signed lists say",
    ),
    (
        "delta GitHub gives another digest of",
        DELTA,
        {"api_digest": OTHER},
        DeltaUnusable,
        f"{DELTA_NAME} has sha256 {DELTA_SHA}, GitHub's asset digest is {OTHER}",
    ),
    (
        "delta whose file list is not attested",
        DELTA,
        {"verdict": _failing(layer_failure("attestation", "no attestation for the file list"))},
        DeltaUnusable,
        "verification failed (attestation): no attestation for the file list",
    ),
]


@pytest.mark.parametrize(
    ("way", "changed", "refusal", "says"),
    [row[1:] for row in VERDICTS],
    ids=[f"{row[1]}: {row[0]}" for row in VERDICTS],
)
def test_the_verdict_of_each_input(
    way: str, changed: dict[str, Any], refusal: type[BaseException] | None, says: str
) -> None:
    feed = dataclasses.replace(Feed(), **changed)
    if refusal is None:
        trusted, verified = _run(feed, way)
        assert trusted.step is Step.VERIFIED and verified.folder == FOLDER
        return
    trusted = TrustedRelease(TAG, POLICY, VerificationLog())
    for name, step in _steps(feed, way):
        before = trusted.step
        try:
            step(trusted)
        except refusal as exc:
            text = exc.message if isinstance(exc, MuxError) else str(exc)
            assert text.startswith(says), (name, text)
            assert trusted.step is before  # a refusal takes no step
            assert not any(layer.layer == "smoke-test" for layer in trusted.log.layers)
            return
    pytest.fail(f"{way} with {changed} was verified")


def test_a_delta_the_release_does_not_offer_is_not_tried() -> None:
    feed = Feed(listed={LIST_NAME: None})
    trusted = TrustedRelease(TAG, POLICY, VerificationLog())
    for _name, step in _steps(feed, DELTA)[:2]:
        step(trusted)
    with pytest.raises(DeltaUnusable) as given_up:
        trusted.delta_offered(_asset())
    assert given_up.value.tried is False
