"""``mux update --check``: resolve -> verify the small documents -> decide -> verdicts, cached.

:func:`check` is the library entry point. It reports only what verifies: a feed's signed index
(:mod:`updater.feed_index`), then layers 1 and 2 on the release's small documents
(:func:`updater.verify.verify_release_metadata`: the signed ``SHA256SUMS`` and the manifest it
vouches for), before it says "X is available"; the archive and the attestation stay for
``mux update``. With ``max_age`` it first tries the cache (:mod:`updater.cache`), a cache of
verified answers only, and, on a hit, answers without importing the HTTP stack; the live
servers are always asked afresh, since a restart can change them at any moment. A failed
lookup is cached too (:func:`failure_to_cache`), so an offline machine does not retry on every
call.
"""

from __future__ import annotations

import time
from typing import Any

from . import buildinfo, cache
from .buildinfo import BuildInfo
from .errors import MuxError
from .plan import CheckReport, ReleaseOffer, ReleaseRequest, plan_check
from .settings import Settings
from .timestamps import rfc3339


def check(
    request: ReleaseRequest,
    settings: Settings,
    *,
    build: BuildInfo | None = None,
    max_age: float | None = None,
) -> CheckReport:
    """Run a check; raises :class:`updater.errors.MuxError` on failure (also a cached one)."""
    build = build or buildinfo.current()
    target = _target(settings, build)
    key = cache_key(request, settings, build, target)
    if max_age is not None:
        hit = cache.load(key, max_age)
        if hit is not None:
            answer, checked_at = hit
            failure = cached_failure(answer)
            if failure is not None:
                raise failure
            cached_offer = ReleaseOffer.from_cache(answer)
            if cached_offer is not None and cached_offer.is_fresh(time.time()):
                return _report(build, cached_offer, settings, target, True, checked_at)
    now = time.time()
    try:
        offer = find_offer(request, settings, build, target)
    except MuxError as exc:
        cache.store(key, failure_to_cache(exc), now=now)
        raise
    cache.store(key, offer.to_cache(), now=now)
    return _report(build, offer, settings, target, False, now)


def cache_key(
    request: ReleaseRequest, settings: Settings, build: BuildInfo, target: str
) -> dict[str, Any]:
    """The question a cached answer answers: same source, request, running mux and target."""
    return {
        "source": settings.source,
        "repo": settings.github.repo,
        "github": settings.github.web_url or "",
        **request.cache_key(),
        "current": build.version,
        "target": target,
        # An answer verified under other trust is no answer to this question.
        "trust": list(settings.trust_keys),
        "allow_expired_feed": settings.allow_expired_feed,
    }


def find_offer(
    request: ReleaseRequest, settings: Settings, build: BuildInfo, target: str
) -> ReleaseOffer:
    """Ask the source which release is on offer, verify its small documents, and decide it
    against this build. A feed's verified index ``seq`` is recorded once the answer stands."""
    from .plan import OfferedAsset
    from .sources import open_source
    from .verify import TrustPolicy, VerificationLog, verify_release_metadata

    with open_source(settings, build_keys=build.trust.minisign_keys) as source:
        tag = source.resolve(request)
        policy = TrustPolicy.for_update(source, build, settings)
        release = verify_release_metadata(source, tag, policy, VerificationLog())
        manifest = release.manifest
        asset = manifest.asset_for(target)
        index = source.verified_index()
        warnings: list[str] = []
        if index is not None:
            from .feed_index import remember

            warnings += filter(None, [index.expiry_warning(), remember(index)])
        return ReleaseOffer(
            source_kind=source.kind,
            source_location=source.location,
            tag=tag,
            version=manifest.version,
            protocol_version=manifest.protocol_version,
            released_at=manifest.released_at,
            release_url=source.release_page(tag),
            asset=OfferedAsset(asset.name, asset.size, asset.sha256) if asset else None,
            requested=request.exact,
            decision=request.decide(
                build.version,
                manifest.version,
                current_signed_at=_installed_signed_at(settings, build),
                offered_signed_at=release.signed_at,
            ),
            fresh_until=index.comment.expires if index is not None and not index.expired else None,
            warnings=tuple(warnings),
        )


def _installed_signed_at(settings: Settings, build: BuildInfo) -> int | None:
    """The signed time the install record keeps for this running mux, if it belongs to one."""
    if build.development and settings.home is None:
        return None  # a checkout belongs to no install unless MUX_HOME names one
    from .errors import MuxError as _MuxError
    from .layout import read_record, resolve_layout
    from .plan import recorded_signed_at

    try:
        layout = resolve_layout(settings.home, settings.bin_dir, development=build.development)
    except _MuxError:
        return None
    return recorded_signed_at(read_record(layout), build.version)


def failure_to_cache(exc: MuxError) -> dict[str, Any]:
    return {"ok": False, "error": exc.message, "hint": exc.hint, "exit_code": exc.exit_code}


def cached_failure(doc: dict[str, Any]) -> MuxError | None:
    """The error a cached failed lookup stands for; None when ``doc`` is not one."""
    if doc.get("ok") is not False:
        return None
    hint, code = doc.get("hint"), doc.get("exit_code")
    error = MuxError(
        f"{doc.get('error')} (cached result)", hint=hint if isinstance(hint, str) else None
    )
    if isinstance(code, int):
        error.exit_code = code
    return error


def _target(settings: Settings, build: BuildInfo) -> str:
    from ._targets import release_target

    return release_target(settings.target, build)


def _report(
    build: BuildInfo,
    offer: ReleaseOffer,
    settings: Settings,
    target: str,
    cached: bool,
    checked_at: float,
) -> CheckReport:
    from .servers import query_all, server_addresses

    return plan_check(
        build,
        offer,
        query_all(server_addresses(settings.server_url)),
        target=target,
        cached=cached,
        checked_at=rfc3339(checked_at),
    )
