"""What ``mux update`` did, as the library returns it: :class:`UpdateResult` and its parts.

Apart from the executor (:mod:`updater.commands.update`), which imports the HTTP stack and the
verification layers: applying a staged release from a recent signed answer
(:mod:`updater.commands.staged`) returns the same result without importing them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from updater.errors import EXIT_OK, EXIT_RESTART_NEEDED

if TYPE_CHECKING:
    from updater.core.release_notes import ReleaseNotes
    from updater.core.retention import KeptVersion, StagedCopy
    from updater.core.transfer import Transfer
    from updater.core.userstate import Withheld
    from updater.core.verdicts import ServerVerdict
    from updater.install.layout import Layout
    from updater.net.progress import Progress
    from updater.trust.layers import LayerResult


class UpdateAction(StrEnum):
    UPDATED = "updated"
    UP_TO_DATE = "up-to-date"
    ROLLED_BACK = "rolled-back"
    DRY_RUN = "dry-run"
    PRUNED = "pruned"
    WITHHELD = "withheld"  # the user skipped or held it, or it failed to start here
    STAGED = "staged"  # verified and placed beside the active version, not active (--stage)
    UNSTAGED = "unstaged"  # the staged version was dropped (--unstage)


@dataclass(frozen=True)
class UpdatePlan:
    """What ``--dry-run`` would do."""

    tag: str
    release_url: str
    asset: str
    asset_url: str
    size: int
    sha256: str
    checks: tuple[str, ...]
    version_dir: str
    link: str


@dataclass(frozen=True)
class UpdateResult:
    action: UpdateAction
    layout: Layout
    from_version: str | None
    to_version: str | None
    target: str
    protocol_version: int | None  # of to_version
    verification: tuple[LayerResult, ...] = ()
    servers: tuple[ServerVerdict, ...] = ()
    plan: UpdatePlan | None = None
    removed_versions: tuple[str, ...] = ()
    kept_versions: tuple[KeptVersion, ...] = ()
    withheld: Withheld | None = None
    notes: tuple[str, ...] = ()  # why (a withdrawn release moved off; a release held back)
    # How the new version's files came (a delta or the full archive) and how many bytes of
    # release files were downloaded for them; None when nothing was installed.
    transfer: Transfer | None = None
    # What changed since the version it replaced, newest release first (updated only; an
    # automatic install reads none: a server shows no text).
    release_notes: tuple[ReleaseNotes, ...] = ()
    # The staged copy this result is about: the one --stage made, or the one mux update
    # applied (when it was staged, how long that took).
    staged: StagedCopy | None = None
    # --exit-code: a server that will need a restart makes the exit code 20; without it, an
    # update that did what was asked exits 0 (as uv, rustup and gh do), and says so.
    restart_exit_code: bool = False

    @property
    def restart_needed(self) -> bool:
        return any(v.restart_needed for v in self.servers)

    @property
    def exit_code(self) -> int:
        return EXIT_RESTART_NEEDED if self.restart_exit_code and self.restart_needed else EXIT_OK


class UpdateEvents(Protocol):
    """What the caller shows while an update runs (the CLI: lines and a bar on stderr)."""

    def warning(self, message: str) -> None: ...

    def progress(self, label: str) -> Progress: ...
