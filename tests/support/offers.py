"""A release offer as the check hands it on (``updater.core.offer.ReleaseOffer``), with the
decision a test needs."""

from __future__ import annotations

from updater.core.offer import OfferedAsset, ReleaseOffer
from updater.core.request import Decision


def release_offer(decision: Decision, asset: bool = True) -> ReleaseOffer:
    return ReleaseOffer(
        source_kind="feed",
        source_location="/feed",
        tag="v2.0.0",
        version="2.0.0",
        protocol_version=2,
        released_at="2026-01-01T00:00:00Z",
        release_url="/feed/v2.0.0/",
        asset=OfferedAsset("mux-x.tar.gz", 3, "ab" * 32) if asset else None,
        requested=False,
        decision=decision,
    )
