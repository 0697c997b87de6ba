"""The release a source offers for a request, decided: what the check finds and caches."""

from __future__ import annotations

from updater._records import NamedTuple
from updater.core.request import Decision

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


class OfferedAsset(NamedTuple):
    name: str
    size: int
    sha256: str


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

    @property
    def update_available(self) -> bool:
        return self.decision.offers_release

    @property
    def install_command(self) -> str:
        """The ``mux update`` that installs this release."""
        command = "mux update" + (f" --version {self.version}" if self.requested else "")
        if self.decision in (Decision.DOWNGRADE, Decision.DOWNGRADE_REFUSED):
            command += " --allow-downgrade"  # it is older than this mux
        return command

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
                    {"name": self.asset.name, "size": self.asset.size, "sha256": self.asset.sha256}
                    if self.asset
                    else None
                ),
                "requested": self.requested,
            },
            "decision": self.decision.value,
            "fresh_until": self.fresh_until,
            "warnings": list(self.warnings),
            "signed_at": self.signed_at,
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
                decision=Decision(doc["decision"]),
                fresh_until=_int_or_none(doc.get("fresh_until")),
                warnings=tuple(str(w) for w in doc.get("warnings") or ()),
                signed_at=_int_or_none(doc.get("signed_at")),
            )
        except (KeyError, TypeError, ValueError):
            return None
        return offer if doc.get("ok") is True else None

    def is_fresh(self, now: float) -> bool:
        """Still within what signed it allows (a feed index expires)."""
        return self.fresh_until is None or now < self.fresh_until


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
