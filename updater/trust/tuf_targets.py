"""What verified TUF targets metadata says about mux's releases (pure: no I/O, no python-tuf).

Every file of a release is a target named ``<tag>/<file name>`` (``v1.2.0/manifest.json``,
``v1.2.0/mux-x86_64-unknown-linux-gnu.tar.gz``), with its length, its sha256 and a custom
object ``{"mux": {...}}`` (docs/contracts.md, "TUF repository"):

* ``version``: the release's version (it must be the tag's);
* ``protocol_version``: the release's protocol;
* ``target``: the target triple, for an archive and its SBOM;
* ``kind``: ``archive``, ``sbom``, ``manifest``, ``sums``, ``signature``, ``bundle``,
  ``install-script`` or ``file``;
* ``state``: ``published`` is the only one offered (the others are reserved, as is
  ``deltas``);
* ``lifecycle`` (the manifest's target only): the release's lifecycle record after
  publishing (staged rollout, halt, withdrawal, critical, minimum version, notes), the same
  JSON a feed's signed index carries (:mod:`updater.formats.lifecycle`); absent means fully
  rolled out. ``mux-release rollout|halt|resume|withdraw|critical`` re-sign it.

:class:`SignedTargets` is the client's answer once every role verified: which releases exist
(the tags whose ``manifest.json`` is a target), which is the newest (by PEP 440 on the
version, never list order or a flag), each file's signed length and digest, and each
release's lifecycle (:meth:`SignedTargets.lifecycle`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from updater.errors import ParseError
from updater.formats import models
from updater.formats.lifecycle import SignedLifecycle, parse_records

PUBLISHED = "published"
# What a root.json may weigh (a baked one, one a policy names, one a repository serves).
ROOT_LIMIT = 512_000


class SignedFile(NamedTuple):
    """A release file as the verified targets metadata lists it."""

    path: str  # the target path: <tag>/<name>
    length: int
    sha256: str
    custom: Mapping[str, Any]
    role: str  # the role whose signed metadata lists it

    @property
    def facts(self) -> Mapping[str, Any]:
        mux = self.custom.get("mux") if isinstance(self.custom, Mapping) else None
        return mux if isinstance(mux, Mapping) else {}


class RoleVersions(NamedTuple):
    """Which versions of the top-level roles the answer rests on (for the report)."""

    root: int
    timestamp: int
    snapshot: int
    targets: int
    timestamp_expires: float  # Unix time


class SignedTargets(NamedTuple):
    """Every release file the repository's verified metadata lists."""

    location: str  # the metadata URL (or folder), for messages
    files: Mapping[str, SignedFile]
    versions: RoleVersions

    def release(self, tag: str) -> dict[str, SignedFile]:
        """The files of the release ``tag``, by name."""
        prefix = f"{tag}/"
        return {
            path[len(prefix) :]: file
            for path, file in self.files.items()
            if path.startswith(prefix) and "/" not in path[len(prefix) :]
        }

    def file(self, tag: str, name: str) -> SignedFile | None:
        return self.files.get(f"{tag}/{name}")

    def tags(self) -> list[str]:
        """The releases on offer: every tag whose ``manifest.json`` is a target, whose signed
        version is the tag's and whose state is ``published``."""
        found = []
        for path, file in self.files.items():
            tag, _, name = path.partition("/")
            if name != models.MANIFEST_NAME:
                continue
            try:
                models.parse_tag(tag)
            except ParseError:
                continue
            facts = file.facts
            if models.tag_for(str(facts.get("version", ""))) != tag:
                continue
            if facts.get("state", PUBLISHED) != PUBLISHED:
                continue
            found.append(tag)
        return found

    def lifecycle(self) -> SignedLifecycle:
        """Every release on offer with the lifecycle record its manifest's target carries
        (raises ParseError for a record the client's strict parser refuses: the caller then
        refuses the whole answer, as a feed's index with a bad record is refused)."""
        tags = sorted(self.tags(), key=models.parse_tag)
        records = {}
        for tag in tags:
            manifest = self.files[f"{tag}/{models.MANIFEST_NAME}"]
            records[tag] = manifest.facts.get("lifecycle")
        origin = f"the signed TUF targets of {self.location} ({self.describe()})"
        return parse_records(records, origin)

    def lists(self, tag: str) -> bool:
        return tag in self.tags()

    def newest(self, *, include_pre: bool) -> str | None:
        """The highest version on offer (stable only, unless ``include_pre``), by PEP 440."""
        candidates = [
            (models.parse_tag(tag), tag)
            for tag in self.tags()
            if include_pre or not models.parse_tag(tag).is_prerelease
        ]
        return max(candidates)[1] if candidates else None

    def describe(self) -> str:
        v = self.versions
        return (
            f"root v{v.root}, timestamp v{v.timestamp}, snapshot v{v.snapshot}, "
            f"targets v{v.targets}"
        )
