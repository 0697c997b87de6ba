"""What a reader makes of a feed's signed data, driven in this process through the in-memory
source (tests/support/memory.py): the signed index and its rules
(:mod:`updater.sources.feed_index`: signature, expiry, rollback), layers 1 and 2 on a
release's small documents (:func:`updater.trust.pipeline.verify_release_metadata`, through
the trust layers' interface :mod:`updater.trust.source`), and the lifecycle records that pick
the release on offer (:func:`updater.commands.lifecycle.plan_lifecycle`). The same rules run
end to end, against real feeds and processes, in test_check.py, test_lifecycle_feed.py and
the attack suites."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from tests.support.feeds import KEYS, TARGET
from tests.support.memory import MISSING, TRUNCATED, WRONG_DIGEST, MemorySource
from tests.support.releases import make_keypair
from updater.commands.lifecycle import plan_lifecycle
from updater.config import settings as mux_settings
from updater.config.buildinfo import BuildInfo
from updater.core.request import ReleaseRequest
from updater.errors import MuxError, NetworkError, VerificationError
from updater.formats import models
from updater.sources.feed_index import remember
from updater.trust.layers import VerificationLog
from updater.trust.pipeline import verify_release_metadata
from updater.trust.source import ReleaseFiles
from updater.trust.trust_policy import TrustPolicy

BUILD = BuildInfo(version="1.0.0", protocol_version=1, target=TARGET, repo="", development=False)


@pytest.fixture
def source(tmp_path: Path) -> MemorySource:
    feed = MemorySource(state_dir=tmp_path)
    feed.add_release("1.0.0")
    feed.add_release("1.1.0")
    feed.add_release("1.2.0rc1", prerelease=True)
    feed.sign_index()
    return feed


@pytest.fixture
def settings(tmp_path: Path) -> mux_settings.Settings:
    home = tmp_path / "home"
    return mux_settings.load(
        {
            "HOME": str(home),
            "XDG_STATE_HOME": str(home / "state"),
            "XDG_CACHE_HOME": str(home / "cache"),
            "XDG_CONFIG_HOME": str(home / "config"),
            "MUX_UPDATE_SOURCE": "memory://feed",
        }
    )


def metadata(source: MemorySource, tag: str, settings: mux_settings.Settings):
    files: ReleaseFiles = source  # what the trust layers read a source as
    policy = TrustPolicy.for_update(files, BUILD, settings)
    policy = policy._replace(minisign_keys=(source.keypair.public_key,))
    return verify_release_metadata(files, tag, policy, VerificationLog())


# -- the signed index ------------------------------------------------------------------------


def test_the_newest_release_is_what_the_signed_index_lists(source: MemorySource) -> None:
    assert source.latest_tag(include_pre=False) == "v1.1.0"
    assert source.latest_tag(include_pre=True) == "v1.2.0rc1"
    assert source.reads == ["releases.json.minisig", "releases.json"]  # read once


def test_an_index_signed_by_another_key_is_refused(tmp_path: Path) -> None:
    feed = MemorySource(keypair=make_keypair(tmp_path / "other"), state_dir=tmp_path)
    feed.add_release("1.0.0")
    feed.sign_index()
    feed.policy = dataclasses.replace(feed.policy, keys=(KEYS.public_key,))
    with pytest.raises(VerificationError, match="not signed by a key this mux trusts"):
        feed.latest_tag(include_pre=False)


def test_an_index_without_its_signature_is_refused(source: MemorySource) -> None:
    source.fault("", "releases.json.minisig", MISSING)
    source.sign_index()
    with pytest.raises(VerificationError, match="could not download the signature"):
        source.latest_tag(include_pre=False)


def test_an_expired_index_is_refused_unless_allowed(source: MemorySource) -> None:
    source.sign_index(expires_in=-60)
    with pytest.raises(VerificationError, match="expired at"):
        source.latest_tag(include_pre=False)
    source.policy = dataclasses.replace(source.policy, allow_expired=True)
    source.sign_index(expires_in=-60)
    index = source.verified_index()
    assert index is not None and index.expired and "EXPIRED" in (index.expiry_warning() or "")


def test_a_rolled_back_index_is_refused_once_a_newer_one_was_seen(source: MemorySource) -> None:
    source.sign_index(seq=5)
    index = source.verified_index()
    assert index is not None
    remember(index)  # what a command does once its answer stands
    source.sign_index(seq=4)
    with pytest.raises(VerificationError, match="lower than 5"):
        source.latest_tag(include_pre=False)
    source.sign_index(seq=5)  # the same list again is no rollback
    assert source.latest_tag(include_pre=False) == "v1.1.0"


# -- layers 1 and 2 on the small documents ---------------------------------------------------


def test_a_release_s_documents_verify(source: MemorySource, settings) -> None:
    release = metadata(source, "v1.1.0", settings)
    assert release.manifest.version == "1.1.0"
    assert release.manifest.asset_for(TARGET) is not None
    assert set(release.sums) == {models.MANIFEST_NAME, models.archive_name(TARGET)}
    assert release.signed_at is not None and abs(release.signed_at - time.time()) < 600


@pytest.mark.parametrize(
    ("name", "fault", "error", "words"),
    [
        (models.MANIFEST_NAME, MISSING, NetworkError, "404"),
        (models.MANIFEST_NAME, TRUNCATED, VerificationError, "manifest.json"),
        (models.MANIFEST_NAME, WRONG_DIGEST, VerificationError, "manifest.json"),
        (models.SUMS_NAME, MISSING, NetworkError, "404"),
        (models.SUMS_NAME, WRONG_DIGEST, VerificationError, "SHA256SUMS"),
        (models.SUMS_NAME, TRUNCATED, VerificationError, "SHA256SUMS"),
        (models.SUMS_SIGNATURE_NAME, MISSING, VerificationError, "SHA256SUMS.minisig"),
        (models.SUMS_SIGNATURE_NAME, WRONG_DIGEST, VerificationError, "SHA256SUMS"),
    ],
)
def test_a_faulty_document_is_refused(
    source: MemorySource, settings, name: str, fault: str, error: type, words: str
) -> None:
    source.fault("v1.1.0", name, fault)
    with pytest.raises(error) as caught:
        metadata(source, "v1.1.0", settings)
    assert words in caught.value.message
    metadata(source, "v1.0.0", settings)  # the other release is untouched


def test_an_unsigned_release_is_refused_where_a_signature_is_required(
    source: MemorySource, settings
) -> None:
    source.add_release("1.3.0", signed=False)
    source.sign_index()
    with pytest.raises(VerificationError, match=r"SHA256SUMS\.minisig"):
        metadata(source, "v1.3.0", settings)


def test_a_release_signed_as_another_version_is_refused(source: MemorySource, settings) -> None:
    """Mix and match: v1.1.0's files under v1.0.0's tag."""
    for name in (models.MANIFEST_NAME, models.SUMS_NAME, models.SUMS_SIGNATURE_NAME):
        source.documents[f"v1.0.0/{name}"] = source.documents[f"v1.1.0/{name}"]
    with pytest.raises(MuxError):
        metadata(source, "v1.0.0", settings)


# -- the lifecycle records -------------------------------------------------------------------


def plan(source: MemorySource, settings, request: ReleaseRequest, *, installed: str):
    tag = source.resolve(request)
    return plan_lifecycle(
        source, request, settings, tag=tag, installed=installed, kept=(), now=time.time()
    )


def test_a_halted_release_is_held_and_the_one_before_offered(source: MemorySource, settings):
    source.add_release("1.3.0", lifecycle={"halted": True})
    source.sign_index()
    planned = plan(source, settings, ReleaseRequest.latest(), installed="1.0.0")
    assert planned.tag == "v1.1.0"
    assert [(h.tag, h.why) for h in planned.view.held] == [("v1.3.0", "halted")]
    assert planned.view.available and "seq 2" in planned.view.origin


def test_a_withdrawn_install_is_told_why_and_where_it_moves(source: MemorySource, settings):
    source.add_release("1.1.0", lifecycle={"withdrawn": {"reason": "loses data"}})
    source.sign_index()
    planned = plan(source, settings, ReleaseRequest.latest(), installed="1.1.0")
    assert planned.view.withdrawn is not None
    assert planned.view.withdrawn.reason == "loses data"
    assert planned.tag == "v1.0.0"


def test_asking_for_a_withdrawn_release_by_version_is_refused(source: MemorySource, settings):
    source.add_release("1.1.0", lifecycle={"withdrawn": {"reason": "loses data"}})
    source.sign_index()
    with pytest.raises(MuxError, match="withdrawn"):
        plan(source, settings, ReleaseRequest.exactly("1.1.0"), installed="1.0.0")
