"""``mux-release verify``: run mux update's verification on a release folder or a tag.

The release is read through a source of :mod:`updater.sources.base` (the folder, or GitHub for a
tag) and checked by :mod:`updater.trust.pipeline`'s pipeline, the one ``mux update`` runs, with the
strictest policy: signature, manifest, digests and attestation for every archive, each
unpacked into a scratch folder, and the one built for this machine smoke-tested. Each
layer's result is reported. On top of ``mux update``'s layers, right after each archive is
unpacked (and before its build runs), it checks the archive's SBOM (``mux-<target>.cdx.json``,
covered by the signed ``SHA256SUMS``): present, and listing exactly the files the archive
unpacks to (:func:`release.bill.sbom.check_release_sbom`).

With ``tuf_root`` (a ``root.json`` the repository's chain starts from), the release is also read
through its TUF repository, as a build that trusts that root reads it: the tag must be listed,
and every file is checked against its signed length and sha256 (layer ``tuf``). The repository
is ``tuf_metadata`` (a folder or URL), else the ``metadata/`` beside a release folder (a feed's);
the trusted metadata is kept in a scratch folder, so each run starts from that root.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from release.bill.sbom import check_release_sbom
from updater.config import settings as mux_settings
from updater.config.settings import Settings
from updater.config.targets import detect_target_or_empty
from updater.core.request import ReleaseRequest
from updater.errors import UsageError
from updater.formats import models
from updater.net.client import HttpClient
from updater.net.hosts import HostPolicy
from updater.sources.base import ReleaseSource
from updater.sources.folder import ReleaseFolderSource
from updater.sources.github import GitHubSource
from updater.sources.tuf_index import TufIndex, TufSpec
from updater.trust.layers import VerificationLog
from updater.trust.pipeline import (
    FilesRequest,
    smoke_tested,
    verify_release_metadata,
    verify_release_tree,
)
from updater.trust.trust_policy import TrustPolicy, sigstore_root
from updater.urls import check_url_scheme, url_origin


@dataclass
class ReleaseVerification:
    location: str
    tag: str
    log: VerificationLog = field(default_factory=VerificationLog)


def verify_release(
    location: str,
    *,
    keys: Sequence[str],
    repo: str,
    tag: str | None = None,
    skip_attestation: bool = False,
    trusted_root: Path | None = None,
    smoke_target: str | None = None,
    settings: Settings | None = None,
    tuf_root: bytes | None = None,
    tuf_metadata: str | None = None,
) -> ReleaseVerification:
    """Verify a release folder, or the GitHub release ``location`` (a ``vX.Y.Z`` tag).

    ``settings`` (default: read from the environment) gives GitHub's URLs, the HTTP limits
    and, unless ``trusted_root`` is given, the Sigstore trust root.
    """
    settings = settings or mux_settings.load()
    policy = TrustPolicy.for_release(
        tuple(keys),
        repo,
        skip_attestation=skip_attestation,
        trusted_root=trusted_root or sigstore_root(settings),
    )
    this_target = smoke_target or detect_target_or_empty()
    source, request, shown = _open(location, tag, repo, settings)
    with contextlib.ExitStack() as stack:
        stack.enter_context(source)
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mux-release-verify-")))
        if tuf_root is not None:
            request = _read_through_tuf(
                source, request, tuf_root, tuf_metadata, work / "tuf", settings, stack
            )
        release_tag = source.resolve(request)
        result = ReleaseVerification(shown, release_tag)
        release = verify_release_metadata(source, release_tag, policy, result.log)
        for asset in release.manifest.assets:
            unpacked = work / f"unpacked-{asset.target}"
            unpacked.mkdir()
            files = FilesRequest(
                download_dir=work,
                unpack_dir=unpacked,
                smoke_target=this_target,
                smoke_timeout=settings.smoke_test_timeout,
            )
            tree = verify_release_tree(source, release, asset, policy, result.log, files)
            # The SBOM names the files the archive holds: checked before anything in them runs.
            check_release_sbom(source, release, asset.target, unpacked, log=result.log)
            smoke_tested(tree, files)
    return result


def _read_through_tuf(
    source: ReleaseSource,
    request: ReleaseRequest,
    root: bytes,
    metadata: str | None,
    state_dir: Path,
    settings: Settings,
    stack: contextlib.ExitStack,
) -> ReleaseRequest:
    """Give ``source`` the TUF repository (see the module docstring); the request to resolve."""
    if metadata is None:
        if not isinstance(source, ReleaseFolderSource):
            raise UsageError("verifying a tag through TUF needs --tuf-metadata URL")
        metadata = str(source.folder.parent / models.TUF_METADATA_DIR)
    client = None
    if "://" in metadata:
        check_url_scheme(metadata)
        client = HttpClient(
            policy=HostPolicy(allowed_hosts=frozenset({url_origin(metadata)})),
            settings=settings.http,
            plain_loopback_only=metadata.startswith("http://"),
        )
        stack.callback(client.close)
    spec = TufSpec(metadata.rstrip("/"), root, "--tuf-root", str(state_dir))
    source.tuf = TufIndex(spec, client=client, lock_wait=settings.lock_timeout)
    if isinstance(source, ReleaseFolderSource):
        return ReleaseRequest.tagged(source.tag)
    return request


def _open(
    location: str, tag: str | None, repo: str, settings: Settings
) -> tuple[ReleaseSource, ReleaseRequest, str]:
    """A release folder (its own tag, or ``tag``), or the release ``location`` names on GitHub;
    the request for its one release, and how to name it."""
    if Path(location).is_dir():
        return ReleaseFolderSource(Path(location), tag=tag), ReleaseRequest.latest(), location
    models.parse_tag(location)
    if not repo:
        raise UsageError("verifying a tag needs --repo owner/name (or MUX_REPO)")
    github = settings.github
    source = GitHubSource(
        repo, web_url=github.web_url, api_url=github.api_url, token=github.token, http=settings.http
    )
    return source, ReleaseRequest.tagged(location), f"{source.location} {location}"
