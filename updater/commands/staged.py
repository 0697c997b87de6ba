"""A bare ``mux update`` that applies the staged release from a recent signed answer.

When ``mux update --stage`` (or a server's background staging) has placed the release on
offer beside the active version, the update left to do is small: the signed lifecycle's
answer, the staged files re-hashed, the build run once, the link moved. The answer need not
come from the network: the check cache holds verified answers only, and one younger than the
check interval (and within what signed it allows: a feed index's expiry, the next rollout
stage) is what the background check would act on too. So this path reads that answer,
decides with the same pure plan as the executor (:func:`updater.core.update_step.plan_update`)
and, when the plan installs exactly the staged version, applies it without importing the HTTP
stack or the verification layers. In every other case it answers None and the full update
runs (which also applies a staged copy, after a fresh read of the lifecycle).
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from updater.commands import cache
from updater.commands.check import cache_key
from updater.commands.update_result import UpdateAction, UpdateResult
from updater.commands.userstate import read_state, state_path
from updater.config.targets import release_target
from updater.core.offer import LifecycleView, ReleaseOffer, cached_failure
from updater.core.request import ReleaseRequest
from updater.core.retention import StagedCopy, recorded_signed_at, staged_matches
from updater.core.update_step import StepKind, UpdateFacts, consults_user_state, plan_update
from updater.core.verdicts import server_verdicts
from updater.errors import VerificationError
from updater.install import transaction as install
from updater.install.layout import read_record, resolve_layout
from updater.servers.addresses import server_addresses
from updater.servers.status import query_reusing
from updater.trust.layers import VerificationLog
from updater.trust.smoke import run_kept_build

if TYPE_CHECKING:
    from typing import Any

    from updater.config.buildinfo import BuildInfo
    from updater.config.settings import Settings
    from updater.install.layout import Layout

_NO_LIFECYCLE = LifecycleView(available=False, origin="not cached", rollout_bucket=None, ring="")


def apply_from_recent_answer(settings: Settings, build: BuildInfo) -> UpdateResult | None:
    """Apply the staged release if a recent signed answer offers exactly it to this build;
    None when the full update must run (nothing staged, no recent answer, anything else on
    offer, a staged copy that fails its check)."""
    if build.development and settings.home is None:
        return None  # a checkout updates no install unless one is named
    layout = resolve_layout(settings.home, settings.bin_dir, development=build.development)
    record = read_record(layout)
    copy = StagedCopy.of(record)
    if copy is None or layout.active_version() != build.version:
        return None  # what the answers were decided against is this build's version
    target = release_target(settings.target, build, recorded=record.get("target"))
    offer, age = _recent_offer(settings, build, target)
    if offer is None or offer.version != copy.version or offer.asset is None:
        return None
    if copy.version not in layout.installed_versions() or not staged_matches(
        record,
        copy.version,
        archive_sha256=offer.asset.sha256,
        target=target,
        source=offer.source_location,
    ):
        return None  # the full update says what is wrong with the copy, and replaces it
    if not _plan_installs(offer, settings, build, record, target):
        return None
    return _apply(settings, layout, copy, offer, age)


def _recent_offer(
    settings: Settings, build: BuildInfo, target: str
) -> tuple[ReleaseOffer | None, float]:
    """The cached verified answer to a bare ``mux update``'s question, if it is younger than
    the check interval and still within what signed it; and its age in seconds."""
    key = cache_key(ReleaseRequest.latest(), settings, build, target)
    entry = cache.load(key, settings.update_check_interval)
    if entry is None or cached_failure(entry[0]) is not None:
        return None, 0.0
    now = time.time()
    offer = ReleaseOffer.from_cache(entry[0])
    if offer is None or not offer.is_fresh(now):
        return None, 0.0
    return offer, now - entry[1]


def _plan_installs(
    offer: ReleaseOffer,
    settings: Settings,
    build: BuildInfo,
    record: dict[str, Any],
    target: str,
) -> bool:
    """The plan for this answer installs the offered release (the same plan as the full
    update's; a withdrawn install, whose move needs the source, is left to it)."""
    lifecycle = offer.lifecycle or _NO_LIFECYCLE
    if lifecycle.withdrawn is not None:
        return False
    facts = UpdateFacts(
        request=ReleaseRequest.latest(),
        tag=offer.tag,
        version=offer.version,
        protocol_version=offer.protocol_version,
        signed_at=offer.signed_at,
        decision=offer.decision,
        lifecycle=lifecycle,
        move=None,
        installed=build.version,
        installed_signed_at=recorded_signed_at(record, build.version),
        target=target,
        targets=(target,) if offer.asset is not None else (),
        carried=settings.carried,
    )
    if consults_user_state(facts):
        facts = replace(facts, user_state=read_state(state_path(settings)), now=time.time())
    return plan_update(facts).kind is StepKind.INSTALL


def _apply(
    settings: Settings, layout: Layout, copy: StagedCopy, offer: ReleaseOffer, age: float
) -> UpdateResult | None:
    """Switch to the staged copy, checked as a kept version is; the servers judged after."""
    settings_for_install = install.InstallSettings(
        lock_timeout=settings.lock_timeout,
        smoke_test_timeout=settings.smoke_test_timeout,
        server_url=settings.server_url,
    )
    try:
        done = install.apply_staged(
            layout,
            settings_for_install,
            copy.version,
            run_build=partial(run_kept_build, timeout=settings.smoke_test_timeout),
        )
    except VerificationError:
        return None  # the full update says why, removes the copy and downloads it again
    log = VerificationLog()
    log.ok("files", f"every file of {copy.version} matches its digest recorded when staged")
    note = (
        f"applied the copy staged {copy.staged_at_text} (staging took {copy.took:.1f} s); "
        f"its files and build were checked again now; the signed answer that offers it is "
        f"{age:.0f} s old"
    )
    known = done.settled.reports if done.settled.reports is not None else ()
    reports = query_reusing(server_addresses(settings.server_url), known)
    return UpdateResult(
        action=UpdateAction.UPDATED,
        layout=layout,
        from_version=done.from_version,
        to_version=done.to_version,
        target=done.target,
        protocol_version=done.protocol_version,
        verification=tuple(log.layers),
        servers=server_verdicts(
            reports, running_protocol=done.protocol_version, current_version=done.to_version
        ),
        removed_versions=done.settled.removed,
        kept_versions=done.settled.kept,
        notes=(note,),
        staged=copy,
    )
