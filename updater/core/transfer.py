"""Which delta an update uses, and what its report says came over the network (pure).

A release's signed file list names its deltas (:mod:`updater.formats.delta`); an install
keeps some earlier versions. :func:`choose_delta` picks the delta to try: one from a kept
version (the active one first, then the newest), listed in the signed ``SHA256SUMS`` with the
digest the file list gives, and smaller than half the full archive. :class:`Transfer` is what
the report tells of the download: the method, the bytes, and why a delta was not used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from updater._records import NamedTuple
from updater.formats.delta import MAX_DELTA_SHARE, DeltaRef, FileList

FULL = "full"
DELTA = "delta"


class Transfer(NamedTuple):
    """How the release's files came: ``method`` (:data:`FULL` or :data:`DELTA`), from which
    kept version, the bytes of the release files downloaded for the build (the file list,
    the delta, the archive), the full archive's size, and why a delta was not used."""

    method: str
    bytes: int
    archive_size: int
    delta_from: str | None = None
    fallback: str | None = None


class DeltaChoice(NamedTuple):
    delta: DeltaRef
    base: str  # the kept version it starts from


def choose_delta(
    file_list: FileList, sums: Mapping[str, str], kept: Sequence[str], *, archive_size: int
) -> DeltaChoice | str:
    """The delta to try, or why none is (a sentence for the report)."""
    if not file_list.deltas:
        return "the release has no delta"
    reasons = []
    for version in kept:
        ref = file_list.delta_from(version)
        if ref is None:
            continue
        if sums.get(ref.name) != ref.sha256:
            reasons.append(f"SHA256SUMS does not list {ref.name} with the file list's digest")
            continue
        if ref.size >= MAX_DELTA_SHARE * archive_size:
            reasons.append(f"{ref.name} is {ref.size} bytes, not under half the archive")
            continue
        return DeltaChoice(ref, version)
    if reasons:
        return reasons[0]
    return "the release has no delta from a version this install keeps"
