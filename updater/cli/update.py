"""``mux update``'s router: the flags as one request, refused or sent to one small function.

``mux update`` does one thing per call (:mod:`updater.core.update_flags` says which flags go
with which): change the user's state (``--skip``, ``--unskip``, ``--hold``, ``--unhold``),
check, prune, roll back, or update (``--dry-run``: plan one). Each action reads its settings
once, calls one library function and renders its result; the typer command in
:mod:`updater.cli.app` only declares the flags and calls :func:`route`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from updater.cli import render
from updater.cli.check import CheckFlags, answer_check
from updater.cli.render import to_json_line
from updater.commands import userstate
from updater.config import buildinfo
from updater.config.buildinfo import BuildInfo
from updater.config.settings import Settings, load_for
from updater.core.request import ReleaseRequest
from updater.core.update_flags import given_flags, refusal

if TYPE_CHECKING:
    from types import ModuleType

    from updater.commands.update import UpdateResult


class UpdateFlags(NamedTuple):
    """What ``mux update`` was asked, as typer read it (None or False: not given)."""

    check: bool = False
    as_json: bool = False
    source: str | None = None
    pre: bool = False
    version: str | None = None
    max_age: str | None = None
    dry_run: bool = False
    rollback: bool = False
    prune: bool = False
    home: Path | None = None
    trust_key: tuple[str, ...] = ()
    allow_expired_feed: bool = False
    allow_downgrade: bool = False
    allow_withdrawn: bool = False
    insecure_skip_attestation: bool = False
    skip: str | None = None
    unskip: str | None = None
    hold: str | None = None
    unhold: bool = False
    no_delta: bool = False
    exit_code: bool = False
    quiet: bool = False  # -q: nothing but errors and warnings (wins over -v)
    verbose: bool = False  # -v: every layer, the download, the link
    stage: bool = False
    unstage: bool = False

    @property
    def verbosity(self) -> int:
        return render.QUIET if self.quiet else render.VERBOSE if self.verbose else render.DEFAULT

    def given(self) -> list[str]:
        """The flags given, by their long names (``--json`` included)."""
        values = {
            _FLAG_NAMES.get(field, "--" + field.replace("_", "-")): None if value == () else value
            for field, value in self._asdict().items()
        }
        return given_flags(values)


_FLAG_NAMES = {"as_json": "--json"}


def route(flags: UpdateFlags) -> int:
    """Refuse what will not be honoured, then run the one action asked for; its exit code."""
    refused = refusal(flags.given())
    if refused is not None:
        raise refused
    if flags.skip is not None or flags.unskip is not None or flags.hold is not None or flags.unhold:
        return _change_state(flags)
    if flags.check:
        return answer_check(_check_flags(flags))
    build = buildinfo.current()
    settings = _settings(flags, build)
    if flags.unstage:
        return _print_result(flags, settings, _update_commands().run_unstage(settings, build=build))
    if flags.prune:
        return _print_result(flags, settings, _update_commands().run_prune(settings, build=build))
    if flags.rollback:
        result = _update_commands().run_rollback(settings, build=build)
    else:
        result = _update(flags, settings, build)
    # deferred (+10 ms on every command of the CLI): only an update's result is replaced, and
    # the update imported dataclasses already
    from dataclasses import replace

    return _print_result(flags, settings, replace(result, restart_exit_code=flags.exit_code))


def _change_state(flags: UpdateFlags) -> int:
    """``--skip X``, ``--unskip X``, ``--hold D`` or ``--unhold``: the user's state changed."""
    settings = load_for(buildinfo.current())
    if flags.skip is not None:
        done = userstate.skip(settings, flags.skip)
    elif flags.unskip is not None:
        done = userstate.unskip(settings, flags.unskip)
    elif flags.hold is not None:
        done = userstate.hold(settings, flags.hold)
    else:
        done = userstate.unhold(settings)
    if flags.as_json:
        print(to_json_line(render.state_change_document(done)))
    elif not flags.quiet:
        print(render.safe_text(done.message))
    return 0


def _check_flags(flags: UpdateFlags) -> CheckFlags:
    """The check's own request (the one its fast path in :mod:`updater.__main__` parses)."""
    return CheckFlags(
        as_json=flags.as_json,
        pre=flags.pre,
        allow_expired_feed=flags.allow_expired_feed,
        allow_downgrade=flags.allow_downgrade,
        allow_withdrawn=flags.allow_withdrawn,
        skip_attestation=flags.insecure_skip_attestation,
        max_age=flags.max_age,
        source=flags.source,
        version=flags.version,
        home=None if flags.home is None else str(flags.home),
        trust_keys=flags.trust_key,
        quiet=flags.quiet,
        verbose=flags.verbose,
    )


def _settings(flags: UpdateFlags, build: BuildInfo) -> Settings:
    return load_for(
        build,
        source=flags.source,
        home=flags.home,
        trust_keys=flags.trust_key,
        skip_attestation=flags.insecure_skip_attestation,
        allow_expired_feed=flags.allow_expired_feed,
        no_delta=flags.no_delta,
    )


def _update(flags: UpdateFlags, settings: Settings, build: BuildInfo) -> UpdateResult:
    """``mux update [--version X] [--dry-run]``: install (or plan) the release on offer."""
    request = ReleaseRequest.from_flags(
        version=flags.version,
        pre=flags.pre,
        allow_downgrade=flags.allow_downgrade,
        allow_withdrawn=flags.allow_withdrawn,
    )
    return _update_commands().run_update(
        request,
        settings,
        build=build,
        dry_run=flags.dry_run,
        events=render.ConsoleEvents(progress_bar=settings.progress_bar, quiet=flags.quiet),
        stage=flags.stage,
    )


def _print_result(flags: UpdateFlags, settings: Settings, result: UpdateResult) -> int:
    if flags.as_json:
        print(to_json_line(render.update_document(result)))
    elif not flags.quiet:
        print(render.update_text(result, settings.carried, verbosity=flags.verbosity))
    return result.exit_code


def _update_commands() -> ModuleType:
    # deferred (+369 ms, 289 modules): the HTTP stack and the verification layers, which
    # `mux server …` and `mux version --notices` do without
    from updater.commands import update

    return update
