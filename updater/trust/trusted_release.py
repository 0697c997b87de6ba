"""The trusted state of one release's verification, fed in order; the one place that says
"verified".

In the shape of python-tuf ngclient's ``TrustedMetadataSet``: :class:`TrustedRelease` is given
bytes, digests and verdicts, one step after the other, and checks each against what the
steps before it accepted; it reads no network, writes no file and runs nothing. The driver
(:mod:`updater.trust.pipeline`) downloads, unpacks, flushes and runs the smoke test, and feeds
it what came::

    tuf(targets)?                                       layer 0, from a TUF source only
    sums(SHA256SUMS, its signature)                     layer 1
    manifest(manifest.json, its signed target)          layer 2        -> .release
        (resume(release): a release verify_release_metadata accepted, for its files)
    archive(asset, signed target, GitHub's digest)      layer 2        -> .attesting
      or file_list(asset, file list, GitHub's digest, kept versions)   -> .attesting, the delta
    archive_digest(size, sha256)                        layer 2, the bytes that came
      or delta_digest(size, sha256, GitHub's digest)
    attestation(verdict)                                layer 3, for the digest accepted
    tree(folder, its files, the transfer)               layer 4
    smoke_test_for(target) -> what to run, or None      (the driver runs it)
    verified() -> VerifiedFiles                         layer 5

A step called before the one it follows (or twice) raises :class:`OutOfOrder`: a bug in the
driver, never a verdict on a release. A refusal on the archive's way is a
:class:`~updater.errors.VerificationError` naming the layer; on a delta's way it is a
:class:`~updater.trust.delta.DeltaUnusable` (the driver then takes the archive, with a fresh
object), whose byte count the driver fills in.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from updater.core.transfer import DeltaChoice, choose_delta
from updater.errors import ParseError, VerificationError
from updater.formats import models
from updater.formats.delta import file_list_name, parse_file_list
from updater.timestamps import utc_text
from updater.trust.attested import AttestationVerdict, attested
from updater.trust.delta import DeltaUnusable
from updater.trust.layers import (
    LAYER_API_DIGEST,
    LAYER_ARCHIVE,
    LAYER_DIGEST,
    LAYER_SMOKE_TEST,
    LAYER_TUF,
    VerificationLog,
    VerifiedFiles,
    VerifiedRelease,
    layer_failure,
)
from updater.trust.smoke import Expected
from updater.trust.sums import (
    SignedSums,
    signed_digest,
    verify_download,
    verify_manifest,
    verify_sums,
)
from updater.trust.trust_policy import TrustPolicy

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from updater.core.transfer import Transfer
    from updater.formats.delta import FileList
    from updater.install.layout import UnpackedFiles
    from updater.trust.tuf_targets import SignedFile, SignedTargets


class OutOfOrder(RuntimeError):
    """A step of :class:`TrustedRelease` called before the step it follows (a driver's bug)."""


class Step(enum.IntEnum):
    """How far a :class:`TrustedRelease` got; each step is taken once, in this order."""

    NEW = 0
    TUF = 1
    SUMS = 2
    MANIFEST = 3
    EXPECTED = 4  # the asset chosen: its archive, or the file list and delta that build it
    DIGEST = 5
    ATTESTED = 6
    TREE = 7
    SMOKE = 8
    VERIFIED = 9


ARCHIVE = "archive"
DELTA = "delta"


@dataclass
class _Expected:
    """Step 3's answer: the asset, how its tree comes, and the digest layer 3 attests."""

    asset: models.ManifestAsset
    way: str  # ARCHIVE or DELTA
    attesting: str
    api_digest: str | None = None  # GitHub's digest of the archive, when it gives one
    file_list: FileList | None = None
    choice: DeltaChoice | None = None


class TrustedRelease:
    """One release's verification state (see the module docstring)."""

    def __init__(self, tag: str, policy: TrustPolicy, log: VerificationLog) -> None:
        self.tag = tag
        self.policy = policy
        self.log = log
        self._step = Step.NEW
        self._sums: SignedSums | None = None
        self._release: VerifiedRelease | None = None
        self._expected: _Expected | None = None
        self._digest: str | None = None
        self._tree: VerifiedFiles | None = None
        self._smoke: Expected | None = None

    @classmethod
    def resume(
        cls, release: VerifiedRelease, policy: TrustPolicy, log: VerificationLog
    ) -> TrustedRelease:
        """The state after step 2 for ``release``, which :func:`verify_release_metadata`
        (through this class) accepted: the files of one release are verified by a fresh
        object per attempt (an archive, or a delta that may fall back to it)."""
        trusted = cls(release.tag, policy, log)
        trusted._sums = SignedSums(release.sums, release.signed_at)
        trusted._release = release
        trusted._step = Step.MANIFEST
        return trusted

    @property
    def step(self) -> Step:
        return self._step

    def _require(self, method: str, *after: Step) -> None:
        """Refuse a step taken out of order; a step that refuses leaves the state as it was,
        so each step moves it on only once its checks passed."""
        if self._step not in after:
            wanted = " or ".join(s.name.lower() for s in after)
            raise OutOfOrder(
                f"TrustedRelease.{method}() at step {self._step.name.lower()}; "
                f"it follows step {wanted}"
            )

    # -- layers 0 to 2 on the small documents ---------------------------------------------

    def tuf(self, targets: SignedTargets) -> None:
        """Layer 0: the TUF repository lists this release (its files' lengths and digests
        are checked by the source as they are fetched)."""
        self._require("tuf", Step.NEW)
        self.log.ok(
            LAYER_TUF,
            f"{self.tag} listed by the TUF repository {targets.location} ({targets.describe()}, "
            f"timestamp valid until {utc_text(int(targets.versions.timestamp_expires))}); each "
            "file is checked against its signed length and sha256",
        )
        self._step = Step.TUF

    def sums(self, raw: bytes, signature: bytes | None, *, signature_url: str) -> SignedSums:
        """Layer 1: ``SHA256SUMS`` and its minisign signature (:func:`verify_sums`)."""
        self._require("sums", Step.NEW, Step.TUF)
        self._sums = verify_sums(
            raw, signature, self.policy, self.log, tag=self.tag, signature_url=signature_url
        )
        self._step = Step.SUMS
        return self._sums

    def manifest(self, raw: bytes, signed_target: SignedFile | None) -> VerifiedRelease:
        """Layer 2 for ``manifest.json``: its ``SHA256SUMS`` line and tag, and from a TUF
        source the protocol its signed target says."""
        self._require("manifest", Step.SUMS)
        assert self._sums is not None
        manifest = verify_manifest(raw, self._sums.sums, self.tag, self.log)
        if signed_target is not None:
            said = signed_target.facts.get("protocol_version")
            if said != manifest.protocol_version:
                raise layer_failure(
                    LAYER_TUF,
                    f"manifest.json of {self.tag} says protocol {manifest.protocol_version}, "
                    f"its signed target says {str(said)[:40]}",
                    hint="the release's files do not agree with the signed metadata; report it",
                )
        self._release = VerifiedRelease(self.tag, self._sums.sums, manifest, self._sums.timestamp)
        self._step = Step.MANIFEST
        return self._release

    @property
    def release(self) -> VerifiedRelease:
        """What steps 1 and 2 accepted."""
        if self._release is None:
            raise OutOfOrder("TrustedRelease.release before step manifest")
        return self._release

    # -- step 3: how the tree comes -------------------------------------------------------

    def archive(
        self,
        asset: models.ManifestAsset,
        signed_target: SignedFile | None,
        api_digest: str | None,
        api_unavailable: str | None = None,
    ) -> str:
        """The archive of ``asset``: its signed digest (layer 3 attests it before a byte
        arrives); from a TUF source its signed target must agree. ``api_digest``: GitHub's
        digest of it, if given; ``api_unavailable``: why none could be read (reported)."""
        self._require("archive", Step.MANIFEST)
        release = self.release
        if api_unavailable is not None:
            self.log.skipped(
                LAYER_API_DIGEST, f"GitHub's asset digest unavailable: {api_unavailable}"
            )
        signed = signed_digest(asset.name, sums=release.sums, manifest=release.manifest)
        if signed_target is not None:
            _same_as_signed_target(self.tag, asset, signed, signed_target)
        self._expected = _Expected(asset, ARCHIVE, signed, api_digest=api_digest)
        self._step = Step.EXPECTED
        return signed

    def delta_offered(self, asset: models.ManifestAsset) -> str:
        """The name of ``asset``'s file list, which a delta needs, when the signed
        ``SHA256SUMS`` lists one (asked before :meth:`file_list`; it takes no step), else
        :class:`DeltaUnusable` (not tried: the release simply offers none)."""
        self._require("delta_offered", Step.MANIFEST)
        name = file_list_name(asset.target)
        if name not in self.release.sums:
            raise DeltaUnusable(f"the release has no {name}", tried=False)
        return name

    def file_list(
        self,
        asset: models.ManifestAsset,
        raw: bytes,
        api_digest: str | None,
        kept: Sequence[str],
    ) -> DeltaChoice:
        """The file list of ``asset`` (its signed ``SHA256SUMS`` line, GitHub's digest, the
        build it describes) and the delta to build the tree by, from one of the ``kept``
        versions; layer 3 attests the file list's digest (it names every byte of the tree)."""
        self._require("file_list", Step.MANIFEST)
        name = self.delta_offered(asset)
        release = self.release
        listed = release.sums[name]
        actual = hashlib.sha256(raw).hexdigest()
        if actual != listed:
            raise DeltaUnusable(f"{name} has sha256 {actual}, SHA256SUMS says {listed}")
        _same_as_published(name, actual, api_digest)
        try:
            file_list = parse_file_list(raw, name=name)
        except ParseError as exc:
            raise DeltaUnusable(exc.message) from None
        described = (file_list.version, file_list.target, *_archive_of(file_list))
        wanted = (release.manifest.version, asset.target, asset.name, asset.size, asset.sha256)
        if described != wanted:
            raise DeltaUnusable(f"{name} describes another build than {asset.name}")
        self.log.ok(
            LAYER_DIGEST, f"{name} sha256 {actual} matches SHA256SUMS; it describes {asset.name}"
        )
        choice = choose_delta(file_list, release.sums, kept, archive_size=asset.size)
        if isinstance(choice, str):
            raise DeltaUnusable(choice, tried=False)
        self._expected = _Expected(asset, DELTA, actual, file_list=file_list, choice=choice)
        self._step = Step.EXPECTED
        return choice

    @property
    def attesting(self) -> str:
        """The digest layer 3 attests (after step 3)."""
        if self._expected is None:
            raise OutOfOrder("TrustedRelease.attesting before step archive or file_list")
        return self._expected.attesting

    @property
    def accepted_file_list(self) -> FileList:
        """The file list step 3 accepted: the delta's tree is built and checked against it."""
        expected = self._expected
        if expected is None or expected.file_list is None:
            raise OutOfOrder("TrustedRelease.accepted_file_list before step file_list")
        return expected.file_list

    # -- step 4: the bytes that came ------------------------------------------------------

    def archive_digest(self, size: int, sha256: str) -> None:
        """Layer 2 for the downloaded archive (:func:`verify_download`)."""
        expected = self._expected_by("archive_digest", ARCHIVE)
        asset = expected.asset
        verify_download(
            asset.name,
            sha256,
            size,
            signed=expected.attesting,
            expected_size=asset.size,
            api_digest=expected.api_digest,
            log=self.log,
        )
        self._digest = sha256
        self._step = Step.DIGEST

    def delta_digest(self, size: int, sha256: str, api_digest: str | None) -> None:
        """Layer 2 for the downloaded delta: the size and digest the signed lists give, and
        GitHub's digest if it gives one."""
        expected = self._expected_by("delta_digest", DELTA)
        assert expected.choice is not None
        ref = expected.choice.delta
        if size != ref.size or sha256 != ref.sha256:
            raise DeltaUnusable(
                f"{ref.name} is {size} bytes with sha256 {sha256}; "
                f"the signed lists say {ref.size} bytes, sha256 {ref.sha256}"
            )
        _same_as_published(ref.name, sha256, api_digest)
        name = file_list_name(expected.asset.target)
        self.log.ok(LAYER_DIGEST, f"{ref.name} sha256 {sha256} matches SHA256SUMS and {name}")
        self._digest = expected.attesting  # the tree is built and checked by the file list
        self._step = Step.DIGEST

    def _expected_by(self, method: str, way: str) -> _Expected:
        self._require(method, Step.EXPECTED)
        expected = self._expected
        assert expected is not None
        if expected.way != way:
            raise OutOfOrder(f"TrustedRelease.{method}() after step 3 chose the {expected.way}")
        return expected

    # -- steps 5 and 6: layer 3's verdict, the tree ---------------------------------------

    def attestation(self, verdict: AttestationVerdict) -> None:
        """Layer 3: the verdict must be a pass for exactly the digest step 4 accepted."""
        self._require("attestation", Step.DIGEST)
        assert self._expected is not None and self._digest is not None
        try:
            layers = attested(verdict, self._digest)
        except VerificationError as exc:
            if self._expected.way == DELTA:
                raise DeltaUnusable(exc.message) from None
            raise
        self.log.layers.extend(layers)
        self._step = Step.ATTESTED

    def tree(self, folder: Path, unpacked: UnpackedFiles | None, transfer: Transfer) -> None:
        """Layer 4: the tree in ``folder`` was unpacked (members confined, sizes capped) or
        built by the delta (every file as the file list says), and the ``mux`` executable
        is there (:func:`unpack`, :func:`apply_delta` refuse anything else)."""
        self._require("tree", Step.ATTESTED)
        expected = self._expected
        assert expected is not None and self._digest is not None
        asset = expected.asset
        if expected.choice is not None:
            self.log.ok(
                LAYER_ARCHIVE,
                f"{expected.choice.delta.name}: {asset.name}'s tree built from "
                f"{expected.choice.base}'s files; every file matches the signed file list; "
                "mux executable present",
            )
            archive_sha256 = asset.sha256
        else:
            self.log.ok(
                LAYER_ARCHIVE,
                f"{asset.name}: members confined to its folder; mux executable present",
            )
            archive_sha256 = self._digest
        self._tree = VerifiedFiles(asset, archive_sha256, folder, unpacked, transfer)
        self._step = Step.TREE

    # -- step 7: layer 5 ------------------------------------------------------------------

    def smoke_test_for(self, target: str | None) -> Expected | None:
        """What the build must say when it runs here, or None when it is built for another
        target than ``target`` (this machine's) and is not run."""
        self._require("smoke_test_for", Step.TREE)
        assert self._tree is not None
        asset, manifest = self._tree.asset, self.release.manifest
        if asset.target == target:
            self._smoke = Expected(manifest.version, manifest.protocol_version, asset.target)
        self._step = Step.SMOKE
        return self._smoke

    def verified(self) -> VerifiedFiles:
        """Every layer passed (the driver ran the smoke test :meth:`smoke_test_for` asked
        for, and it passed): the tree, as verified."""
        self._require("verified", Step.SMOKE)
        verified = self._tree
        assert verified is not None
        asset = verified.asset
        if self._smoke is None:
            self.log.skipped(
                LAYER_SMOKE_TEST, f"{asset.name}: built for another target ({asset.target})"
            )
        else:
            self.log.ok(
                LAYER_SMOKE_TEST,
                f"{asset.name}: `mux version --json` reports {self._smoke.version} for "
                f"{asset.target}",
            )
        self._step = Step.VERIFIED
        return verified


def _archive_of(file_list: FileList) -> tuple[str, int, str]:
    return file_list.archive.name, file_list.archive.size, file_list.archive.sha256


def _same_as_published(name: str, sha256: str, api_digest: str | None) -> None:
    """GitHub's own digest of a delta's file, where it gives one, must be ``sha256``."""
    if api_digest is not None and api_digest != sha256:
        raise DeltaUnusable(f"{name} has sha256 {sha256}, GitHub's asset digest is {api_digest}")


def _same_as_signed_target(
    tag: str, asset: models.ManifestAsset, signed: str, target: SignedFile
) -> None:
    """From a TUF source, the archive's target must give the length, the sha256 and the
    target triple the manifest and ``SHA256SUMS`` give (wrong software for this target, or a
    digest nobody signed in TUF, is refused before a byte is downloaded)."""
    if target.sha256 != signed or target.length != asset.size:
        raise layer_failure(
            LAYER_TUF,
            f"{asset.name} of {tag}: its signed target gives {target.length} bytes, sha256 "
            f"{target.sha256}; SHA256SUMS and manifest.json give {asset.size} bytes, sha256 "
            f"{signed}",
            hint="the release's files do not agree with the signed metadata; do not install it",
        )
    if target.facts.get("target") != asset.target:
        raise layer_failure(
            LAYER_TUF,
            f"{asset.name} of {tag} is signed as a build for "
            f"{str(target.facts.get('target'))[:80]}, not {asset.target}",
            hint="wrong software for this target; do not install it, and report it",
        )
