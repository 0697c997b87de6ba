"""Changing a published release's lifecycle: ``mux-release rollout``, ``halt``, ``resume``,
``withdraw``, ``critical``.

Each verb reads the feed's signed index (its records are carried only once the signature
verified with the signing key: :func:`release.publish.feed.carried_lifecycle`), changes the
record of one listed release, checks it with the client's own strict parser
(:func:`updater.formats.lifecycle.parse_record`), and writes and signs the index with the
next ``seq`` (:func:`release.publish.feed.sign_feed_index`). The feed workflow publishes the
result like any other index; clients believe it only through that signature, and a mirror
that hides the change is refused once the index it serves expires.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from release.publish.feed import (
    DEFAULT_EXPIRES_IN,
    FeedError,
    SignedIndex,
    carried_lifecycle,
    sign_feed_index,
)
from release.publish.signing import SecretKey
from updater.errors import ParseError, UsageError
from updater.formats.lifecycle import (
    Interval,
    Lifecycle,
    Stage,
    Withdrawal,
    format_time,
    parse_record,
    parse_time,
)
from updater.formats.models import MANIFEST_NAME, parse_tag
from updater.timestamps import parse_duration

_STAGE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)%?\s*(?:@\s*(\S+))?\s*")


class Changed(NamedTuple):
    signed: SignedIndex
    tag: str
    before: Lifecycle
    after: Lifecycle


def change_lifecycle(
    feed_dir: Path,
    key: SecretKey,
    tag: str,
    change: Callable[[Lifecycle], Lifecycle],
    *,
    expires_in: int = DEFAULT_EXPIRES_IN,
    now: int | None = None,
) -> Changed:
    """Apply ``change`` to the record of ``tag`` and sign the index with the next seq."""
    feed_dir = Path(feed_dir)
    try:
        parse_tag(tag)
    except ParseError as exc:
        raise UsageError(f"--tag: {exc.message}") from None
    if not (feed_dir / tag / MANIFEST_NAME).is_file():
        raise UsageError(f"{feed_dir} has no release {tag} (no {tag}/{MANIFEST_NAME})")
    before = carried_lifecycle(feed_dir, key).get(tag, Lifecycle())
    after = change(before)
    try:
        parse_record(after.to_json(), f"the lifecycle of {tag}")  # the client's rules
    except ParseError as exc:
        raise FeedError(exc.message) from None
    signed = sign_feed_index(
        feed_dir,
        key,
        expires_in=expires_in,
        now=now,
        lifecycle={tag: after},
    )
    return Changed(signed, tag, before, after)


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


def resume(record: Lifecycle) -> Lifecycle:
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


def describe(changed: Changed) -> str:
    """One line for the release engineer: what the signed index now says of the release."""
    record = changed.after
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
    comment = changed.signed.comment
    return (
        f"{changed.tag}: {'; '.join(facts)}. Signed {changed.signed.index} with key "
        f"{changed.signed.key_id}: seq {comment.seq}, expires {format_time(comment.expires)}; "
        "publish the feed (the feed workflow) for clients to see it"
    )
