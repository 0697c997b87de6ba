"""How the release workflow publishes a tag: pre-release or not, and whether it is "latest".

GitHub's "latest" release is what ``/releases/latest`` (and so install.sh and ``mux update``
without ``--version``) serve. A tag becomes latest only when it is a stable version and at
least as high as every published stable release: a fix released on an older line (v1.4.3 after
v1.5.0) must not become what new users get. Pre-release status comes from the version string,
as everywhere in mux. Pure; ``mux-release publish-flags --tag T`` reads the published tags from
standard input (``gh release list --json tagName --jq '.[].tagName'``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from packaging.version import Version

from updater.errors import ParseError, UsageError
from updater.models import parse_tag


@dataclass(frozen=True)
class PublishPlan:
    tag: str
    prerelease: bool
    latest: bool

    def gh_flags(self) -> list[str]:
        """Flags for ``gh release create`` / ``gh release edit``."""
        flags = [f"--latest={'true' if self.latest else 'false'}"]
        if self.prerelease:
            flags.append("--prerelease")
        return flags


def plan_publish(tag: str, published_tags: Iterable[str]) -> PublishPlan:
    try:
        version = parse_tag(tag)
    except ParseError as exc:
        raise UsageError(f"--tag: {exc.message}") from None
    stable: list[Version] = []
    for other in published_tags:
        other = other.strip()
        if not other or other == tag:
            continue
        try:
            found = parse_tag(other)
        except ParseError:
            continue  # not a mux release tag: it cannot be "latest" for mux
        if not found.is_prerelease:
            stable.append(found)
    prerelease = version.is_prerelease
    latest = not prerelease and all(version >= other for other in stable)
    return PublishPlan(tag=tag, prerelease=prerelease, latest=latest)
