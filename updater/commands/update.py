"""``mux update``: resolve -> plan -> download and verify -> install -> verdicts.

:func:`run_update`, :func:`run_rollback` and :func:`run_prune` are the library entry points; they
return an :class:`UpdateResult` and print nothing (:mod:`updater.cli.render` renders it). This
module is the executor: :func:`updater.commands.resolve.resolve_offer` opens the source and
decides the release on offer, the pure :func:`updater.core.update_step.plan_update` names the
step to take, and :func:`_execute` takes it; each step's work is in its own module (the
verification layers in :mod:`updater.trust.pipeline`, every change to ``MUX_HOME`` in
:mod:`updater.install.transaction`). Nothing touches the installed mux until every layer has
passed; a failure leaves it as it was and removes what this run created. Servers are only ever
asked for their status line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

from updater.commands.release_notes import notes_since
from updater.commands.resolve import Installed, Resolved, resolve_offer
from updater.commands.update_result import (
    UpdateAction,
    UpdateEvents,
    UpdatePlan,
    UpdateResult,
)
from updater.commands.userstate import change_state, read_state, state_path
from updater.config import buildinfo
from updater.config.buildinfo import BuildInfo
from updater.config.settings import Settings, require_updates
from updater.config.targets import release_target
from updater.core.request import ReleaseRequest
from updater.core.retention import (
    StagedCopy,
    movable_versions,
    recorded_signed_at,
    staged_matches,
)
from updater.core.update_step import (
    Automatic,
    StepKind,
    UpdateFacts,
    UpdateStep,
    consults_user_state,
    plan_update,
)
from updater.core.userstate import without_failure
from updater.core.verdicts import server_verdicts
from updater.errors import MuxError, VerificationError
from updater.install import transaction as install
from updater.install.layout import Layout, kept_builds, read_record, resolve_layout
from updater.net.progress import NoProgress, Progress
from updater.servers.addresses import server_addresses
from updater.servers.status import query_reusing
from updater.sources.feed_index import remember
from updater.trust.attestation_start import has_staged_release
from updater.trust.attestation_worker import early
from updater.trust.attested import verify_release_attestation
from updater.trust.layers import VerificationLog, VerifiedFiles
from updater.trust.pipeline import FilesRequest, verify_release_files
from updater.trust.smoke import run_kept_build
from updater.trust.sums import signed_digest

if TYPE_CHECKING:
    from updater.sources.feed_index import VerifiedIndex
    from updater.trust.attestation_worker import AttestationWorker


class _Silent:
    def warning(self, message: str) -> None:
        pass

    def progress(self, label: str) -> Progress:
        return NoProgress()


def run_update(
    request: ReleaseRequest,
    settings: Settings,
    *,
    build: BuildInfo | None = None,
    dry_run: bool = False,
    events: UpdateEvents | None = None,
    automatic: Automatic | None = None,
    stage: bool = False,
) -> UpdateResult:
    """Install the release ``request`` names into the install ``settings`` point at.

    ``stage``: verify it and place it beside the active version, recorded as staged, without
    switching to it (``mux update --stage``); a later update applies the staged copy (its
    files re-hashed, its build run once) instead of downloading it again.

    A feed's verified index ``seq`` is recorded once the install stands (installed, or
    already there), never by a dry run or a failure, as install.sh does. A newer release the
    user's state withholds (skipped, held, failed to start here) is not installed unless the
    request names it (``--version``), which also forgets its failed starts; an ``automatic``
    install never passes them.
    """
    require_updates(settings, action="update")
    build = build or buildinfo.current()
    staged = not stage and has_staged_release(settings, build)
    # A staged release is applied without its archive: no child to start for it (a copy that
    # fails its check is downloaded again, and the layer starts its own child then).
    worker = None if staged else _early_attestation_worker(settings, dry_run)
    try:
        return _run_update(request, settings, build, dry_run, events, worker, automatic, stage)
    finally:
        if worker is not None:
            worker.close()


def _early_attestation_worker(settings: Settings, dry_run: bool) -> AttestationWorker | None:
    """The attestation's child process, started before this process imports its HTTP stack
    and fetches the release's metadata, so that sigstore's import (most of layer 3's time)
    is over when the bundle is in (:mod:`updater.trust.attestation_worker`). None with
    ``--insecure-skip-attestation``; a dry run checks the attestation too (for the signed
    digest: what it can check without the archive); an update that turns out not to be
    needed stops it unused.
    """
    if settings.skip_attestation:
        return None

    return early(settings.github.repo)


@dataclass(frozen=True)
class _Run:
    """One ``mux update`` run: what each step of the executor needs besides the release."""

    request: ReleaseRequest
    settings: Settings
    build: BuildInfo
    layout: Layout
    target: str
    installed: str | None
    installed_signed_at: int | None
    events: UpdateEvents
    worker: AttestationWorker | None
    automatic: Automatic | None
    dry_run: bool
    log: VerificationLog
    stage: bool = False


def _run_update(
    request: ReleaseRequest,
    settings: Settings,
    build: BuildInfo | None,
    dry_run: bool,
    events: UpdateEvents | None,
    worker: AttestationWorker | None,
    automatic: Automatic | None = None,
    stage: bool = False,
) -> UpdateResult:
    build = build or buildinfo.current()
    events = events or _Silent()
    layout = resolve_layout(settings.home, settings.bin_dir, development=build.development)
    record = read_record(layout)
    installed = layout.active_version()
    run = _Run(
        request=request,
        settings=settings,
        build=build,
        layout=layout,
        target=release_target(settings.target, build, recorded=record.get("target")),
        installed=installed,
        installed_signed_at=recorded_signed_at(record, installed),
        events=events,
        worker=worker,
        automatic=automatic,
        dry_run=dry_run,
        log=VerificationLog(),
        stage=stage,
    )
    with resolve_offer(
        request,
        settings,
        build,
        Installed(
            installed,
            run.installed_signed_at,
            movable_versions(record, layout.installed_versions()),
        ),
        run.log,
        on_index=lambda index: _warn_if_expired(index, events),
    ) as resolved:
        step = plan_update(_facts(run, resolved))
        return _execute(step, run, resolved)


def _facts(run: _Run, resolved: Resolved) -> UpdateFacts:
    """The plain values :func:`plan_update` decides on (the user's state read only when it
    decides)."""
    release = resolved.release
    assert release is not None  # no earlier answer was offered for reuse
    manifest = release.manifest
    facts = UpdateFacts(
        request=run.request,
        tag=resolved.tag,
        version=manifest.version,
        protocol_version=manifest.protocol_version,
        signed_at=release.signed_at,
        decision=resolved.decision,
        lifecycle=resolved.lifecycle.view,
        move=resolved.lifecycle.move,
        installed=run.installed,
        installed_signed_at=run.installed_signed_at,
        target=run.target,
        targets=manifest.targets,
        carried=run.settings.carried,
        automatic=run.automatic,
        dry_run=run.dry_run,
    )
    if not consults_user_state(facts):
        return facts
    return replace(facts, user_state=read_state(state_path(run.settings)), now=time.time())


def _execute(step: UpdateStep, run: _Run, resolved: Resolved) -> UpdateResult:
    """Do what ``step`` says (the only place an update acts on its plan)."""
    kind = step.kind
    if kind in _DROPS_STAGED and not run.dry_run:
        _drop_staged(run)
    if kind is StepKind.REFUSE:
        assert step.error is not None
        raise step.error
    if kind is StepKind.MOVE_BACK:
        assert step.version is not None
        moved = _move_back(run.settings, run.layout, step.version)
        _remember(resolved.feed_index, run.events)
        return replace(moved, notes=step.notes)
    if kind is StepKind.WOULD_MOVE_BACK:
        return _bare_result(run, UpdateAction.DRY_RUN, step.version, step.notes)
    if kind is StepKind.MOVE_TO:
        again = ReleaseRequest.tagged(str(step.tag), allow_downgrade=True)
        moved = _run_update(again, run.settings, run.build, run.dry_run, run.events, run.worker)
        return replace(moved, notes=(*step.notes, *moved.notes))
    if kind is StepKind.HELD:
        return _bare_result(run, UpdateAction.UP_TO_DATE, run.installed, step.notes)
    outcome = _offered(run, resolved, step.notes)
    if kind is StepKind.UP_TO_DATE:
        return _up_to_date(run, resolved, outcome)
    if kind is StepKind.WITHHELD:
        return replace(outcome, action=UpdateAction.WITHHELD, withheld=step.withheld)
    if kind is StepKind.DRY_RUN:
        return _dry_run(run, resolved, outcome)
    copy = _staged_for(run, resolved)
    if copy is not None:
        if run.stage:
            return replace(outcome, action=UpdateAction.STAGED, staged=copy)  # already there
        applied = _apply_staged(run, resolved, outcome, copy)
        if applied is not None:
            return applied
    return _install(run, resolved, outcome)


def _staged_for(run: _Run, resolved: Resolved) -> StagedCopy | None:
    """The staged copy of exactly the release on offer: its version, still on disk, and
    verified against the signed digest, for the target and from the source in hand. A copy
    staged for anything else (another source, keys no longer trusted) is removed."""
    release = resolved.release
    assert release is not None
    record = read_record(run.layout)
    copy = StagedCopy.of(record)
    if copy is None or copy.version != release.manifest.version:
        return None
    if copy.version not in run.layout.installed_versions():
        return None  # its folder went: settling forgets the entry, the release is downloaded
    asset = release.manifest.asset_for(run.target)
    if asset is not None and staged_matches(
        record,
        copy.version,
        archive_sha256=asset.sha256,
        target=run.target,
        source=resolved.source.location,
    ):
        return copy
    run.events.warning(
        f"the staged mux {copy.version} was verified for another release, source or target: "
        "downloading it again"
    )
    install.unstage(run.layout, _install_settings(run.settings))
    return None


# What makes a staged copy stale: the release on offer is not one to install (a halt or a
# withdrawal since it was staged, or the install moved on). A refusal of an automatic install
# (another protocol) says nothing of the staged copy a person may still apply.
_DROPS_STAGED = (StepKind.UP_TO_DATE, StepKind.HELD, StepKind.MOVE_BACK, StepKind.MOVE_TO)


def _drop_staged(run: _Run) -> None:
    """Remove a staged copy the signed lifecycle no longer offers (said as a warning)."""
    copy = StagedCopy.of(read_record(run.layout))
    if copy is None or copy.version == run.installed:
        return  # nothing staged, or a switch to it that a kill cut short (settling forgets it)
    dropped = install.unstage(run.layout, _install_settings(run.settings))
    if dropped is not None:
        run.events.warning(f"the staged mux {dropped} is no longer on offer here: removed")


def _apply_staged(
    run: _Run, resolved: Resolved, outcome: UpdateResult, copy: StagedCopy
) -> UpdateResult | None:
    """Switch to the staged ``copy`` of the release on offer: its files against the digests
    recorded when it was verified, its build run once. A copy that fails that is removed and
    the release downloaded again (None)."""
    try:
        done = install.apply_staged(
            run.layout,
            _install_settings(run.settings),
            copy.version,
            run_build=partial(run_kept_build, timeout=run.settings.smoke_test_timeout),
        )
    except VerificationError as exc:
        run.events.warning(
            f"the staged mux {copy.version} failed its check ({exc.message}): downloading it again"
        )
        install.unstage(run.layout, _install_settings(run.settings))
        return None
    run.log.ok("files", f"every file of {copy.version} matches its digest recorded when staged")
    _remember(resolved.feed_index, run.events)
    release = resolved.release
    assert release is not None
    automatic = run.automatic is not None
    notes = (
        () if automatic else notes_since(resolved.source, resolved.policy, release, run.installed)
    )
    if run.request.exact and not automatic:
        _forget_failures(run.settings, copy.version, run.events)
    applied = replace(
        outcome,
        action=UpdateAction.UPDATED,
        notes=(
            *outcome.notes,
            f"applied the copy staged {copy.staged_at_text} (staging took {copy.took:.1f} s); "
            "its files and build were checked again now",
        ),
        verification=tuple(run.log.layers),
        staged=copy,
        release_notes=notes,
        protocol_version=done.protocol_version,
    )
    return _with_verdicts(_with_settled(applied, done.settled), run.settings, done.settled)


def _bare_result(
    run: _Run, action: UpdateAction, to_version: str | None, notes: tuple[str, ...]
) -> UpdateResult:
    """A result about the install alone (no release to describe, no servers to judge)."""
    return UpdateResult(
        action=action,
        layout=run.layout,
        from_version=run.installed,
        to_version=to_version,
        target=run.target,
        protocol_version=None,
        notes=notes,
    )


def _offered(run: _Run, resolved: Resolved, notes: tuple[str, ...]) -> UpdateResult:
    """The result about the release on offer, before anything is done with it."""
    assert resolved.release is not None
    manifest = resolved.release.manifest
    return UpdateResult(
        action=UpdateAction.UP_TO_DATE,
        layout=run.layout,
        from_version=run.installed,
        to_version=manifest.version,
        target=run.target,
        protocol_version=manifest.protocol_version,
        verification=tuple(run.log.layers),
        notes=notes,
    )


def _up_to_date(run: _Run, resolved: Resolved, outcome: UpdateResult) -> UpdateResult:
    """Nothing to install: tidy the kept versions and record the index (not in a dry run)."""
    if run.dry_run:
        return _with_verdicts(outcome, run.settings)
    settled = install.tidy(run.layout, _install_settings(run.settings))
    _remember(resolved.feed_index, run.events)
    return _with_verdicts(_with_settled(outcome, settled), run.settings, settled)


def _dry_run(run: _Run, resolved: Resolved, outcome: UpdateResult) -> UpdateResult:
    """The plan is what the run would do: the checks it can make without the archive
    (layer 3 for the signed digest) refuse here what the run would refuse."""
    release, source = resolved.release, resolved.source
    assert release is not None
    manifest = release.manifest
    asset = manifest.asset_for(run.target)
    assert asset is not None  # plan_update refuses a release with no build for the target
    signed = signed_digest(asset.name, sums=release.sums, manifest=manifest)
    verify_release_attestation(
        source,
        release,
        signed,
        resolved.policy,
        run.log,
        worker=run.worker,
        warn=run.events.warning,
    )
    plan = UpdatePlan(
        tag=resolved.tag,
        release_url=source.release_page(resolved.tag),
        asset=asset.name,
        asset_url=source.file_url(resolved.tag, asset.name),
        size=asset.size,
        sha256=asset.sha256,
        checks=resolved.policy.checks(),
        version_dir=str(run.layout.version_dir(manifest.version)),
        link=str(run.layout.link),
    )
    planned = replace(
        outcome, action=UpdateAction.DRY_RUN, plan=plan, verification=tuple(run.log.layers)
    )
    return _with_verdicts(planned, run.settings)  # the servers it would leave behind


def _install(run: _Run, resolved: Resolved, outcome: UpdateResult) -> UpdateResult:
    """Download, verify and switch to the release on offer, then judge the live servers."""
    release, source, settings = resolved.release, resolved.source, run.settings
    assert release is not None
    manifest = release.manifest
    asset = manifest.asset_for(run.target)
    assert asset is not None  # plan_update refuses a release with no build for the target
    if settings.skip_attestation:
        run.events.warning("--insecure-skip-attestation: not checking who built this release")
    started = time.time()
    with install.Transaction(run.layout, _install_settings(settings)) as transaction:
        if transaction.active == manifest.version:
            _remember(resolved.feed_index, run.events)
            return _with_verdicts(outcome, settings)  # a concurrent update got here first
        verified = verify_release_files(
            source,
            release,
            asset,
            resolved.policy,
            run.log,
            FilesRequest(
                download_dir=transaction.download_dir,
                unpack_dir=transaction.staging(manifest.version),
                smoke_target=run.target,
                smoke_timeout=settings.smoke_test_timeout,
                kept=()
                if settings.no_delta
                else kept_builds(run.layout, read_record(run.layout), run.target),
                worker=run.worker,
                disk=transaction,
                events=run.events,
            ),
        )
        placed = install.Placed(
            archive_sha256=verified.archive_sha256,
            target=run.target,
            source=source.location,
            signed_at=release.signed_at,
            unpacked=verified.unpacked,
        )
        if run.stage:
            return _staged(run, transaction, verified, placed, outcome, started)
        settled = transaction.switch_to(verified.folder, manifest.version, placed)
    _remember(resolved.feed_index, run.events)
    automatic = run.automatic is not None
    read_notes = () if automatic else notes_since(source, resolved.policy, release, run.installed)
    if run.request.exact and not automatic:
        _forget_failures(settings, manifest.version, run.events)
    updated = replace(
        outcome,
        action=UpdateAction.UPDATED,
        verification=tuple(run.log.layers),
        transfer=verified.transfer,
        release_notes=read_notes,
    )
    return _with_verdicts(_with_settled(updated, settled), settings, settled)


def _staged(
    run: _Run,
    transaction: install.Transaction,
    verified: VerifiedFiles,
    placed: install.Placed,
    outcome: UpdateResult,
    started: float,
) -> UpdateResult:
    """Keep the verified folder as the staged version (``--stage``): nothing switches."""
    version = str(outcome.to_version)
    now = time.time()
    settled = transaction.keep_staged(
        verified.folder, version, placed, staged_at=now, took=now - started
    )
    copy = StagedCopy.of(read_record(run.layout))
    staged = replace(
        outcome,
        action=UpdateAction.STAGED,
        verification=tuple(run.log.layers),
        transfer=verified.transfer,
        staged=copy,
        protocol_version=None,  # nothing switched: no server is judged against it yet
    )
    return _with_settled(staged, settled)


def _forget_failures(settings: Settings, version: str, events: UpdateEvents) -> None:
    """``mux update --version X`` asked for X by name: its failed starts here are forgotten,
    so that the next restart into it gets two tries again."""
    path = state_path(settings)
    try:
        if read_state(path).failure(version) is not None:
            change_state(path, lambda state: without_failure(state, version))
    except MuxError as exc:
        events.warning(f"{exc.message} (the failed starts of {version} stay on record)")


def _move_back(settings: Settings, layout: Layout, version: str) -> UpdateResult:
    """Switch to the kept ``version`` (offline), re-verified as ``--rollback`` does: its files
    against their recorded list, then the kept build run once; nothing is removed."""
    done = install.rollback(
        layout,
        _install_settings(settings),
        run_build=partial(run_kept_build, timeout=settings.smoke_test_timeout),
        to=version,
    )
    return _rolled_back(settings, layout, done)


def _warn_if_expired(index: VerifiedIndex, events: UpdateEvents) -> None:
    if index.expired:
        events.warning(str(index.expiry_warning()))


def _remember(index: VerifiedIndex | None, events: UpdateEvents) -> None:
    """Record the verified feed index's ``seq`` (a warning when the state cannot be written)."""

    if index is not None:
        problem = remember(index)
        if problem:
            events.warning(problem)


def run_rollback(settings: Settings, *, build: BuildInfo | None = None) -> UpdateResult:
    """Switch the install back to its previous version (``mux update --rollback``)."""
    require_updates(settings, action="update")
    build = build or buildinfo.current()
    layout = resolve_layout(settings.home, settings.bin_dir, development=build.development)
    done = install.rollback(
        layout,
        _install_settings(settings),
        run_build=partial(run_kept_build, timeout=settings.smoke_test_timeout),
    )
    return _rolled_back(settings, layout, done)


def _rolled_back(settings: Settings, layout: Layout, done: install.RolledBack) -> UpdateResult:
    log = VerificationLog()
    log.ok("files", f"every file of {done.to_version} matches its recorded sha256")
    result = UpdateResult(
        action=UpdateAction.ROLLED_BACK,
        layout=layout,
        from_version=done.from_version,
        to_version=done.to_version,
        target=done.target,
        protocol_version=done.protocol_version,
        verification=tuple(log.layers),
    )
    return _with_verdicts(_with_settled(result, done.settled), settings)


def run_prune(settings: Settings, *, build: BuildInfo | None = None) -> UpdateResult:
    """Remove every installed version nothing needs any more (``mux update --prune``).

    Kept: the active and previous versions, the running mux's, and every version a live
    (or hung) server runs from; the result says which and why.
    """
    require_updates(settings, action="update")
    build = build or buildinfo.current()
    layout = resolve_layout(settings.home, settings.bin_dir, development=build.development)
    settled = install.prune(layout, _install_settings(settings))
    active = layout.active_version()
    result = UpdateResult(
        action=UpdateAction.PRUNED,
        layout=layout,
        from_version=active,
        to_version=active,
        target=release_target(settings.target, build, recorded=read_record(layout).get("target")),
        protocol_version=None,
    )
    return _with_settled(result, settled)


def run_unstage(settings: Settings, *, build: BuildInfo | None = None) -> UpdateResult:
    """Remove the staged version (``mux update --unstage``)."""
    require_updates(settings, action="update")
    build = build or buildinfo.current()
    layout = resolve_layout(settings.home, settings.bin_dir, development=build.development)
    copy = StagedCopy.of(read_record(layout))
    dropped = install.unstage(layout, _install_settings(settings))
    active = layout.active_version()
    return UpdateResult(
        action=UpdateAction.UNSTAGED,
        layout=layout,
        from_version=active,
        to_version=active,
        target=release_target(settings.target, build, recorded=read_record(layout).get("target")),
        protocol_version=None,
        staged=copy if dropped is not None else None,
        notes=() if dropped is not None else ("nothing was staged",),
    )


def _install_settings(settings: Settings) -> install.InstallSettings:
    return install.InstallSettings(
        lock_timeout=settings.lock_timeout,
        smoke_test_timeout=settings.smoke_test_timeout,
        server_url=settings.server_url,
    )


def _with_settled(result: UpdateResult, settled: install.Settled | None) -> UpdateResult:
    if settled is None:
        return result
    return replace(result, removed_versions=settled.removed, kept_versions=settled.kept)


def _with_verdicts(
    result: UpdateResult, settings: Settings, settled: install.Settled | None = None
) -> UpdateResult:
    """The live servers, judged against the protocol and version the install now has.

    Reuses the status lines settling just read, when it read any (one round, not two).
    """

    if result.protocol_version is None:
        return result
    known = settled.reports if settled is not None and settled.reports is not None else ()
    reports = query_reusing(server_addresses(settings.server_url), known)
    verdicts = server_verdicts(
        reports, running_protocol=result.protocol_version, current_version=result.to_version
    )
    return replace(result, servers=verdicts)
