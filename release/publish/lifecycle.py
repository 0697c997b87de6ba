"""Changing a published release's lifecycle: ``mux-release rollout``, ``halt``, ``resume``,
``withdraw``, ``critical``.

Each verb reads the feed's signed index (its records are carried only once the signature
verified with the signing key; a feed that lost its index continues from its TUF repository
or is refused: :func:`release.publish.feed.continued_state`), changes the
record of one listed release, checks it with the client's own strict parser
(:func:`updater.formats.lifecycle.parse_record`), and writes and signs the index with the
next ``seq`` (:func:`release.publish.feed.sign_feed_index`). A feed with a TUF repository
(``metadata/``) gets the same record signed there first
(:func:`release.publish.tuf_repo.set_lifecycle`: the release key, then the online key for
the snapshot and timestamp): a build that trusts a TUF root reads only that, so a verb that
changed the index alone would leave every such build on a halted or withdrawn release. The
verb refuses such a feed without both keys, before it signs anything.

A dry run (:func:`plan_lifecycle`) decides and checks the same change, refusals included,
and signs and writes nothing. ``resume`` refuses a release that is not halted (a no-op that
would still have signed a new seq).

The feed workflow publishes the result like any other index; clients believe it only
through those signatures, and a mirror that hides the change is refused once what it serves
expires (the index's ``expires``, TUF's timestamp within a day).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from release.publish.feed import (
    DEFAULT_EXPIRES_IN,
    FeedError,
    SignedIndex,
    continued_state,
    sign_feed_index,
)
from release.publish.feed_folder import manifest_released_at
from release.publish.signing import SecretKey
from updater.errors import MuxError, ParseError, UsageError
from updater.formats.lifecycle import (
    Interval,
    Lifecycle,
    Stage,
    Withdrawal,
    format_time,
    parse_record,
    parse_time,
)
from updater.formats.models import FEED_INDEX_NAME, MANIFEST_NAME, TUF_METADATA_DIR, parse_tag
from updater.timestamps import parse_duration

if TYPE_CHECKING:
    from securesystemslib.signer import Signer

_STAGE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)%?\s*(?:@\s*(\S+))?\s*")


class TufSigners(NamedTuple):
    """The keys a lifecycle change needs in a feed's TUF repository."""

    release: Sequence[Signer]  # the release workflow's (release-workflow)
    online: Sequence[Signer]  # snapshot and timestamp


class Planned(NamedTuple):
    """A lifecycle change decided and checked, nothing signed yet (what a dry run prints)."""

    feed_dir: Path
    tag: str
    before: Lifecycle
    after: Lifecycle
    seq: int  # the seq the index is signed with
    key_id: str  # the minisign key that signs it
    tuf: bool  # the feed has a TUF repository: the record is signed there first


class Changed(NamedTuple):
    signed: SignedIndex
    tag: str
    before: Lifecycle
    after: Lifecycle
    tuf: tuple[str, ...] = ()  # what the TUF repository published (a feed without one: none)


def plan_lifecycle(
    feed_dir: Path,
    key: SecretKey,
    tag: str,
    change: Callable[[Lifecycle], Lifecycle],
    *,
    tuf: TufSigners | None = None,
) -> Planned:
    """``change`` applied to the record of ``tag`` and checked as :func:`change_lifecycle`
    would sign it (every refusal included), reading the feed and writing nothing."""
    feed_dir = Path(feed_dir)
    try:
        parse_tag(tag)
    except ParseError as exc:
        raise UsageError(f"--tag: {exc.message}") from None
    if not (feed_dir / tag / MANIFEST_NAME).is_file():
        raise UsageError(f"{feed_dir} has no release {tag} (no {tag}/{MANIFEST_NAME})")
    # What the new index continues (its seq, every record), decided before anything is
    # signed: a feed that lost its signed index is refused here unless its TUF repository
    # says where it stood (release.publish.feed.continued_state).
    state = continued_state(feed_dir, key)
    before = state.records.get(tag, Lifecycle())
    if before.released_at is None:  # as every index writes it (and TUF's record starts)
        before = before._replace(released_at=manifest_released_at(feed_dir / tag))
    try:
        after = change(before)
    except Refused as exc:
        raise UsageError(f"{tag}: {exc.message}", hint=exc.hint) from None
    try:
        parse_record(after.to_json(), f"the lifecycle of {tag}")  # the client's rules
    except ParseError as exc:
        raise FeedError(exc.message) from None
    has_tuf = (feed_dir / TUF_METADATA_DIR).is_dir()
    if has_tuf:
        _check_tuf(feed_dir, tag, before, tuf)
    return Planned(feed_dir, tag, before, after, state.seq, key.key_id, has_tuf)


def _check_tuf(feed_dir: Path, tag: str, before: Lifecycle, tuf: TufSigners | None) -> None:
    """Refuse a change the feed's TUF repository would not carry: without both its keys, or
    when it disagrees with the index on where the release stands."""
    if tuf is None or not tuf.release or not tuf.online:
        raise UsageError(
            f"{feed_dir} has a TUF repository ({TUF_METADATA_DIR}/): a build that trusts it "
            "reads the lifecycle only there",
            hint="give --tuf-release-private-key and --tuf-online-private-key too",
        )
    # deferred (+120 ms, python-tuf): only a feed with a TUF repository needs it
    from release.publish import tuf_repo

    signed_there = tuf_repo.lifecycle_of(feed_dir, tag)
    if signed_there is not None and _state(signed_there) != _state(before.to_json()):
        # Changing one from the other's state would undo what the other says (a verb on
        # an index that lost its records would lift a withdrawal TUF builds obey).
        raise FeedError(
            f"the signed index and the TUF repository of {feed_dir} disagree on the "
            f"lifecycle of {tag} (index: {_state(before.to_json()) or 'none'}; TUF: "
            f"{_state(signed_there) or 'none'})",
            hint="publish the feed as it was (both from the last feed run), then run the verb",
        )


def change_lifecycle(
    feed_dir: Path,
    key: SecretKey,
    tag: str,
    change: Callable[[Lifecycle], Lifecycle],
    *,
    expires_in: int = DEFAULT_EXPIRES_IN,
    now: int | None = None,
    tuf: TufSigners | None = None,
) -> Changed:
    """Apply ``change`` to the record of ``tag``: in the TUF repository when the feed has
    one (``tuf`` is then required), then in the index, signed with the next seq."""
    planned = plan_lifecycle(feed_dir, key, tag, change, tuf=tuf)
    published: list[str] = []
    if planned.tuf:
        assert tuf is not None  # plan_lifecycle refused a TUF feed without its keys
        # deferred (+120 ms, python-tuf): only a feed with a TUF repository needs it
        from release.publish import tuf_repo

        published = tuf_repo.set_lifecycle(
            planned.feed_dir,
            tag,
            planned.after.to_json(),
            tuf.release,
            tuf.online,
            now=None if now is None else datetime.fromtimestamp(now, UTC),
            index=tuf_repo.IndexSeq(key.key_id, planned.seq),  # the seq signed below
        )
    signed = sign_feed_index(
        planned.feed_dir,
        key,
        expires_in=expires_in,
        seq=planned.seq,
        now=now,
        lifecycle={tag: planned.after},
    )
    return Changed(signed, tag, planned.before, planned.after, tuple(published))


def _state(record: dict[str, object]) -> dict[str, object]:
    """A record's state: everything but ``released_at`` (which every writer takes from the
    manifest)."""
    return {k: v for k, v in record.items() if k != "released_at"}


def parse_stages(text: str, *, now: int) -> tuple[Stage, ...]:
    """``"5,25@1d,100@3d"``: percentages, each from an offset after ``now`` (``@1d``) or a
    UTC time (``@2026-12-01T12:00:00Z``); the first defaults to now."""
    stages = []
    for part in text.split(","):
        match = _STAGE.fullmatch(part)
        if match is None:
            raise UsageError(f"--stages: {part.strip()[:40]!r} is not PERCENT[@WHEN] (5@1d)")
        when = match[2]
        if when is None:
            start = now
        elif when[:1].isdigit() and "T" in when:
            try:
                start = parse_time(when, "--stages")
            except ParseError as exc:
                raise UsageError(exc.message) from None
        else:
            try:
                start = now + int(parse_duration(when))
            except ValueError as exc:
                raise UsageError(f"--stages: {exc}") from None
        stages.append(Stage(start, float(match[1])))
    return tuple(stages)


def rollout(
    stages: tuple[Stage, ...] | None, interval: Interval | None, notes: str | None = None
) -> Callable[[Lifecycle], Lifecycle]:
    def apply(record: Lifecycle) -> Lifecycle:
        changed = record._replace(stages=stages or (), interval=interval)
        return changed if notes is None else changed._replace(notes=notes)

    return apply


def halt(record: Lifecycle) -> Lifecycle:
    return record._replace(halted=True)


class Refused(MuxError):
    """A change the release's record does not allow (:func:`plan_lifecycle` names the
    release and makes it a usage error: exit 2, nothing signed)."""


def resume(record: Lifecycle) -> Lifecycle:
    if not record.halted:
        raise Refused(
            "is not halted: nothing to resume",
            hint="resume undoes mux-release halt; to change the stages, use rollout",
        )
    return record._replace(halted=False)


def withdraw(reason: str, replacement: str | None) -> Callable[[Lifecycle], Lifecycle]:
    def apply(record: Lifecycle) -> Lifecycle:
        return record._replace(withdrawn=Withdrawal(reason, replacement))

    return apply


def critical(minimum_version: str | None, notes: str | None) -> Callable[[Lifecycle], Lifecycle]:
    def apply(record: Lifecycle) -> Lifecycle:
        changed = record._replace(critical=True)
        if minimum_version is not None:
            changed = changed._replace(minimum_version=minimum_version)
        if notes is not None:
            changed = changed._replace(notes=notes)
        return changed

    return apply


def clock(now: int | None = None) -> int:
    return int(time.time()) if now is None else now


def describe(changed: Changed) -> list[str]:
    """What changed, what was signed and what to publish, a line each, for the release
    engineer."""
    comment = changed.signed.comment
    lines = _changes(changed.tag, changed.before, changed.after)
    lines.append(
        f"signed: {changed.signed.index} with minisign key {changed.signed.key_id}, "
        f"seq {comment.seq}, expires {format_time(comment.expires)}"
    )
    lines.extend(f"signed: the TUF repository: {line}" for line in changed.tuf)
    folder = changed.signed.index.parent
    lines.append(f"publish: {folder} (the feed workflow) for clients to see it")
    return lines


def describe_plan(planned: Planned) -> list[str]:
    """What a dry run would change and sign, a line each; it says that nothing was."""
    lines = _changes(planned.tag, planned.before, planned.after)
    index = planned.feed_dir / FEED_INDEX_NAME
    lines.append(f"would sign: {index} with minisign key {planned.key_id}, seq {planned.seq}")
    if planned.tuf:
        lines.append(
            f"would sign: the TUF repository ({TUF_METADATA_DIR}/): the lifecycle of "
            f"{planned.tag}, then a new snapshot and timestamp"
        )
    lines.append("dry run: nothing was signed or written")
    return lines


def _changes(tag: str, before: Lifecycle, after: Lifecycle) -> list[str]:
    state = _facts(after)
    if state == _facts(before):
        return [f"unchanged: {tag}: {state} (signed again as it is)"]
    return [f"changed: {tag}: {state}", f"  was: {_facts(before)}"]


def _facts(record: Lifecycle) -> str:
    """What a record says of its release, in one line."""
    facts = []
    if record.withdrawn is not None:
        facts.append(
            "withdrawn"
            + (
                f" (replacement {record.withdrawn.replacement})"
                if record.withdrawn.replacement
                else ""
            )
        )
    if record.halted:
        facts.append("halted")
    if record.critical:
        facts.append("critical")
    if record.minimum_version:
        facts.append(f"minimum_version {record.minimum_version}")
    if record.stages:
        facts.append(
            "stages "
            + ", ".join(f"{s.percent:g}% from {format_time(s.start)}" for s in record.stages)
        )
    if record.interval is not None:
        facts.append(
            f"interval {record.interval.seconds}s from {format_time(record.interval.start)}"
        )
    if not facts:
        facts.append("fully rolled out")
    return "; ".join(facts)
