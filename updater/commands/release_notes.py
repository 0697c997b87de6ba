"""The notes of the releases an update moved past, each read from its signed manifest.

The installed-now release's notes came with its manifest, which layers 1 and 2 verified. The
releases in between are the ones the source's signed data lists (a feed's index, the TUF
targets: :meth:`~updater.sources.base.ReleaseSource.lifecycle`), withdrawn ones left out;
each one's manifest is verified as the installed one's was
(:func:`updater.trust.pipeline.verify_release_metadata`) before a word of it is kept. A
source without a signed list of releases (GitHub's pages) gives the installed release's
notes only. Notes never come from anything unsigned (a GitHub release's body is not read).

Nothing here fails an update that stands: the first release whose notes cannot be read or
do not verify ends the reading, and it and the older ones are pointed to by their page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from updater.core.release_notes import ReleaseNotes, releases_between
from updater.errors import MuxError
from updater.formats.models import parse_tag, parse_version
from updater.trust.layers import VerificationLog
from updater.trust.pipeline import verify_release_metadata

if TYPE_CHECKING:
    from updater.sources.base import ReleaseSource
    from updater.trust.layers import VerifiedRelease
    from updater.trust.trust_policy import TrustPolicy


def notes_since(
    source: ReleaseSource,
    policy: TrustPolicy,
    release: VerifiedRelease,
    installed: str | None,
) -> tuple[ReleaseNotes, ...]:
    """The notes of ``release`` and of the releases after ``installed`` before it, newest
    first (only ``release``'s for a first install; none for a downgrade: nothing is new)."""
    manifest = release.manifest
    if installed is not None and parse_version(manifest.version) <= parse_version(installed):
        return ()
    newest = ReleaseNotes(
        manifest.version, manifest.release_notes, source.release_page(release.tag)
    )
    try:
        tags = [] if installed is None else _tags_between(source, installed, manifest.version)
    except MuxError:
        return (newest,)  # the signed list did not verify: nothing of it is used
    notes = [newest]
    for number, tag in enumerate(tags):
        try:
            between = verify_release_metadata(source, tag, policy, VerificationLog()).manifest
        except MuxError:
            return (*notes, *(_unread(source, t) for t in tags[number:]))
        notes.append(ReleaseNotes(between.version, between.release_notes, source.release_page(tag)))
    return tuple(notes)


def _tags_between(source: ReleaseSource, installed: str, version: str) -> list[str]:
    """The releases the source's signed data lists between the two, withdrawn ones left out."""
    signed = source.lifecycle()
    if signed is None:
        return []
    listed = [(tag, parse_tag(tag)) for tag, record in signed.listed if record.withdrawn is None]
    return releases_between(listed, parse_version(installed), parse_version(version))


def _unread(source: ReleaseSource, tag: str) -> ReleaseNotes:
    return ReleaseNotes(str(parse_tag(tag)), "", source.release_page(tag), read=False)
