"""How the release workflow publishes a tag: pre-release or not, and whether it is "latest".

GitHub's "latest" release is what ``/releases/latest`` (and so install.sh and ``mux update``
without ``--version``) serve. A tag becomes latest only when it is a stable version and at
least as high as every published stable release: a fix released on an older line (v1.4.3 after
v1.5.0) must not become what new users get. Pre-release status comes from the version string,
as everywhere in mux. :func:`plan_publish` is pure; ``mux-release publish-flags --tag T
--published FILE`` reads the published releases as ``gh release list --json tagName`` writes
them (:func:`parse_release_list`), and refuses anything else: an empty or unreadable list is
what a failed ``gh`` leaves, and read as "no release yet" it would make any tag "latest" (the
first release's list is ``[]``). ``release/publish.sh`` is the workflow's publish step.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from packaging.version import Version

from updater.errors import ParseError, UsageError
from updater.formats.models import parse_tag


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


MAX_RELEASE_LIST_BYTES = 4 * 1024 * 1024


def parse_release_list(raw: bytes, *, what: str = "the release list") -> list[str]:
    """The tags in ``gh release list --json tagName`` output: a JSON array of objects."""
    if not raw.strip():
        raise ParseError(
            f"{what} is empty: did `gh release list` fail?",
            hint="the first release's list is [] (gh prints it when there is no release)",
        )
    if len(raw) > MAX_RELEASE_LIST_BYTES:
        raise ParseError(f"{what} is larger than {MAX_RELEASE_LIST_BYTES} bytes")
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ParseError(f"{what} is not JSON (gh release list --json tagName)") from None
    if not isinstance(doc, list) or not all(
        isinstance(item, dict) and isinstance(item.get("tagName"), str) for item in doc
    ):
        raise ParseError(f"{what} is not a list of releases with a tagName each")
    return [item["tagName"] for item in doc]
