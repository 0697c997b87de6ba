"""``mux update --check``: resolve -> verify the small documents -> decide -> verdicts, cached.

:func:`check` is the library entry point. It reports only what verifies: a feed's signed index
(:mod:`updater.sources.feed_index`), then layers 1 and 2 on the release's small documents
(:func:`updater.trust.pipeline.verify_release_metadata`: the signed ``SHA256SUMS`` and the manifest it
vouches for), before it says "X is available"; the archive and the attestation stay for
``mux update``. With ``max_age`` it first tries the cache (:mod:`updater.commands.cache`), a cache of
verified answers only, and, on a hit, answers without importing the HTTP stack; the live
servers are always asked afresh, since a restart can change them at any moment. A failed
lookup is cached too (:func:`updater.core.offer.decide_offer` holds the caching rules), so an offline machine does not retry on every
call.
"""

from __future__ import annotations

import os
import time

from updater.commands import cache
from updater.commands.userstate import read_state, state_path
from updater.config import buildinfo
from updater.config.settings import require_updates
from updater.config.targets import release_target
from updater.core.offer import CachedAnswer, ReleaseOffer, decide_offer
from updater.core.report import CheckedInstall, CheckReport, Manager, Preferences, plan_check
from updater.core.request import ReleaseRequest
from updater.core.retention import StagedCopy, movable_versions, recorded_signed_at
from updater.errors import MuxError
from updater.install.layout import kept_versions, read_record, resolve_layout
from updater.servers.addresses import server_addresses
from updater.servers.status import query_all, retention_reports
from updater.timestamps import rfc3339

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from typing import Any

    from updater.config.buildinfo import BuildInfo
    from updater.config.settings import Settings
    from updater.core.retention import KeptVersion
    from updater.core.verdicts import ServerReport


def check(
    request: ReleaseRequest,
    settings: Settings,
    *,
    build: BuildInfo | None = None,
    max_age: float | None = None,
) -> CheckReport:
    """Run a check; raises :class:`updater.errors.MuxError` on failure (also a cached one),
    :class:`updater.errors.PolicyError` when the machine policy turned checks off."""
    require_updates(settings, action="check")
    build = build or buildinfo.current()
    target = _target(settings, build)
    offer, checked_at, cached = offer_for(request, settings, build, target, max_age=max_age)
    # --pre found the release a bare `mux update` would not: the next step says --pre too.
    carried = ("--pre",) if request.include_pre and not request.exact else ()
    return _report(build, offer, settings, target, cached, checked_at, carried)


def offer_for(
    request: ReleaseRequest,
    settings: Settings,
    build: BuildInfo,
    target: str,
    *,
    max_age: float | None,
    checker: BuildInfo | None = None,
) -> tuple[ReleaseOffer, float, bool]:
    """The release on offer, when it was found, and whether that came from the cache.

    With ``max_age``, an answer younger than that comes from the cache (no network; a cached
    failure is raised again). Otherwise the source is asked and the answer cached, so a
    check by ``mux update --check`` and one by a server's background check count for both
    when the same build made them (``checker``, default ``build``: a server's check decides
    against the installed version but is made by the server's own build). A release whose
    tag is the one the cache already knows is not fetched again (tags do not change): one
    request answers an unchanged feed.
    """
    key = cache_key(request, settings, build, target, checker=checker)
    entry = cache.load(key, float("inf"))

    def fetch(known: ReleaseOffer | None) -> ReleaseOffer:
        return _find_offer(request, settings, build, target, known)

    cached = CachedAnswer(*entry) if entry is not None else None
    answer = decide_offer(cached, time.time(), max_age, fetch)
    if answer.store is not None:
        cache.store(key, answer.store, now=answer.checked_at)
    if answer.error is not None:
        raise answer.error
    assert answer.offer is not None
    return answer.offer, answer.checked_at, answer.cached


def _find_offer(
    request: ReleaseRequest,
    settings: Settings,
    build: BuildInfo,
    target: str,
    known: ReleaseOffer | None,
) -> ReleaseOffer:
    """Ask the source (the network half of the check)."""
    # deferred (+441 ms, 379 modules): the network half (sources, the HTTP stack, the
    # verification layers), on a miss only: a cached answer is the sidebar's path and must
    # not import it (tests/test_imports.py).
    from updater.commands.resolve import find_offer

    return find_offer(
        request,
        settings,
        build,
        target,
        installed_signed_at=_installed_signed_at(settings, build),
        known=known,
        kept=_movable(settings, build),
    )


def cache_key(
    request: ReleaseRequest,
    settings: Settings,
    build: BuildInfo,
    target: str,
    *,
    checker: BuildInfo | None = None,
) -> dict[str, Any]:
    """The question a cached answer answers: same source, request, current version and
    target, asked by the same build with the same trust (:func:`checked_by`)."""
    return {
        "source": settings.source,
        "repo": settings.github.repo,
        "github": settings.github.web_url or "",
        **request.cache_key(),
        "current": build.version,
        "target": target,
        "checked_by": checked_by(checker or build, settings),
        # An expired feed index accepted on purpose answers nothing for a check that would not.
        "allow_expired_feed": settings.allow_expired_feed,
        # Where this machine stands in a rollout decides what is on offer.
        "ring": settings.ring,
        "pin": settings.pin,
        "minimum_release_age": settings.minimum_release_age,
    }


def checked_by(checker: BuildInfo, settings: Settings) -> dict[str, Any]:
    """Which build made an answer, and what it trusted: its version (its code: the checks it
    runs) and its trust settings with the keys added for this check. An answer counts only
    for the same build trusting the same keys, so a weeks-old server's background check never
    answers for the installed mux, nor the other way round."""
    return {
        "version": checker.version,
        "development": checker.development,
        "trust": checker.trust.to_json(),
        "trust_keys": sorted(settings.trust_keys),
        "skip_attestation": settings.skip_attestation,
    }


def _movable(settings: Settings, build: BuildInfo) -> list[str]:
    """The versions the install keeps that a withdrawn release could move back to."""
    if build.development and settings.home is None:
        return []
    try:
        layout = resolve_layout(settings.home, settings.bin_dir, development=build.development)
    except MuxError:
        return []
    return movable_versions(read_record(layout), layout.installed_versions())


def _installed_signed_at(settings: Settings, build: BuildInfo) -> int | None:
    """The signed time the install record keeps for this running mux, if it belongs to one."""
    if build.development and settings.home is None:
        return None  # a checkout belongs to no install unless MUX_HOME names one
    try:
        layout = resolve_layout(settings.home, settings.bin_dir, development=build.development)
    except MuxError:
        return None
    return recorded_signed_at(read_record(layout), build.version)


def _target(settings: Settings, build: BuildInfo) -> str:

    return release_target(settings.target, build)


def current_manager(settings: Settings, build: BuildInfo) -> Manager | None:
    """Who installs this mux's updates instead of ``mux update``: the machine policy when it
    says ``updates = "check-only"``, else the packager whose marker sits next to the build's
    executable (:mod:`updater.config.marker`); None when ``mux update`` does."""
    if settings.updates == "check-only":
        return Manager("policy", "the machine policy", None, settings.policy_file or "")
    if build.development:
        return None  # a checkout is nobody's package
    path = buildinfo.packager_marker_file()
    if path is None:
        return None  # (without importing the marker's reader: this is the fast path)
    # deferred (+1.4 ms, 1 module, on the cached check): a packaged build only (one lstat above)
    from updater.config.marker import find_marker

    marker = find_marker(os.path.dirname(path))
    if marker is None:
        return None
    return Manager(
        "packager", marker.manager, marker.update_command, marker.path, marker.announce_delay
    )


def _report(
    build: BuildInfo,
    offer: ReleaseOffer,
    settings: Settings,
    target: str,
    cached: bool,
    checked_at: float,
    pre: tuple[str, ...] = (),
) -> CheckReport:

    reports = query_all(server_addresses(settings.server_url))
    return plan_check(
        build,
        offer,
        reports,
        CheckedInstall(
            target=target,
            kept_versions=_kept_versions(settings, build, reports),
            manager=current_manager(settings, build),
            state=read_state(state_path(settings)),
            preferences=preferences(settings),
            notes=settings.overruled,
            source_set_by=settings.source_set_by,
            carried=(*pre, *settings.carried),
            not_installable=_not_installable(settings, build),
            staged=_staged_copy(settings, build),
        ),
        cached=cached,
        checked_at=rfc3339(checked_at),
    )


def _not_installable(settings: Settings, build: BuildInfo) -> str | None:
    """Why no `mux update` installs here: a development checkout that names no install."""
    if build.development and settings.home is None:
        return (
            "this is a development checkout: mux update installs into an install "
            "(--home DIR or MUX_HOME), not into a checkout"
        )
    return None


def _staged_copy(settings: Settings, build: BuildInfo) -> StagedCopy | None:
    """The install's staged copy, if it has one (read only; none in a checkout)."""
    if settings.home is None and build.development:
        return None
    try:
        layout = resolve_layout(settings.home, settings.bin_dir, development=build.development)
    except MuxError:
        return None
    return StagedCopy.of(read_record(layout))


def preferences(settings: Settings) -> Preferences:
    """What the settings say of automatic installs, as the check reports it."""
    return Preferences(
        auto_install=settings.auto_install,
        auto_install_set_by=settings.auto_install_set_by,
        download_on_metered=settings.download_on_metered,
        download_on_metered_set_by=settings.download_on_metered_set_by,
        config_file=settings.config_file,
        ci_set_by=settings.ci_set_by,
    )


def _kept_versions(
    settings: Settings, build: BuildInfo, reports: list[ServerReport]
) -> list[KeptVersion]:
    """What the install this mux updates keeps and why, with sizes (read only)."""
    if settings.home is None and build.development:
        return []  # a checkout updates no install unless MUX_HOME names one
    try:
        layout = resolve_layout(settings.home, settings.bin_dir, development=build.development)
    except MuxError:
        return []
    if not os.path.isdir(layout.versions):
        return []
    try:  # the servers retention asks, reusing the ones just asked for the verdicts
        asked = retention_reports(settings.server_url, known=reports)
    except MuxError:
        asked = reports
    return kept_versions(layout, asked)
