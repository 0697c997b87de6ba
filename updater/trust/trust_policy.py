"""What must hold before anything is installed: the trust policy the layers apply.

:meth:`TrustPolicy.for_update` derives it for ``mux update`` and ``--check`` (what the source
demands, with the build's keys and identity); :meth:`TrustPolicy.for_release` for
``mux-release verify`` (everything). Whose release workflow must have attested a release
found on a given GitHub is :func:`attestation_identity`.

Not the machine policy (:mod:`updater.config.policy`, an administrator's ``policy.toml``): that
one is read into the settings, and this one is derived from them and from the build.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlsplit

from updater.config.buildinfo import OIDC_ISSUER, SIGNER_WORKFLOW
from updater.errors import UsageError
from updater.trust.attestation import AttestationIdentity
from updater.trust.layers import (
    LAYER_ARCHIVE,
    LAYER_ATTESTATION,
    LAYER_DIGEST,
    LAYER_SIGNATURE,
    LAYER_SMOKE_TEST,
)
from updater.urls import GITHUB_WEB, is_loopback_host

if TYPE_CHECKING:
    from updater.config.buildinfo import BuildInfo
    from updater.config.settings import Settings
    from updater.trust.source import ReleaseFiles


def sigstore_root(settings: Settings) -> Path | None:
    """The Sigstore trust root file the settings name (``MUX_SIGSTORE_TRUSTED_ROOT``: a
    private instance's), or None for Sigstore's production root."""
    return None if settings.sigstore_trusted_root is None else Path(settings.sigstore_trusted_root)


class TrustPolicy(NamedTuple):
    """What must hold before anything is installed."""

    minisign_keys: tuple[str, ...]
    require_signature: bool
    repository: str  # owner/name whose release workflow must have built the release
    signer_workflow: str
    oidc_issuer: str
    require_attestation: bool
    skip_attestation: bool = False
    github_url: str = "https://github.com"
    trusted_root: Path | None = None  # Sigstore's trust root (None: Sigstore's production one)
    require_api_digests: bool = False  # an unreadable GitHub asset list fails (not skipped)

    @classmethod
    def for_update(cls, source: ReleaseFiles, build: BuildInfo, settings: Settings) -> TrustPolicy:
        """``mux update``: what the source demands, with the build's keys and identity.

        A signature is required from a source that demands one (a feed) and whenever the
        build trusts a key; an attestation wherever the source demands one (GitHub), and from
        every source whenever the build knows its repository: a mirror (or whoever holds a
        stolen signing key) cannot strip it, only ``--insecure-skip-attestation`` skips it.
        """
        github_url, repository = attestation_identity(
            settings.github.web_url, settings.github.repo, build.repo
        )
        return cls(
            minisign_keys=settings.trusted_keys(build.trust.minisign_keys),
            require_signature=source.signature_required or bool(build.trust.minisign_keys),
            repository=repository,
            signer_workflow=build.trust.signer_workflow,
            oidc_issuer=build.trust.oidc_issuer,
            require_attestation=source.attestation_required or bool(build.repo),
            skip_attestation=settings.skip_attestation,
            github_url=github_url,
            trusted_root=sigstore_root(settings),
        )

    @classmethod
    def for_release(
        cls,
        keys: tuple[str, ...],
        repository: str,
        *,
        skip_attestation: bool,
        trusted_root: Path | None,
    ) -> TrustPolicy:
        """``mux-release verify``: a release about to ship must pass everything."""

        return cls(
            minisign_keys=keys,
            require_signature=True,
            repository=repository,
            signer_workflow=SIGNER_WORKFLOW,
            oidc_issuer=OIDC_ISSUER,
            require_attestation=True,
            skip_attestation=skip_attestation,
            trusted_root=trusted_root,
            require_api_digests=True,
        )

    def identity(self, tag: str) -> Any:
        return AttestationIdentity(
            repository=self.repository,
            signer_workflow=self.signer_workflow,
            ref=f"refs/tags/{tag}",
            issuer=self.oidc_issuer,
            github_url=self.github_url,
        )

    def checks(self) -> tuple[str, ...]:
        """The layers this policy runs, as a dry run lists them."""
        return (
            LAYER_SIGNATURE if self.minisign_keys else f"{LAYER_SIGNATURE} (no trusted key)",
            LAYER_DIGEST,
            LAYER_ATTESTATION if not self.skip_attestation else f"{LAYER_ATTESTATION} SKIPPED",
            LAYER_ARCHIVE,
            LAYER_SMOKE_TEST,
        )


def github_identity_url(web_url: str | None) -> str:
    """The GitHub whose workflows sign mux's attestations: a configured GitHub Enterprise,
    else github.com (a loopback ``MUX_GITHUB_URL`` is an impersonator for tests: the
    attestations it serves still name github.com)."""
    if not web_url:
        return GITHUB_WEB
    try:
        host = urlsplit(web_url).hostname
    except ValueError:
        raise UsageError(f"MUX_GITHUB_URL is not a URL: {web_url[:200]!r}") from None
    return GITHUB_WEB if is_loopback_host(host) else web_url.rstrip("/")


def attestation_identity(web_url: str | None, repo: str, build_repo: str) -> tuple[str, str]:
    """Whose release workflow must have attested a release found on this GitHub: its web
    URL and ``owner/name``.

    On github.com, the repository updated from (``MUX_REPO`` may name a fork). An Enterprise
    server holds mirrors of the build's own releases (their Sigstore bundle asset copied
    along): GitHub Enterprise Server has no artifact attestations at all, and a build
    expects github.com's OIDC issuer, never a GHE.com tenant's. So a release found there must
    be attested by the build's repository on github.com, whatever the mirror is called."""
    url = github_identity_url(web_url)
    if url == GITHUB_WEB:
        return url, repo
    return GITHUB_WEB, build_repo or repo
