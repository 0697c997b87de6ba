"""Which releases' notes ``mux update`` shows after an update (pure).

An update from ``installed`` to a release says what changed in between: the notes of every
release after the installed one up to the installed-now one, newest first, each from its
signed manifest (:func:`updater.commands.release_notes.notes_since` reads them, and
:func:`updater.cli.render.release_notes_lines` shows about five lines of them with the
release page for the rest).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from packaging.version import Version

# Releases whose notes are read: mux update shows at most five lines of notes in all
# (updater.cli.render.NOTES_LINES), so a sixth release would never be shown.
NOTES_RELEASES = 5


class ReleaseNotes(NamedTuple):
    """One release's notes as its signed manifest gives them."""

    version: str
    text: str  # raw signed Markdown (at most 4096 characters); "" when the release has none
    release_url: str
    read: bool = True  # False: they could not be read and verified; the page stands for them

    def to_json(self) -> dict[str, object]:
        return {
            "version": self.version,
            "release_notes": self.text,
            "release_url": self.release_url,
            "read": self.read,
        }


def releases_between(
    listed: Sequence[tuple[str, Version]], installed: Version, target: Version
) -> list[str]:
    """The tags of the ``listed`` releases (tag, version) newer than ``installed`` and older
    than ``target``, newest first, as many as :data:`NOTES_RELEASES` leaves room for beside
    the target's own. Pre-releases count only on the way to a pre-release."""
    between = sorted(
        (
            (version, tag)
            for tag, version in listed
            if installed < version < target and (target.is_prerelease or not version.is_prerelease)
        ),
        reverse=True,
    )
    return [tag for _, tag in between[: NOTES_RELEASES - 1]]
