"""The first steps of every command that asks a source: open -> resolve -> index -> layers 1-2.

:func:`resolve_offer` is the one way ``mux update --check``, ``mux update`` and a server's
background check learn which release is on offer: it opens the source, resolves the request
to a tag (the verified TUF metadata decides which tags exist for a build that trusts a TUF
root; for a build of before TUF, a feed's signed index or GitHub's redirect), derives the trust policy, verifies
the release's small documents (the signed ``SHA256SUMS`` and the manifest it vouches for) and
decides the release against the installed version. ``mux update`` goes on with the source
still open (the download); the check turns the answer into its cacheable
:class:`~updater.core.offer.ReleaseOffer` (:func:`find_offer`).

This is the network half of the check, imported only on a cache miss.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

from updater.commands.lifecycle import (
    LifecyclePlan,
    hold_by_manifest,
    offering_move,
    plan_lifecycle,
)
from updater.core.offer import OfferedAsset, ReleaseOffer
from updater.core.request import Decision, ReleaseRequest
from updater.sources.feed_index import VerifiedIndex, remember
from updater.sources.opener import open_source
from updater.trust.layers import VerificationLog, VerifiedRelease
from updater.trust.pipeline import verify_release_metadata
from updater.trust.trust_policy import TrustPolicy

if TYPE_CHECKING:
    from updater.config.buildinfo import BuildInfo
    from updater.config.settings import Settings
    from updater.sources.base import ReleaseSource


class Resolved(NamedTuple):
    """What a source offers for a request, its small documents verified, decided."""

    source: ReleaseSource
    tag: str
    feed_index: VerifiedIndex | None  # a feed's verified index (None: GitHub)
    policy: TrustPolicy
    # Layers 1-2 on the release's documents; None when ``known`` answered for the same tag.
    release: VerifiedRelease | None
    decision: Decision
    lifecycle: LifecyclePlan  # what the signed lifecycle state made of the request


class Installed(NamedTuple):
    """What a release on offer is decided against: the installed version, its recorded
    signed time, and the versions kept on disk (where a withdrawn one moves back to)."""

    version: str | None
    signed_at: int | None = None
    kept: Sequence[str] = ()


@contextmanager
def resolve_offer(
    request: ReleaseRequest,
    settings: Settings,
    build: BuildInfo,
    installed: Installed,
    log: VerificationLog,
    *,
    known: ReleaseOffer | None = None,
    on_index: Callable[[VerifiedIndex], None] | None = None,
    now: float | None = None,
    offer_move: bool = False,
) -> Iterator[Resolved]:
    """Open the source, resolve ``request`` and verify what it offers; the source stays open
    while the caller holds the answer.

    ``installed`` is what the release is decided against.
    ``known`` is an earlier verified answer: when the source still offers that tag from the
    same place, the release's documents are not fetched again (a release does not change
    under its tag); the index is verified all the same, since it decides which tag that is.
    ``on_index`` hears of a feed's verified index before the release is fetched (``mux
    update`` warns of an expired one at once). The signed lifecycle state
    (:func:`updater.commands.lifecycle.plan_lifecycle`) picks the tag on offer for this
    machine.
    ``offer_move`` (the check): on a withdrawn install, offer the release ``mux update``
    moves to, decided as that move is (by tag, downgrade allowed), so that the check
    describes what the update will install.
    """
    now = time.time() if now is None else now
    with open_source(settings, build_keys=build.trust.minisign_keys, build=build) as source:
        tag = source.resolve(request)
        index = source.verified_index()
        if index is not None and on_index is not None:
            on_index(index)
        planned = plan_lifecycle(
            source,
            request,
            settings,
            tag=tag,
            installed=installed.version,
            kept=installed.kept,
            now=now,
        )
        if offer_move and not request.exact and offering_move(planned) is not planned:
            planned = offering_move(planned)
            request = ReleaseRequest.tagged(planned.tag, allow_downgrade=True)
        tag = planned.tag
        policy = TrustPolicy.for_update(source, build, settings)
        if known is not None and (known.tag, known.source_location) == (tag, source.location):
            release, offered, offered_signed_at = None, known.version, known.signed_at
            released_at = known.released_at
        else:
            release = verify_release_metadata(source, tag, policy, log)
            offered, offered_signed_at = release.manifest.version, release.signed_at
            released_at = release.manifest.released_at
        planned = hold_by_manifest(
            planned, request, tag=tag, version=offered, released_at=released_at, now=now
        )
        decision = request.decide(
            installed.version,
            offered,
            current_signed_at=installed.signed_at,
            offered_signed_at=offered_signed_at,
        )
        yield Resolved(source, tag, index, policy, release, decision, planned)


def find_offer(
    request: ReleaseRequest,
    settings: Settings,
    build: BuildInfo,
    target: str,
    *,
    installed_signed_at: int | None,
    known: ReleaseOffer | None = None,
    kept: Sequence[str] = (),
) -> ReleaseOffer:
    """The check's answer from the source: the release on offer for ``target``, decided
    against this build. A feed's verified index ``seq`` is recorded once the answer stands."""
    with resolve_offer(
        request,
        settings,
        build,
        Installed(build.version, installed_signed_at, kept),
        VerificationLog(),
        known=known,
        offer_move=True,
    ) as resolved:
        if resolved.release is None:
            assert known is not None
            return known._replace(
                requested=request.exact,
                decision=resolved.decision,
                lifecycle=resolved.lifecycle.view,
                **_index_facts(resolved),
            )
        manifest = resolved.release.manifest
        asset = manifest.asset_for(target)
        return ReleaseOffer(
            source_kind=resolved.source.kind,
            source_location=resolved.source.location,
            tag=resolved.tag,
            version=manifest.version,
            protocol_version=manifest.protocol_version,
            released_at=manifest.released_at,
            release_url=resolved.source.release_page(resolved.tag),
            asset=OfferedAsset(asset.name, asset.size, asset.sha256) if asset else None,
            requested=request.exact,
            decision=resolved.decision,
            signed_at=resolved.release.signed_at,
            lifecycle=resolved.lifecycle.view,
            release_notes=manifest.release_notes,
            **_index_facts(resolved),
        )


def _index_facts(resolved: Resolved) -> dict[str, Any]:
    """What a feed's verified index adds to an answer that stands: until when it may be
    reused, and what to say with it; its seq is recorded now (a refused check records
    nothing)."""
    index = resolved.feed_index
    if index is None:
        until = resolved.source.signed_until()  # a TUF repository's timestamp expiry
        return {} if until is None else {"fresh_until": until}
    warnings = [w for w in (index.expiry_warning(), remember(index)) if w]
    fresh_until = None if index.expired else index.comment.expires
    return {"fresh_until": fresh_until, "warnings": tuple(warnings)}
