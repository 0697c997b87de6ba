"""A static feed's signed index: ``releases.json`` and ``releases.json.minisig``.

The signature is a prehashed minisign signature of ``releases.json`` made with the release
key. Its trusted comment is minisign's own tab-separated ``key:value`` form with two more
fields (docs/contracts.md, "Signed feed index")::

    timestamp:<unix>\\tfile:releases.json\\thashed\\tseq:<n>\\texpires:<unix>

``seq`` grows by one with every signature (clients refuse a lower one than they have seen
for the key, which defeats a rollback); ``expires`` bounds how long a mirror can keep serving
the same index (which defeats an indefinite freeze). :func:`sign_feed_index` rewrites the
index from the feed's ``v<version>/`` folders and signs it; with ``refresh`` it re-signs the
index as it is, with the next ``seq`` and a new expiry. A signature made by hand with
``minisign -S -t "<that comment>" -m releases.json`` is read the same way.

The comment is read by :mod:`updater.formats.trusted_comments` (one parser, the client's). The next
``seq`` comes from the existing signature's trusted comment, read only after it
verified with the signing key's own public key (so a foreign file cannot steer it; a refresh
also requires the index to be exactly what was signed); ``seq`` overrides it, for a new key.

A first index is never written over a published feed (:func:`continued_state`): a feed that
holds releases but no signed index (a fresh checkout of the Pages branch, a partial sync)
would otherwise start again at seq 1 with no lifecycle records, forgetting every withdrawal
and the sequence floor. Such a feed continues from its TUF repository when it has one (the
records ``release-workflow`` signs, the seq the timestamp records); otherwise it is refused
unless it is declared new (``new_feed``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from release.publish.feed_folder import manifest_released_at, release_folders
from release.publish.formats import format_releases_json
from release.publish.signing import SecretKey
from updater.errors import MuxError, ParseError, UsageError, VerificationError
from updater.files import atomic_write
from updater.formats.lifecycle import Lifecycle, parse_record
from updater.formats.minisign import PublicKey, verify, verify_trusted_comment
from updater.formats.models import (
    FEED_INDEX_NAME,
    TUF_METADATA_DIR,
    FeedRelease,
    parse_releases_json,
    parse_tag,
)
from updater.formats.trusted_comments import FEED_SIGNATURE_NAME, IndexComment

DEFAULT_EXPIRES_IN = 14 * 24 * 3600
MAX_EXPIRES_IN = 366 * 24 * 3600  # a signature valid for longer than a year defeats expiry

_DURATION = re.compile(r"([0-9]+)([smhdw]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class FeedError(MuxError):
    """A feed's index cannot be signed as asked."""


def parse_duration(text: str) -> int:
    """``14d``, ``12h``, ``90m``, ``3600s``, ``2w`` or plain seconds, to seconds (> 0)."""
    match = _DURATION.fullmatch(text.strip())
    seconds = int(match[1]) * _UNIT_SECONDS[match[2]] if match else 0
    if seconds <= 0:
        raise UsageError(f"{text[:40]!r} is not a duration such as 14d, 12h or 3600s")
    if seconds > MAX_EXPIRES_IN:
        raise UsageError(f"--expires-in {text}: at most 366 days, or expiry means little")
    return seconds


def write_feed_index(
    feed_dir: Path,
    *,
    prerelease: Mapping[str, bool] | None = None,
    lifecycle: Mapping[str, Lifecycle] | None = None,
    carried: Mapping[str, Lifecycle] | None = None,
) -> Path:
    """Write ``releases.json`` from the ``v<version>/`` folders (with a manifest) in a feed.

    A release's prerelease flag comes from ``prerelease`` (by tag), else the existing
    ``releases.json``, else its version (``1.0.0rc1`` is a prerelease). The flags are for
    humans: readers decide from the version string. A release's lifecycle record comes from
    ``lifecycle`` (by tag), else ``carried`` (what the signed index said before:
    :func:`sign_feed_index` passes only a verified one), else a new one; every record gets
    the manifest's ``released_at`` when it has none (the cooldown counts from it).
    :func:`sign_feed_index` signs the result.
    """
    feed_dir = Path(feed_dir)
    index = feed_dir / FEED_INDEX_NAME
    known: dict[str, bool] = {}
    if index.is_file():
        known = {r.tag: r.prerelease for r in parse_releases_json(index.read_bytes())}
    known.update(prerelease or {})
    records = {**(carried or {}), **(lifecycle or {})}
    releases = []
    for folder in release_folders(feed_dir):
        version = parse_tag(folder.name)
        flag = known.get(folder.name, version.is_prerelease)
        record = records.get(folder.name) or Lifecycle()
        if record.released_at is None:
            record = record._replace(released_at=manifest_released_at(folder))
        releases.append(FeedRelease(tag=folder.name, prerelease=flag, lifecycle=record))
    atomic_write(index, format_releases_json(releases), mode=0o644)  # published: for all to read
    return index


def carried_lifecycle(feed_dir: Path, key: SecretKey) -> dict[str, Lifecycle]:
    """The lifecycle records of ``feed_dir``'s index, once its signature verified with
    ``key``'s public key: only signed state is carried into the next index. An index without
    records carries nothing; one with records its signature does not vouch for is refused."""
    index = feed_dir / FEED_INDEX_NAME
    if not index.is_file():
        return {}
    raw = index.read_bytes()
    try:
        releases = parse_releases_json(raw)
    except ParseError as exc:
        raise FeedError(f"{index} cannot be read: {exc.message}") from None
    # released_at alone is no state: every index takes it from the manifests again.
    stateful = {
        r.tag: r.lifecycle
        for r in releases
        if r.lifecycle is not None and r.lifecycle._replace(released_at=None) != Lifecycle()
    }
    if not stateful:
        return {}
    try:
        verify(raw, (feed_dir / FEED_SIGNATURE_NAME).read_bytes(), [key.public_key])
    except (OSError, VerificationError) as exc:
        reason = exc.message if isinstance(exc, VerificationError) else str(exc)
        raise FeedError(
            f"{index} carries lifecycle state (rollouts, halts, withdrawals) that no signature "
            f"of key {key.key_id} vouches for ({reason})",
            hint="restore the published releases.json and its signature (the feed workflow "
            "fetches them), then run again",
        ) from None
    return stateful


def read_index_signature(feed_dir: Path, keys: list[PublicKey]) -> IndexComment:
    """The verified trusted comment of ``feed_dir``'s index (both files must be there)."""
    feed_dir = Path(feed_dir)
    try:
        index = (feed_dir / FEED_INDEX_NAME).read_bytes()
        signature = (feed_dir / FEED_SIGNATURE_NAME).read_bytes()
    except FileNotFoundError as exc:
        raise VerificationError(f"{exc.filename} does not exist") from None
    verified = verify(index, signature, keys)
    return IndexComment.parse(verified.trusted_comment)


@dataclass(frozen=True)
class SignedIndex:
    index: Path
    signature: Path
    comment: IndexComment
    key_id: str
    previous_seq: int | None  # the seq read from the signature this one replaced
    origin: str = "the signed index"  # what its seq and records continue (Continued.origin)


def _previous_seq(feed_dir: Path, key: SecretKey, *, refresh: bool) -> int | None:
    """The seq of the signature being replaced. A refresh re-signs the index as it is, so
    the whole signature must still hold; otherwise the index is rewritten anyway and only
    the signed comment matters."""
    signature = feed_dir / FEED_SIGNATURE_NAME
    if not signature.is_file():
        return None
    how = "pass --seq N to choose the sequence number (a new key may start at 1)"
    try:
        if refresh:
            return read_index_signature(feed_dir, [key.public_key]).seq
        return IndexComment.parse(
            verify_trusted_comment(signature.read_bytes(), key.public_key)
        ).seq
    except VerificationError as exc:
        raise FeedError(
            f"the existing {signature} does not verify with key {key.key_id} ({exc.message})",
            hint=how,
        ) from None
    except ParseError as exc:
        raise FeedError(
            f"the existing {signature} cannot be read: {exc.message}", hint=how
        ) from None


@dataclass(frozen=True)
class Continued:
    """What a new index continues from (:func:`continued_state`)."""

    seq: int  # the seq it signs
    previous_seq: int | None  # the seq it continues (None: given, or a new counter)
    records: dict[str, Lifecycle]  # the lifecycle records it carries, by tag
    origin: str  # where they come from: the signed index, the TUF repository, a new feed


_LOST = "the sequence floor and every lifecycle record (withdrawals, halts, rollouts)"


def continued_state(
    feed_dir: Path, key: SecretKey, *, seq: int | None = None, new_feed: bool = False
) -> Continued:
    """The seq and the lifecycle records a new index of ``feed_dir`` signed with ``key``
    carries, decided before anything is written.

    * A signed index (``releases.json`` and ``releases.json.minisig``): its seq + 1 (or
      ``seq``) and the records its signature vouches for (:func:`carried_lifecycle`).
    * No signed index, and a TUF repository (``metadata/``): the records ``release-workflow``
      signs, and the seq + 1 that its timestamp records for ``key`` (or a signature left
      without its index: the higher; or ``seq``), once the repository's signatures verified
      (:func:`release.publish.tuf_repo.signed_state`).
    * No signed index and no TUF repository: a folder without releases is a new feed (seq 1,
      or ``seq``); one with releases (or a signature) is refused (``FeedError``, one line
      naming what would be lost) unless ``new_feed`` says it never was published.

    ``new_feed`` contradicts a signature and a TUF repository that records a seq of this key:
    both are refused (``UsageError``).
    """
    feed_dir = Path(feed_dir)
    index, signature = feed_dir / FEED_INDEX_NAME, feed_dir / FEED_SIGNATURE_NAME
    if new_feed and signature.is_file():
        raise UsageError(
            f"--new-feed: {feed_dir} holds a signed index ({FEED_SIGNATURE_NAME}): it was "
            "published",
            hint="drop --new-feed; --seq N starts the counter of a new key",
        )
    # The seq of the signature being replaced (verified with the key), if there is one.
    previous = _previous_seq(feed_dir, key, refresh=False) if seq is None else None
    if signature.is_file() and index.is_file():
        return Continued(
            seq if seq is not None else (previous or 0) + 1,
            previous,
            carried_lifecycle(feed_dir, key),
            "the signed index",
        )
    carried_lifecycle(feed_dir, key)  # an index with records nobody signed: refused
    published = signature.is_file() or bool(release_folders(feed_dir))
    if (feed_dir / TUF_METADATA_DIR).is_dir():
        return _continued_from_tuf(
            feed_dir, key, seq=seq, previous=previous, new_feed=new_feed, published=published
        )
    if new_feed or not published:
        return Continued(1 if seq is None else seq, None, {}, "a new feed")
    if signature.is_file():
        raise FeedError(
            f"{feed_dir} holds {FEED_SIGNATURE_NAME} without its {FEED_INDEX_NAME}, and no TUF "
            "repository: a new index would lose every lifecycle record (withdrawals, halts, "
            "rollouts)",
            hint="restore the published releases.json",
        )
    given = "; --seq gives only the floor" if seq is not None else ""
    raise FeedError(
        f"{feed_dir} holds releases but no signed index ({FEED_SIGNATURE_NAME}) and no TUF "
        f"repository: a new index would lose {_LOST}{given}",
        hint="restore the published releases.json and releases.json.minisig; --new-feed only "
        "for a feed never published",
    )


def _continued_from_tuf(
    feed_dir: Path,
    key: SecretKey,
    *,
    seq: int | None,
    previous: int | None,
    new_feed: bool,
    published: bool,
) -> Continued:
    # deferred (+120 ms, python-tuf): only a feed with a TUF repository and no index needs it
    from release.publish import tuf_repo

    try:
        state = tuf_repo.signed_state(feed_dir)
    except MuxError as exc:
        raise FeedError(
            f"{feed_dir} has no signed index ({FEED_SIGNATURE_NAME} and {FEED_INDEX_NAME}) and "
            f"its TUF repository cannot vouch for {_LOST}: {exc.message}",
            hint="restore the published releases.json and releases.json.minisig, or the "
            "published metadata/",
        ) from None
    records = {}
    for tag, doc in state.records.items():
        try:
            records[tag] = parse_record(doc, f"the lifecycle of {tag} in {TUF_METADATA_DIR}/")
        except ParseError as exc:
            raise FeedError(exc.message) from None
    origin = f"from the TUF repository {TUF_METADATA_DIR}/"
    recorded = state.index.seq if state.index and state.index.key_id == key.key_id else None
    known = [n for n in (previous, recorded) if n is not None]
    if seq is not None:
        return Continued(seq, None, records, origin)
    if known:
        floor = max(known)
        if new_feed:
            raise UsageError(
                f"--new-feed: the TUF repository of {feed_dir} records that key {key.key_id} "
                f"signed its index at seq {floor}: it was published",
                hint=f"drop --new-feed to continue at seq {floor + 1}",
            )
        return Continued(floor + 1, floor, records, origin)
    if new_feed or not (published or state.tags):
        return Continued(1, None, records, origin)
    raise FeedError(
        f"{feed_dir} holds releases but no signed index ({FEED_SIGNATURE_NAME}), and its TUF "
        f"repository records no seq of key {key.key_id}: a new index would lose the sequence "
        "floor (the lifecycle records would come from the TUF repository)",
        hint="restore the published releases.json and releases.json.minisig, or give --seq N "
        "above the last published seq",
    )


def sign_feed_index(
    feed_dir: Path,
    key: SecretKey,
    *,
    expires_in: int = DEFAULT_EXPIRES_IN,
    refresh: bool = False,
    seq: int | None = None,
    new_feed: bool = False,
    now: int | None = None,
    prerelease: dict[str, bool] | None = None,
    lifecycle: Mapping[str, Lifecycle] | None = None,
) -> SignedIndex:
    """Write (unless ``refresh``) and sign ``feed_dir/releases.json``.

    ``seq`` defaults to the existing signature's plus one; a feed without a signed index
    continues from what :func:`continued_state` finds (``new_feed``: it never was
    published, seq 1), and is refused when nothing says where it stood.
    ``now`` is the signature's timestamp (default: the clock); it expires ``expires_in``
    seconds later. ``prerelease`` is passed to :func:`write_feed_index`
    (the flags are for humans: readers decide from the version string), and so is
    ``lifecycle`` (records by tag, replacing what the signed index said of those releases).
    """
    feed_dir = Path(feed_dir)
    if not feed_dir.is_dir():
        raise UsageError(f"{feed_dir} is not a folder")
    if expires_in <= 0:
        raise UsageError("the index must expire after it was signed")
    if seq is not None and seq < 0:
        raise UsageError("--seq must not be negative")
    index = feed_dir / FEED_INDEX_NAME
    if refresh:
        if not index.is_file():
            raise UsageError(f"{index} does not exist; nothing to refresh (run without --refresh)")
        if new_feed:
            raise UsageError("--new-feed writes a first index; --refresh re-signs one")
        previous = _previous_seq(feed_dir, key, refresh=True) if seq is None else None
        next_seq = seq if seq is not None else (previous or 0) + 1
        origin = "the signed index"
    else:
        # Decided before anything is written; the old signature is over the old index.
        state = continued_state(feed_dir, key, seq=seq, new_feed=new_feed)
        previous, next_seq, origin = state.previous_seq, state.seq, state.origin
        write_feed_index(
            feed_dir, prerelease=prerelease, lifecycle=lifecycle, carried=state.records
        )
    timestamp = int(time.time()) if now is None else now
    comment = IndexComment(
        timestamp=timestamp,
        seq=next_seq,
        expires=timestamp + expires_in,
    )
    signature = feed_dir / FEED_SIGNATURE_NAME
    atomic_write(signature, key.sign(index.read_bytes(), comment.format()), mode=0o644)
    return SignedIndex(
        index=index,
        signature=signature,
        comment=comment,
        key_id=key.key_id,
        previous_seq=previous,
        origin=origin,
    )
