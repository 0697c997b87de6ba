"""``mux-release`` lifecycle verbs: rollout, halt, resume, withdraw, critical. Each signs a change
to one release's record in the feed's signed index (and its TUF repository).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from release.cli.options import (
    DEFAULT_PASSWORD_ENV,
    DryRunOption,
    ExpiresOption,
    FeedDirArgument,
    KeyEnvOption,
    KeyFileOption,
    NotesOption,
    PasswordEnvOption,
    TagOption,
    TufOnlineKeyOption,
    TufReleaseKeyOption,
    command_help,
    read_secret_key,
    release_tag,
    say,
    signers,
)
from release.publish.feed import parse_duration as parse_expiry
from release.publish.lifecycle import (
    TufSigners,
    change_lifecycle,
    clock,
    critical,
    describe,
    describe_plan,
    halt,
    parse_stages,
    plan_lifecycle,
    resume,
    rollout,
    withdraw,
)
from updater.errors import UsageError
from updater.formats.lifecycle import Interval, Lifecycle
from updater.timestamps import parse_duration

app = typer.Typer()


# What a lifecycle verb signs: the record of a release, changed.
Change = Callable[[Lifecycle], Lifecycle]


def _help(name: str) -> str:
    """A lifecycle verb's examples and exit codes (every verb's are the same)."""
    return command_help(
        name,
        (0, "signed (or, with --dry-run, checked and printed)"),
        (1, "error (the feed's signed index or its TUF repository cannot be read or signed)"),
        (
            2,
            "usage error (bad options, a release the feed does not list, resume on a "
            "release that is not halted), nothing signed",
        ),
    )


def _sign_change(
    change: Change,
    feed_dir: FeedDirArgument,
    tag: TagOption,
    key_file: KeyFileOption = None,
    key_env: KeyEnvOption = None,
    password_env: PasswordEnvOption = DEFAULT_PASSWORD_ENV,
    tuf_release_key: TufReleaseKeyOption = None,
    tuf_online_key: TufOnlineKeyOption = None,
    expires_in: ExpiresOption = "14d",
    dry_run: DryRunOption = False,
) -> None:
    """Sign ``change`` to the lifecycle record of ``tag`` into the feed's index (and its TUF
    repository, given its keys). Its other parameters are the options every lifecycle verb
    takes, declared here once (:func:`lifecycle_verb`)."""
    tag = release_tag(tag)
    key = read_secret_key(key_file, key_env, password_env)
    tuf = None
    if tuf_release_key or tuf_online_key:
        tuf = TufSigners(signers(feed_dir, tuf_release_key), signers(feed_dir, tuf_online_key))
    seconds = parse_expiry(expires_in)
    if dry_run:
        lines = describe_plan(plan_lifecycle(feed_dir, key, tag, change, tuf=tuf))
    else:
        lines = describe(change_lifecycle(feed_dir, key, tag, change, expires_in=seconds, tuf=tuf))
    say(lines)


def lifecycle_verb(name: str) -> Callable[[Callable[..., Change]], Callable[..., Change]]:
    """Register ``mux-release NAME``, a lifecycle verb.

    The decorated function takes the feed folder and the verb's own options and returns the
    change; the command takes :func:`_sign_change`'s options around them (the feed folder and
    ``--tag`` first, the signing options last, as ``--help`` lists them) and signs it. typer
    reads a command's parameters from its signature, so the command's is written from the two.
    """
    shared = list(inspect.signature(_sign_change, eval_str=True).parameters.values())[1:]
    first, last = shared[:2], shared[2:]

    def register(verb: Callable[..., Change]) -> Callable[..., Change]:
        own = list(inspect.signature(verb, eval_str=True).parameters.values())[1:]

        def command(**options: Any) -> None:
            signing = {param.name: options.pop(param.name) for param in shared}
            _sign_change(verb(signing["feed_dir"], **options), **signing)

        params = [
            param.replace(kind=inspect.Parameter.KEYWORD_ONLY) for param in (*first, *own, *last)
        ]
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {param.name: param.annotation for param in params}
        command.__doc__ = verb.__doc__
        app.command(name, epilog=_help(name))(command)
        return verb

    return register


@lifecycle_verb("rollout")
def rollout_command(
    feed_dir: Path,
    stages: Annotated[
        str | None,
        typer.Option(
            "--stages",
            metavar="<STAGES>",
            help="Percentages and when each starts: 5,25@1d,100@3d (offsets from now) or "
            "5@2026-12-01T12:00:00Z.",
        ),
    ] = None,
    interval: Annotated[
        str | None,
        typer.Option(
            "--interval",
            metavar="<DURATION>",
            help="Sparkle's phased rollout: one more of seven groups every DURATION (1d).",
        ),
    ] = None,
    full: Annotated[bool, typer.Option("--full", help="Offer it to everyone now.")] = False,
    notes: NotesOption = None,
) -> Change:
    """Stage a release's rollout, or finish it (--full).

    The stages are signed into the feed's index, as every lifecycle change is."""
    if sum(x is not None and x is not False for x in (stages, interval, full or None)) != 1:
        raise UsageError("give one of --stages, --interval or --full")
    now = clock()
    planned = parse_stages(stages, now=now) if stages is not None else None
    every = None
    if interval is not None:
        try:
            every = Interval(now, int(parse_duration(interval)))
        except ValueError as exc:
            raise UsageError(f"--interval: {exc}") from None
    return rollout(planned, every, notes)


@lifecycle_verb("halt")
def halt_command(feed_dir: Path) -> Change:
    """Stop a release's rollout.

    A halted release is offered to nobody who has not installed it."""
    return halt


@lifecycle_verb("resume")
def resume_command(feed_dir: Path) -> Change:
    """Resume a halted rollout where its stages stand.

    A release that is not halted is refused (exit 2): there is nothing to resume."""
    return resume


@lifecycle_verb("withdraw")
def withdraw_command(
    feed_dir: Path,
    reason: Annotated[
        str,
        typer.Option(
            "--reason",
            metavar="<TEXT>",
            help="Why (300 characters), shown to every machine on it.",
        ),
    ],
    replacement: Annotated[
        str | None,
        typer.Option(
            "--replacement",
            metavar="<X.Y.Z>",
            help="The release machines on it move to (1.2.0 or v1.2.0).",
        ),
    ] = None,
) -> Change:
    """Withdraw a release.

    It is never installed again, and machines on it move off it."""
    if replacement is not None:
        replacement = release_tag(replacement, "--replacement")
    if replacement is not None and not (feed_dir / replacement / "manifest.json").is_file():
        raise UsageError(f"--replacement {replacement}: the feed has no such release")
    return withdraw(reason, replacement)


@lifecycle_verb("critical")
def critical_command(
    feed_dir: Path,
    minimum_version: Annotated[
        str | None,
        typer.Option(
            "--minimum-version",
            metavar="<X.Y.Z>",
            help="Every older install needs this update (status, watch).",
        ),
    ] = None,
    notes: NotesOption = None,
) -> Change:
    """Mark a release critical.

    A critical release is offered at once, skipping stages and delays (it is not a pin)."""
    if minimum_version is not None:
        minimum_version = release_tag(minimum_version, "--minimum-version").removeprefix("v")
    return critical(minimum_version, notes)
