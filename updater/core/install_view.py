"""``mux status``: a view of the install, built from what was gathered (pure, no I/O).

:func:`install_status` turns :class:`InstallFacts` (plain values that
:mod:`updater.commands.status` gathered: the link, MUX_HOME, the versions and why each is
kept, the source and what set it, the config and policy files and what each sets, skips and
holds, the live servers as ``mux server status --json`` shows them) into the one document
``mux status --json`` prints and the text is rendered from. A file that could not be read
is a ``problem`` in the view, never a failed command: the view is what one looks at when
something is wrong.
"""

from __future__ import annotations

from updater._records import NamedTuple
from updater.timestamps import rfc3339

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

# Why an installed version that nothing keeps is still there, and what removes it.
REMOVABLE = ("removable", "nothing needs it: mux update --prune removes it")


class VersionFacts(NamedTuple):
    """One installed version: why it stays (``kind``: active, previous, running, server,
    in-use, removable) and the bytes its folder holds (None: not measured)."""

    version: str
    kind: str
    reason: str
    size_bytes: int | None = None


class FileFacts(NamedTuple):
    """A settings file: where it is, whether it exists, what it sets (name, value), and why
    it could not be read (None: it could, or there is none)."""

    path: str | None
    exists: bool = False
    sets: tuple[tuple[str, Any], ...] = ()
    problem: str | None = None


class InstallFacts(NamedTuple):
    link: str | None  # the mux link's path (None: no install found)
    link_target: str | None  # where it points (None: no link there)
    active: str | None  # the version it points at, when it points into this install
    home: str | None  # MUX_HOME
    home_problem: str | None  # why there is no install to show (a development checkout, ...)
    versions: tuple[VersionFacts, ...]
    source: str
    source_set_by: str | None
    config: FileFacts
    policy: FileFacts
    skipped: tuple[str, ...]
    hold_until: float | None
    servers: tuple[Mapping[str, Any], ...]  # as `mux server status --json` lists them
    now: float


def with_removable(
    installed: Sequence[str], kept: Sequence[VersionFacts], sizes: Mapping[str, int]
) -> tuple[VersionFacts, ...]:
    """Every installed version, newest folder name order aside: the kept ones with their
    reasons first, then the ones nothing keeps; sizes from ``sizes`` where measured."""
    reasons = {v.version: v for v in kept}
    rest = [VersionFacts(v, *REMOVABLE) for v in installed if v not in reasons]
    return tuple(v._replace(size_bytes=sizes.get(v.version)) for v in [*kept, *rest])


def _file(facts: FileFacts) -> dict[str, Any]:
    return {
        "path": facts.path,
        "exists": facts.exists,
        "sets": dict(facts.sets),
        "problem": facts.problem,
    }


def install_status(facts: InstallFacts) -> dict[str, Any]:
    """The document of ``mux status --json`` (docs/contracts.md, "mux status"), without
    the ``schema`` every JSON document mux prints carries (the CLI adds it)."""
    sizes = [v.size_bytes for v in facts.versions]
    held = facts.hold_until is not None and facts.now < facts.hold_until
    return {
        "link": {"path": facts.link, "target": facts.link_target, "version": facts.active},
        "home": {"path": facts.home, "problem": facts.home_problem},
        "versions": [
            {"version": v.version, "kind": v.kind, "reason": v.reason, "size_bytes": v.size_bytes}
            for v in facts.versions
        ],
        "disk_bytes": None if None in sizes else sum(s for s in sizes if s is not None),
        "source": {"location": facts.source, "set_by": facts.source_set_by},
        "config": _file(facts.config),
        "policy": _file(facts.policy),
        "skipped": list(facts.skipped),
        "hold_until": rfc3339(facts.hold_until) if held else None,
        "servers": [dict(server) for server in facts.servers],
    }
