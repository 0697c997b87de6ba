"""The release a source offers for a request, decided: what the check finds and caches.

:func:`decide_offer` is the check's caching rule, a pure function of the cached answer, the
time and a fetch (after pip's self-version check): :func:`updater.commands.check.offer_for`
only reads and writes the cache and makes the fetch.
"""

from __future__ import annotations

from updater._records import NamedTuple
from updater.core.nextstep import mux_update
from updater.core.request import Decision
from updater.errors import MuxError, UsageError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


class OfferedAsset(NamedTuple):
    name: str
    size: int
    sha256: str


class HeldRelease(NamedTuple):
    """A newer release this machine is not offered yet, or not at all."""

    tag: str
    version: str
    why: str  # "rollout" | "halted" | "withdrawn" | "cooldown" | "pin"
    offered_at: str | None  # RFC 3339: when it will be offered here; None: not while it stands

    def to_json(self) -> dict[str, Any]:
        return {
            "tag": self.tag,
            "version": self.version,
            "why": self.why,
            "offered_at": self.offered_at,
        }


class WithdrawnInstall(NamedTuple):
    """The installed release is withdrawn: why, and where ``mux update`` moves it."""

    version: str
    reason: str  # raw signed text (at most 300 characters): shown escaped
    replacement: str | None  # the tag the withdrawal names
    move_kind: str | None  # "replacement" | "update" | "kept" | "older"; None: nowhere to go
    move_to: str | None  # the version mux update moves to

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "reason": self.reason,
            "replacement": self.replacement,
            "move": self.move_kind,
            "move_to": self.move_to,
        }


class LifecycleView(NamedTuple):
    """What the signed lifecycle state made of the offer (``--check --json``'s
    ``lifecycle``), or why there is none (``available`` false: the source has no signed data
    for it, and nothing is guessed)."""

    available: bool
    origin: str  # what signed it, or why it is unavailable
    rollout_bucket: int | None  # this machine's bucket (below 10000); never sent anywhere
    ring: str
    pin: str | None = None
    minimum_release_age: float | None = None  # seconds
    held: tuple[HeldRelease, ...] = ()
    critical: bool = False  # the offered release is critical (or required): it skipped stages
    notes: str = ""  # the offered release's notes, raw signed text: shown escaped and capped
    withdrawn: WithdrawnInstall | None = None
    minimum_version: str | None = None  # the installed release is below it
    required_by: str | None = None  # the release whose record sets that minimum
    next_change: int | None = None  # when a held-back release comes on offer (Unix time)

    def holds(self, tag: str) -> bool:
        return any(h.tag == tag for h in self.held)

    def to_json(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "origin": self.origin,
            "rollout_bucket": self.rollout_bucket,
            "ring": self.ring,
            "pin": self.pin,
            "minimum_release_age_seconds": self.minimum_release_age,
            "held_back": [h.to_json() for h in self.held],
            "critical": self.critical,
            "notes": self.notes,
            "withdrawn": self.withdrawn.to_json() if self.withdrawn else None,
            "minimum_version": self.minimum_version,
            "required_by": self.required_by,
            "next_change": self.next_change,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> LifecycleView:
        """What :meth:`to_json` wrote (raises KeyError, TypeError or ValueError otherwise)."""
        withdrawn = doc["withdrawn"]
        return cls(
            available=bool(doc["available"]),
            origin=str(doc["origin"]),
            rollout_bucket=_int_or_none(doc["rollout_bucket"]),
            ring=str(doc["ring"]),
            pin=None if doc["pin"] is None else str(doc["pin"]),
            minimum_release_age=(
                None
                if doc["minimum_release_age_seconds"] is None
                else float(doc["minimum_release_age_seconds"])
            ),
            held=tuple(
                HeldRelease(
                    str(h["tag"]),
                    str(h["version"]),
                    str(h["why"]),
                    None if h["offered_at"] is None else str(h["offered_at"]),
                )
                for h in doc["held_back"]
            ),
            critical=bool(doc["critical"]),
            notes=str(doc["notes"]),
            withdrawn=(
                None
                if withdrawn is None
                else WithdrawnInstall(
                    str(withdrawn["version"]),
                    str(withdrawn["reason"]),
                    None if withdrawn["replacement"] is None else str(withdrawn["replacement"]),
                    None if withdrawn["move"] is None else str(withdrawn["move"]),
                    None if withdrawn["move_to"] is None else str(withdrawn["move_to"]),
                )
            ),
            minimum_version=None if doc["minimum_version"] is None else str(doc["minimum_version"]),
            required_by=None if doc["required_by"] is None else str(doc["required_by"]),
            next_change=_int_or_none(doc["next_change"]),
        )


class ReleaseOffer(NamedTuple):
    """The release a source offers for a request, decided against the running mux.

    This is what the check caches: everything here comes from the source, so a cached
    answer needs no network; the live servers are asked afresh each time.
    """

    source_kind: str
    source_location: str
    tag: str
    version: str
    protocol_version: int
    released_at: str
    release_url: str
    asset: OfferedAsset | None  # the build for this mux's target, if the release has one
    requested: bool  # asked for with --version
    decision: Decision
    # Until when the answer may be reused: the feed index's signed expiry (None: no bound
    # beyond the caller's --max-age).
    fresh_until: int | None = None
    warnings: tuple[str, ...] = ()  # said with every answer, cached or not (an expired feed)
    signed_at: int | None = None  # the release's signed time (None: no signature checked)
    lifecycle: LifecycleView | None = None  # what the signed lifecycle state made of it
    # The release's notes from its signed manifest (raw Markdown, at most 4096 characters:
    # updater.formats.models.RELEASE_NOTES_KEPT): shown escaped; "" when it has none.
    release_notes: str = ""

    @property
    def update_available(self) -> bool:
        held = self.lifecycle is not None and self.lifecycle.holds(self.tag)
        return self.decision.offers_release and not held

    @property
    def install_command(self) -> str:
        """The ``mux update`` that installs this release (without the user's options:
        :attr:`updater.core.report.CheckReport.install_command` adds them)."""
        return mux_update(*self.install_args())

    def install_args(self) -> tuple[str, ...]:
        """What ``mux update`` needs to be told to install this release."""
        args: tuple[str, ...] = ("--version", self.version) if self.requested else ()
        if self.decision in (Decision.DOWNGRADE, Decision.DOWNGRADE_REFUSED):
            args += ("--allow-downgrade",)  # it is older than this mux
        return args

    def to_cache(self) -> dict[str, Any]:
        return {
            "ok": True,
            "source": {"kind": self.source_kind, "location": self.source_location},
            "latest": {
                "tag": self.tag,
                "version": self.version,
                "protocol_version": self.protocol_version,
                "released_at": self.released_at,
                "release_url": self.release_url,
                "asset": (
                    {
                        "name": self.asset.name,
                        "size_bytes": self.asset.size,
                        "size": self.asset.size,  # schema 1's name, kept for schema 2
                        "sha256": self.asset.sha256,
                    }
                    if self.asset
                    else None
                ),
                "requested": self.requested,
                "release_notes": self.release_notes,
            },
            "decision": self.decision.value,
            "fresh_until": self.fresh_until,
            "warnings": list(self.warnings),
            "signed_at": self.signed_at,
            "lifecycle": self.lifecycle.to_json() if self.lifecycle is not None else None,
        }

    @classmethod
    def from_cache(cls, doc: Mapping[str, Any]) -> ReleaseOffer | None:
        """The offer :meth:`to_cache` wrote; None when ``doc`` is anything else."""
        try:
            source, latest, asset = doc["source"], doc["latest"], doc["latest"]["asset"]
            offer = cls(
                source_kind=str(source["kind"]),
                source_location=str(source["location"]),
                tag=str(latest["tag"]),
                version=str(latest["version"]),
                protocol_version=int(latest["protocol_version"]),
                released_at=str(latest["released_at"]),
                release_url=str(latest["release_url"]),
                asset=(
                    OfferedAsset(str(asset["name"]), int(asset["size"]), str(asset["sha256"]))
                    if asset is not None
                    else None
                ),
                requested=bool(latest["requested"]),
                release_notes=str(latest.get("release_notes", "")),  # absent: an older cache
                decision=Decision(doc["decision"]),
                fresh_until=_int_or_none(doc.get("fresh_until")),
                warnings=tuple(str(w) for w in doc.get("warnings") or ()),
                signed_at=_int_or_none(doc.get("signed_at")),
                lifecycle=(
                    LifecycleView.from_json(doc["lifecycle"])
                    if doc.get("lifecycle") is not None
                    else None
                ),
            )
        except (KeyError, TypeError, ValueError):
            return None
        return offer if doc.get("ok") is True else None

    def is_fresh(self, now: float) -> bool:
        """Still within what signed it allows (a feed index expires), and no held-back
        release has come on offer since (a rollout's next stage)."""
        next_change = self.lifecycle.next_change if self.lifecycle is not None else None
        if next_change is not None and now >= next_change:
            return False
        return self.fresh_until is None or now < self.fresh_until


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class CachedAnswer(NamedTuple):
    """What the check cache holds for a question: a verified answer or a failed lookup."""

    answer: dict[str, Any]
    checked_at: float


class OfferAnswer(NamedTuple):
    """The check's answer, and what the caller does with the cache and the error."""

    offer: ReleaseOffer | None  # None: ``error`` says why
    checked_at: float
    cached: bool  # the answer came from the cache (nothing was fetched)
    store: dict[str, Any] | None = None  # what to cache now (an answer, or a failed lookup)
    error: MuxError | None = None  # raise it (after storing ``store``)


def decide_offer(
    cached: CachedAnswer | None,
    now: float,
    max_age: float | None,
    fetch: Callable[[ReleaseOffer | None], ReleaseOffer],
) -> OfferAnswer:
    """The check's answer from the cache or from ``fetch``, and what to cache.

    With ``max_age``, an entry no older answers: a cached failure is raised again, an offer
    answers while what signed it allows (:meth:`ReleaseOffer.is_fresh`). Otherwise ``fetch``
    is called with the cached offer of any age (the source need not fetch a release whose
    tag it still offers: tags do not change), and its answer, or its failure, is cached; a
    :class:`UsageError` (what the command was told is wrong, not what the source answered)
    is raised and never cached.
    """
    if cached is not None and max_age is not None and 0 <= now - cached.checked_at <= max_age:
        failure = cached_failure(cached.answer)
        if failure is not None:
            return OfferAnswer(None, cached.checked_at, True, error=failure)
        hit = ReleaseOffer.from_cache(cached.answer)
        if hit is not None and hit.is_fresh(now):
            return OfferAnswer(hit, cached.checked_at, True)
    known = ReleaseOffer.from_cache(cached.answer) if cached is not None else None
    try:
        offer = fetch(known)
    except UsageError:
        raise
    except MuxError as exc:
        return OfferAnswer(None, now, False, store=failure_to_cache(exc), error=exc)
    return OfferAnswer(offer, now, False, store=offer.to_cache())


def failure_to_cache(exc: MuxError) -> dict[str, Any]:
    return {"ok": False, "error": exc.message, "hint": exc.hint, "exit_code": exc.exit_code}


def cached_failure(doc: Mapping[str, Any]) -> MuxError | None:
    """The error a cached failed lookup stands for; None when ``doc`` is not one."""
    if doc.get("ok") is not False:
        return None
    hint, code = doc.get("hint"), doc.get("exit_code")
    error = MuxError(
        f"{doc.get('error')} (cached result)", hint=hint if isinstance(hint, str) else None
    )
    if isinstance(code, int):
        error.exit_code = code
    return error
