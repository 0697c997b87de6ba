"""``mux update``: resolve -> fetch metadata -> decide -> download and verify -> install -> verdicts.

:func:`run_update`, :func:`run_rollback` and :func:`run_prune` are the library entry points; they orchestrate
and return an :class:`UpdateResult`, and print nothing (:mod:`updater.cli.render` renders it). The
work is elsewhere, each step in its module: the source (:mod:`updater.sources.base`), the
verification layers (:mod:`updater.trust.pipeline`), the decision (:mod:`updater.core.plan`) and every
change to ``MUX_HOME`` (:mod:`updater.install.transaction`). Nothing touches the installed mux until
every layer has passed; a failure leaves it as it was and removes what this run created.
Servers are only ever asked for their status line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import partial
from typing import TYPE_CHECKING, NamedTuple, Protocol

from updater.commands.release_notes import notes_since
from updater.commands.resolve import resolve_offer
from updater.commands.userstate import change_state, read_state, state_path
from updater.config import buildinfo
from updater.config.buildinfo import BuildInfo
from updater.config.settings import Settings, require_updates
from updater.config.targets import release_target
from updater.core.nextstep import for_install_only, mux_update
from updater.core.release_notes import ReleaseNotes
from updater.core.request import Decision, ReleaseRequest, signed_earlier
from updater.core.retention import KeptVersion, movable_versions, recorded_signed_at
from updater.core.userstate import Withheld, withheld, without_failure
from updater.core.verdicts import ServerVerdict, server_verdicts
from updater.errors import (
    EXIT_OK,
    EXIT_RESTART_NEEDED,
    InstallError,
    MuxError,
    PolicyError,
    VerificationError,
    WithdrawnError,
)
from updater.formats.lifecycle import shown
from updater.install import transaction as install
from updater.install.layout import Layout, kept_builds, read_record, resolve_layout
from updater.net.progress import NoProgress, Progress
from updater.servers.addresses import server_addresses
from updater.servers.status import query_reusing
from updater.sources.feed_index import remember
from updater.timestamps import utc_text
from updater.trust.attestation_worker import early
from updater.trust.attested import verify_release_attestation
from updater.trust.layers import LayerResult, VerificationLog
from updater.trust.pipeline import verify_release_files
from updater.trust.smoke import run_kept_build
from updater.trust.sums import signed_digest

if TYPE_CHECKING:
    from updater.core.transfer import Transfer
    from updater.sources.feed_index import VerifiedIndex
    from updater.trust.attestation_worker import AttestationWorker


class UpdateAction(StrEnum):
    UPDATED = "updated"
    UP_TO_DATE = "up-to-date"
    ROLLED_BACK = "rolled-back"
    DRY_RUN = "dry-run"
    PRUNED = "pruned"
    WITHHELD = "withheld"  # the user skipped or held it, or it failed to start here


@dataclass(frozen=True)
class UpdatePlan:
    """What ``--dry-run`` would do."""

    tag: str
    release_url: str
    asset: str
    asset_url: str
    size: int
    sha256: str
    checks: tuple[str, ...]
    version_dir: str
    link: str


@dataclass(frozen=True)
class UpdateResult:
    action: UpdateAction
    layout: Layout
    from_version: str | None
    to_version: str | None
    target: str
    protocol_version: int | None  # of to_version
    verification: tuple[LayerResult, ...] = ()
    servers: tuple[ServerVerdict, ...] = ()
    plan: UpdatePlan | None = None
    removed_versions: tuple[str, ...] = ()
    kept_versions: tuple[KeptVersion, ...] = ()
    withheld: Withheld | None = None
    notes: tuple[str, ...] = ()  # why (a withdrawn release moved off; a release held back)
    # How the new version's files came (a delta or the full archive) and how many bytes of
    # release files were downloaded for them; None when nothing was installed.
    transfer: Transfer | None = None
    # What changed since the version it replaced, newest release first (updated only; an
    # automatic install reads none: a server shows no text).
    release_notes: tuple[ReleaseNotes, ...] = ()
    # --exit-code: a server that will need a restart makes the exit code 20; without it, an
    # update that did what was asked exits 0 (as uv, rustup and gh do), and says so.
    restart_exit_code: bool = False

    @property
    def restart_needed(self) -> bool:
        return any(v.restart_needed for v in self.servers)

    @property
    def exit_code(self) -> int:
        return EXIT_RESTART_NEEDED if self.restart_exit_code and self.restart_needed else EXIT_OK


class UpdateEvents(Protocol):
    """What the caller shows while an update runs (the CLI: lines and a bar on stderr)."""

    def warning(self, message: str) -> None: ...

    def progress(self, label: str) -> Progress: ...


class _Silent:
    def warning(self, message: str) -> None:
        pass

    def progress(self, label: str) -> Progress:
        return NoProgress()


class Automatic(NamedTuple):
    """An install a server's background check makes on its own (auto_install): it obeys the
    user's skips, holds and failed starts even for the exact release it names, and, with
    ``protocol_version``, installs only a release that speaks that protocol (the one every
    live server speaks, for ``auto_install = "compatible"``)."""

    protocol_version: int | None = None


def run_update(
    request: ReleaseRequest,
    settings: Settings,
    *,
    build: BuildInfo | None = None,
    dry_run: bool = False,
    events: UpdateEvents | None = None,
    automatic: Automatic | None = None,
) -> UpdateResult:
    """Install the release ``request`` names into the install ``settings`` point at.

    A feed's verified index ``seq`` is recorded once the install stands (installed, or
    already there), never by a dry run or a failure, as install.sh does. A newer release the
    user's state withholds (skipped, held, failed to start here) is not installed unless the
    request names it (``--version``), which also forgets its failed starts; an ``automatic``
    install never passes them.
    """
    require_updates(settings, action="update")
    worker = _early_attestation_worker(settings, dry_run)
    try:
        return _run_update(request, settings, build, dry_run, events, worker, automatic)
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


def _run_update(
    request: ReleaseRequest,
    settings: Settings,
    build: BuildInfo | None,
    dry_run: bool,
    events: UpdateEvents | None,
    worker: AttestationWorker | None,
    automatic: Automatic | None = None,
) -> UpdateResult:
    build = build or buildinfo.current()
    events = events or _Silent()
    layout = resolve_layout(settings.home, settings.bin_dir, development=build.development)
    record = read_record(layout)
    target = release_target(settings.target, build, recorded=record.get("target"))
    installed = layout.active_version()
    installed_signed_at = recorded_signed_at(record, installed)
    log = VerificationLog()
    with resolve_offer(
        request,
        settings,
        build,
        installed=installed,
        installed_signed_at=installed_signed_at,
        log=log,
        on_index=lambda index: _warn_if_expired(index, events),
        kept=movable_versions(record, layout.installed_versions()),
    ) as resolved:
        source, tag, index, policy, release, decision, planned = resolved
        assert release is not None  # no earlier answer was offered for reuse
        manifest = release.manifest
        withdrawn = planned.view.withdrawn if not request.exact else None
        if withdrawn is not None:
            why = (
                f"mux {withdrawn.version} was withdrawn by its publisher: "
                f"{shown(withdrawn.reason, 300)}"
            )
            move = planned.move
            if move is None:
                raise WithdrawnError(
                    f"{why}; no release this machine may install replaces it",
                    hint="to keep it on purpose: mux update --version "
                    f"{withdrawn.version} --allow-withdrawn (or wait for a fixed release)",
                )
            if move.kind == "kept":
                if dry_run:
                    return UpdateResult(
                        action=UpdateAction.DRY_RUN,
                        layout=layout,
                        from_version=installed,
                        to_version=move.version,
                        target=target,
                        protocol_version=None,
                        notes=(f"{why}; would move back to the kept mux {move.version}",),
                    )
                moved = _move_back(settings, layout, move.version)
                _remember(index, events)
                return replace(moved, notes=(f"{why}; moved back to the kept mux {move.version}",))
            note = f"{why}; moving to mux {move.version} ({move.kind})"
            if move.kind in ("replacement", "older") and not (
                tag == move.tag and decision.installs
            ):
                # Asked for by tag: the stages do not hold a move off a withdrawn release.
                again = ReleaseRequest.tagged(str(move.tag), allow_downgrade=True)
                moved = _run_update(again, settings, build, dry_run, events, worker)
                return replace(moved, notes=(note, *moved.notes))
            notes: tuple[str, ...] = (note,)
        else:
            notes = ()
        if planned.view.holds(tag) and not request.exact:
            held = next(h for h in planned.view.held if h.tag == tag)
            if installed is None:
                raise PolicyError(
                    f"the machine policy holds mux {manifest.version} back ({held.why}"
                    + (f", until {held.offered_at})" if held.offered_at else ")"),
                    hint="its administrator decides this for every mux on this machine",
                )
            return UpdateResult(
                action=UpdateAction.UP_TO_DATE,
                layout=layout,
                from_version=installed,
                to_version=installed,
                target=target,
                protocol_version=None,
                notes=(
                    f"mux {manifest.version} is held back by the machine policy ({held.why}"
                    + (f", until {held.offered_at})" if held.offered_at else ")"),
                ),
            )
        outcome = UpdateResult(
            action=UpdateAction.UP_TO_DATE,
            layout=layout,
            from_version=installed,
            to_version=manifest.version,
            target=target,
            protocol_version=manifest.protocol_version,
            verification=tuple(log.layers),
            notes=notes,
        )
        if decision is Decision.UP_TO_DATE:
            settled = None if dry_run else install.tidy(layout, _install_settings(settings))
            if not dry_run:
                _remember(index, events)
            return _with_verdicts(_with_settled(outcome, settled), settings, settled)
        if not decision.installs:
            raise _refused_downgrade(
                manifest.version, release.signed_at, installed, installed_signed_at, settings
            )
        if decision is Decision.UPDATE and (automatic is not None or not request.exact):
            kept_back = withheld(read_state(state_path(settings)), manifest.version, time.time())
            if kept_back is not None:
                return replace(outcome, action=UpdateAction.WITHHELD, withheld=kept_back)
        wanted = automatic.protocol_version if automatic is not None else None
        if wanted is not None and manifest.protocol_version != wanted:
            raise InstallError(
                f"mux {manifest.version} speaks protocol {manifest.protocol_version}, not "
                f"{wanted} like every live server: not installed automatically"
            )
        asset = manifest.asset_for(target)
        if asset is None:
            raise InstallError(
                f"release {tag} has no build for {target}",
                hint="it has: " + (", ".join(manifest.targets) or "no builds"),
            )
        if dry_run:
            # The plan is what the run would do: the checks it can make without the archive
            # (layer 3 for the signed digest) refuse here what the run would refuse.
            signed = signed_digest(asset.name, sums=release.sums, manifest=manifest)
            verify_release_attestation(
                source, release, signed, policy, log, worker=worker, warn=events.warning
            )
            dry = UpdatePlan(
                tag=tag,
                release_url=source.release_page(tag),
                asset=asset.name,
                asset_url=source.file_url(tag, asset.name),
                size=asset.size,
                sha256=asset.sha256,
                checks=policy.checks(),
                version_dir=str(layout.version_dir(manifest.version)),
                link=str(layout.link),
            )
            planned_result = replace(
                outcome, action=UpdateAction.DRY_RUN, plan=dry, verification=tuple(log.layers)
            )
            return _with_verdicts(planned_result, settings)  # the servers it would leave behind
        if settings.skip_attestation:
            events.warning("--insecure-skip-attestation: not checking who built this release")
        with install.Transaction(layout, _install_settings(settings)) as transaction:
            if transaction.active == manifest.version:
                _remember(index, events)
                return _with_verdicts(outcome, settings)  # a concurrent update got here first
            verified = verify_release_files(
                source,
                release,
                asset,
                policy,
                log,
                download_dir=transaction.download_dir,
                unpack_dir=transaction.staging(manifest.version),
                smoke_target=target,
                smoke_timeout=settings.smoke_test_timeout,
                progress=events.progress(asset.name),
                attestation_worker=worker,
                on_unpacked_file=transaction.flush_file,
                on_unpacked=transaction.flush_unpacked,
                kept=() if settings.no_delta else kept_builds(layout, read_record(layout), target),
                warn=events.warning,
            )
            settled = transaction.switch_to(
                verified.folder,
                manifest.version,
                archive_sha256=verified.archive_sha256,
                target=target,
                source=source.location,
                signed_at=release.signed_at,
                unpacked=verified.unpacked,
            )
        _remember(index, events)
        read_notes = (
            () if automatic is not None else notes_since(source, policy, release, installed)
        )
    if request.exact and automatic is None:
        _forget_failures(settings, manifest.version, events)
    updated = replace(
        outcome,
        action=UpdateAction.UPDATED,
        verification=tuple(log.layers),
        transfer=verified.transfer,
        release_notes=read_notes,
    )
    return _with_verdicts(_with_settled(updated, settled), settings, settled)


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


def _refused_downgrade(
    version: str,
    signed_at: int | None,
    installed: str | None,
    installed_signed_at: int | None,
    settings: Settings,
) -> Exception:
    """Why ``version`` is not installed over ``installed`` without ``--allow-downgrade``."""

    again = mux_update("--version", version, "--allow-downgrade", carried=settings.carried)
    how = f"to go back on purpose: {again}"
    back = mux_update("--rollback", carried=for_install_only(settings.carried))
    if signed_earlier(installed_signed_at, signed_at):
        assert signed_at is not None and installed_signed_at is not None
        return VerificationError(
            f"mux {version} was signed {utc_text(signed_at)}, before the installed mux "
            f"{installed} ({utc_text(installed_signed_at)}): installing it would be a downgrade "
            "(or an old release replayed)",
            hint=f"{how} ({back} returns to the previous version)",
        )
    return InstallError(
        f"{version} is older than the installed {installed}; not downgrading", hint=how
    )


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
