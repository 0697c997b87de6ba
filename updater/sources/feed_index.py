"""A feed's signed index: ``releases.json`` is believed only once its signature, its expiry and
its sequence number say so (docs/contracts.md, "Signed feed index").

:func:`verify_feed_index` applies the client rules, in install.sh's order and with its words:

1. ``releases.json.minisig`` must be there and verify with a trusted key (the build's, and
   ``--trust-key``/the machine policy's: :meth:`updater.config.settings.Settings.trusted_keys`);
2. its trusted comment must be for ``releases.json`` with decimal ``timestamp``, ``seq`` and
   ``expires`` (:class:`updater.formats.trusted_comments.IndexComment`);
3. ``expires`` must be in the future, unless the reader allows an expired index on purpose
   (``--allow-expired-feed``, ``MUX_ALLOW_EXPIRED_FEED=1``), which is then reported loudly;
4. ``seq`` must not be lower than the highest this machine saw for the key
   (:mod:`updater.sources.feed_seq`).

Every refusal is a :class:`VerificationError` (exit 3) naming the rule and how to go on.
Only the verified index decides which releases exist and which is the newest: a release's
pre-release status comes from its version string, never from the ``prerelease`` flags.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from updater.errors import MuxError, ParseError, VerificationError
from updater.formats import minisign, models
from updater.formats.lifecycle import SignedLifecycle
from updater.formats.trusted_comments import FEED_SIGNATURE_NAME, MAX_DECIMAL_DIGITS, IndexComment
from updater.sources import feed_seq
from updater.timestamps import utc_text

# A release list, like install.sh's: 1 MiB holds about 16,000 releases.
INDEX_LIMIT = 1024 * 1024


@dataclass(frozen=True)
class IndexPolicy:
    """What a feed's index must satisfy here."""

    keys: tuple[str, ...]  # trusted minisign public keys
    allow_expired: bool  # --allow-expired-feed: accept an index past its expiry, loudly
    state_file: Path  # where the highest seq per key is kept (feed-seq)


@dataclass(frozen=True)
class VerifiedIndex:
    """A feed index that passed every rule."""

    location: str
    releases: tuple[models.FeedRelease, ...]  # drafts left out
    comment: IndexComment
    key_id: str
    state_file: Path
    expired: bool  # past its expiry, accepted because the reader allowed it

    def lists(self, tag: str) -> bool:
        return any(release.tag == tag for release in self.releases)

    def newest(self, *, include_pre: bool) -> str | None:
        """The highest version listed (stable only, unless ``include_pre``), by PEP 440; of
        equal ones the first listed, as install.sh picks."""
        candidates = [r for r in self.releases if include_pre or not r.version.is_prerelease]
        if not candidates:
            return None
        return max(candidates, key=lambda release: release.version).tag

    def lifecycle(self) -> SignedLifecycle:
        """The lifecycle records the index carries (its freshness is the index's: signed,
        expiring, never rolled back)."""
        return models.index_lifecycle(
            self.releases,
            f"the signed release list of {self.location} (seq {self.comment.seq}, key {self.key_id})",
        )

    def expiry_warning(self) -> str | None:
        if not self.expired:
            return None
        return (
            f"THE FEED {self.location} EXPIRED at {utc_text(self.comment.expires)}. Using it anyway "
            "because --allow-expired-feed (or MUX_ALLOW_EXPIRED_FEED=1) says so: an expired list "
            "can hide newer releases and their fixes."
        )


def verify_feed_index(
    location: str,
    index: bytes,
    signature: bytes | None,
    policy: IndexPolicy,
    *,
    missing_signature: str = "not found",
    now: float | None = None,
) -> VerifiedIndex:
    """Check ``index`` (``releases.json`` of the feed at ``location``) and its ``signature``
    (None when it could not be read, ``missing_signature`` saying why)."""

    index_url = f"{location}/{models.FEED_INDEX_NAME}"
    signature_url = f"{location}/{FEED_SIGNATURE_NAME}"
    if not policy.keys:
        raise VerificationError(
            f"no trusted minisign key to check the release list {index_url} with",
            hint="give the mirror's public key: --trust-key KEY",
        )
    if signature is None:
        raise VerificationError(
            f"could not download the signature of the release list, {signature_url}: "
            f"{missing_signature}",
            hint="a mux feed signs its release list (mux-release feed); use a complete, "
            "up-to-date mirror",
        )
    try:
        keys = [minisign.PublicKey.parse(key) for key in policy.keys]
    except ParseError as exc:
        raise VerificationError(f"a trusted key is unusable: {exc.message}") from None
    try:
        verified = minisign.verify(index, signature, keys)
    except VerificationError as exc:
        raise VerificationError(
            f"the release list {index_url} is not signed by a key this mux trusts "
            f"({FEED_SIGNATURE_NAME}: {exc.message})",
            hint=exc.hint
            or "the list was altered or made up: do not use this mirror, and report it "
            "(a mirror with a key of its own: --trust-key KEY)",
        ) from None
    try:
        comment = IndexComment.parse(verified.trusted_comment)
    except ParseError:
        raise VerificationError(
            f"the signature of {index_url} does not say file:releases.json, seq, expires and "
            f"timestamp (its trusted comment: {verified.trusted_comment[:200]})",
            hint="the feed's release list must be signed with mux-release feed",
        ) from None
    expired = (time.time() if now is None else now) >= comment.expires
    if expired and not policy.allow_expired:
        raise VerificationError(
            f"the feed {location} expired at {utc_text(comment.expires)} "
            "(a mirror that stopped updating, or a replay)",
            hint="use an up-to-date mirror; to use a mirror synced rarely on purpose "
            "(air-gapped), pass --allow-expired-feed or set MUX_ALLOW_EXPIRED_FEED=1",
        )
    seen = feed_seq.read(policy.state_file).get(verified.key_id)
    if seen is not None and comment.seq < seen:
        shown = (
            f"{seen}"
            if seen < feed_seq.BEYOND_ANY_SEQ
            else f"a number of more than {MAX_DECIMAL_DIGITS} digits"
        )
        raise VerificationError(
            f"the release list from {location} has sequence number {comment.seq}, lower than "
            f"{shown}, which this machine already saw for key {verified.key_id} "
            "(a rollback to an older list)",
            hint=f"use an up-to-date mirror (what was seen is in {policy.state_file})",
        )
    try:
        releases = models.parse_releases_json(index)
    except ParseError as exc:
        raise VerificationError(
            f"the release list {index_url} cannot be read: {exc.message}",
            hint="report it to whoever runs the feed",
        ) from None
    return VerifiedIndex(
        location=location,
        releases=tuple(releases),
        comment=comment,
        key_id=verified.key_id,
        state_file=policy.state_file,
        expired=expired,
    )


def remember(index: VerifiedIndex) -> str | None:
    """Record the index's ``seq`` for its key; a warning when that failed (the index was
    verified all the same, so the command's answer stands)."""

    try:
        feed_seq.record(index.state_file, index.key_id, index.comment.seq)
    except (OSError, MuxError) as exc:
        reason = exc.message if isinstance(exc, MuxError) else (exc.strerror or str(exc))
        return (
            f"could not update {index.state_file} ({reason}), so the feed's sequence number "
            f"{index.comment.seq} was not recorded"
        )
    return None
