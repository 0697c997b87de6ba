"""``mux-release verify``: run mux update's verification on a release folder or a tag.

The layers are :mod:`updater.verify`'s and :mod:`updater.install`'s own functions, called in
the order ``mux update`` calls them, for every archive of the release: signature, manifest,
digests, attestation, a safe unpack (into a temporary folder) and, for the archive built for
this machine, the smoke test. Each layer's result is reported. On top of ``mux update``'s
layers it checks each archive's SBOM (``mux-<target>.cdx.json``, covered by the signed
``SHA256SUMS``): present, and listing exactly the files the archive unpacks to
(:func:`release.sbom.check_release_sbom`).
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from release.sbom import check_release_sbom
from updater import models
from updater.buildinfo import OIDC_ISSUER, SIGNER_WORKFLOW
from updater.errors import NetworkError, UsageError
from updater.verify import (
    LAYER_ARCHIVE,
    LAYER_SMOKE_TEST,
    TrustPolicy,
    VerificationLog,
    verify_download,
    verify_manifest,
    verify_release_attestation,
    verify_sums,
)


@dataclass
class ReleaseVerification:
    location: str
    tag: str
    log: VerificationLog = field(default_factory=VerificationLog)


@dataclass(frozen=True)
class _Release:
    """Read access to one release: a folder, or a tag through the GitHub source."""

    location: str
    tag: str
    fetch: Callable[[str], bytes]
    file_location: Callable[[str], str]
    client: object | None
    kind: str
    api_digests: Callable[[], dict[str, str]]
    api_bundles: Callable[[str], list[bytes]]


def _folder_release(folder: Path, tag: str | None) -> _Release:
    if not (folder / models.MANIFEST_NAME).is_file():
        raise UsageError(f"{folder} holds no {models.MANIFEST_NAME}; is it a release folder?")

    def fetch(name: str) -> bytes:
        try:
            return (folder / name).read_bytes()
        except OSError as exc:
            raise NetworkError(f"cannot read {folder / name}: {exc.strerror}") from None

    if tag is None:
        tag = models.tag_for(models.parse_manifest(fetch(models.MANIFEST_NAME)).version)
    return _Release(
        str(folder), tag, fetch, lambda n: str(folder / n), None, "feed", dict, lambda _sha: []
    )


def verify_release(
    location: str,
    *,
    keys: Sequence[str],
    repo: str,
    tag: str | None = None,
    skip_attestation: bool = False,
    trusted_root: Path | None = None,
    smoke_target: str | None = None,
) -> ReleaseVerification:
    """Verify a release folder, or the GitHub release ``location`` (a ``vX.Y.Z`` tag)."""
    from updater._targets import detect_target_or_empty
    from updater.download import download
    from updater.install import Expected, smoke_test, unpack

    source = None
    if Path(location).is_dir():
        release = _folder_release(Path(location), tag)
    else:
        models.parse_tag(location)
        from updater.sources import GitHubSource

        if not repo:
            raise UsageError("verifying a tag needs --repo owner/name (or MUX_REPO)")
        source = GitHubSource(repo)
        gh = source
        release = _Release(
            f"{gh.location} {location}",
            location,
            lambda n: gh.fetch(location, n),
            lambda n: gh.file_url(location, n),
            gh.client,
            "github",
            lambda: gh.asset_digests(location),
            gh.attestation_bundles,
        )
    result = ReleaseVerification(release.location, release.tag)
    log = result.log
    policy = TrustPolicy(
        minisign_keys=tuple(keys),
        require_signature=True,
        repository=repo,
        signer_workflow=SIGNER_WORKFLOW,
        oidc_issuer=OIDC_ISSUER,
        require_attestation=True,
        skip_attestation=skip_attestation,
        trusted_root=trusted_root,
    )
    this_target = smoke_target or detect_target_or_empty()
    try:
        try:
            signature = release.fetch(models.SUMS_SIGNATURE_NAME)
        except NetworkError:
            signature = None
        sums = verify_sums(release.fetch(models.SUMS_NAME), signature, policy, log)
        manifest = verify_manifest(release.fetch(models.MANIFEST_NAME), sums, release.tag, log)
        digests = release.api_digests() if release.kind == "github" else {}
        bundle_name = models.attestation_name(manifest.version)
        with tempfile.TemporaryDirectory(prefix="mux-release-verify-") as scratch:
            work = Path(scratch)
            for asset in manifest.assets:
                fetched = download(
                    release.file_location(asset.name),
                    work,
                    expected_size=asset.size,
                    client=release.client,
                    label=asset.name,
                )
                verify_download(
                    asset.name,
                    fetched.sha256,
                    fetched.size,
                    sums=sums,
                    manifest=manifest,
                    api_digest=digests.get(asset.name),
                    log=log,
                )

                def shipped(name: str = bundle_name) -> bytes | None:
                    try:
                        return release.fetch(name)
                    except NetworkError:
                        return None

                verify_release_attestation(
                    release.tag,
                    fetched.sha256,
                    policy,
                    log,
                    release_bundle=shipped,
                    api_bundles=functools.partial(release.api_bundles, fetched.sha256),
                    source_kind=release.kind,
                )
                unpacked = work / f"unpacked-{asset.target}"
                unpacked.mkdir()
                unpack(fetched.path, unpacked, top=f"mux-{asset.target}")
                log.ok(LAYER_ARCHIVE, f"{asset.name}: members confined, mux executable present")
                check_release_sbom(release.fetch, sums, asset.target, unpacked, log)
                if asset.target == this_target:
                    smoke_test(
                        unpacked,
                        Expected(manifest.version, manifest.protocol_version, asset.target),
                    )
                    log.ok(LAYER_SMOKE_TEST, f"{asset.name}: `mux version --json` matches")
                else:
                    log.skipped(LAYER_SMOKE_TEST, f"{asset.name}: built for another target")
    finally:
        if source is not None:
            source.close()
    return result
