"""What was asked for, and the one decision every command acts on (pure, no I/O).

:class:`ReleaseRequest` names the release a command wants (the newest, the newest including
pre-releases, or exactly one tag) and :meth:`~ReleaseRequest.decide` answers "is this an
update?" for ``mux update --check``, ``mux update`` and ``mux-release repin`` alike.

The cached check imports this module, so it stays cheap: ``models`` and ``packaging`` are
imported only where a tag is built or versions are compared, and its records are NamedTuples
(:mod:`updater._records`): no ``typing`` or ``dataclasses`` at run time (``dataclasses``
imports ``inspect``, and defining a frozen dataclass costs about a millisecond).
"""

from __future__ import annotations

from enum import StrEnum

from updater._records import NamedTuple
from updater.errors import ParseError, UsageError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

    from packaging.version import Version


class Decision(StrEnum):
    """What a request makes of the release on offer, against the current version."""

    INSTALL = "install"  # nothing is installed yet
    UPDATE = "update"  # the offered release is newer
    UP_TO_DATE = "up-to-date"  # it is the current version
    DOWNGRADE = "downgrade"  # it is older, and the request allows going back
    DOWNGRADE_REFUSED = "downgrade-refused"  # older, asked for by version, not allowed
    NEWER_INSTALLED = "newer-installed"  # older: the current one is ahead of the newest offered
    # A higher version, but signed before the current one: an old release replayed, or a
    # backport; only `--version X --allow-downgrade` installs it.
    SIGNED_EARLIER = "signed-earlier"

    @property
    def installs(self) -> bool:
        """``mux update`` installs the offered release."""
        return self in (Decision.INSTALL, Decision.UPDATE, Decision.DOWNGRADE)

    @property
    def offers_release(self) -> bool:
        """``mux update --check`` reports a release to install (exit 10)."""
        return self.installs or self is Decision.DOWNGRADE_REFUSED


class ReleaseRequest(NamedTuple):
    """The newest release (stable, or including pre-releases), or exactly one release.

    An exact request names its tag; mux's own tags are ``v`` + the version as the release
    was built (``--version 1.2.3-rc1`` asks for ``v1.2.3-rc1``, as install.sh does).
    ``allow_downgrade`` lets an older release through; ``mux update`` sets it only together
    with ``--version`` (:meth:`from_flags`), ``mux-release repin`` with either.
    """

    exact_tag: str | None = None
    include_pre: bool = False
    allow_downgrade: bool = False
    # --allow-withdrawn: an exact request may take a release its publisher withdrew or halted
    allow_withdrawn: bool = False

    @classmethod
    def latest(cls, *, include_pre: bool = False, allow_downgrade: bool = False) -> ReleaseRequest:
        return cls(include_pre=include_pre, allow_downgrade=allow_downgrade)

    @classmethod
    def exactly(cls, version: str, *, allow_downgrade: bool = False) -> ReleaseRequest:
        """mux's release ``v<version>``; a leading ``v`` is accepted. Raises UsageError."""
        tag = _models().tag_for(release_version(version, "--version"))
        return cls(exact_tag=tag, allow_downgrade=allow_downgrade)

    @classmethod
    def tagged(cls, tag: str, *, allow_downgrade: bool = False) -> ReleaseRequest:
        """Exactly the release tagged ``tag``, in any tag family (``libfoo-v1.2.3``)."""
        return cls(exact_tag=tag, allow_downgrade=allow_downgrade)

    @classmethod
    def from_flags(
        cls, *, version: str | None, pre: bool, allow_downgrade: bool, allow_withdrawn: bool = False
    ) -> ReleaseRequest:
        """``mux update [--pre] [--version X [--allow-downgrade] [--allow-withdrawn]]``."""
        if version is None:
            if allow_withdrawn:
                raise UsageError(
                    "--allow-withdrawn goes with --version X",
                    hint="a withdrawn release is installed only when asked for by version",
                )
            return cls.latest(include_pre=pre)
        return cls.exactly(version, allow_downgrade=allow_downgrade)._replace(
            allow_withdrawn=allow_withdrawn
        )

    @property
    def exact(self) -> bool:
        return self.exact_tag is not None

    def tag(self) -> str | None:
        """The tag to ask the source for; None: the source's newest (see ``include_pre``)."""
        return self.exact_tag

    def cache_key(self) -> dict[str, Any]:
        """What makes two requests the same question (the check cache's key)."""
        return {"tag": self.exact_tag, "pre": self.include_pre}

    def decide(
        self,
        current: str | Version | None,
        offered: str | Version,
        *,
        current_signed_at: int | None = None,
        offered_signed_at: int | None = None,
    ) -> Decision:
        """The one answer to "is ``offered`` an update from ``current``?" (None: not installed).

        Older means older by version, or signed before the current release (the signed
        timestamps of their ``SHA256SUMS.minisig``, when both are known): either is a
        downgrade, installed only when the request allows it.
        """
        if current is None:
            return Decision.INSTALL
        have, get = _version(current), _version(offered)
        if get == have:
            return Decision.UP_TO_DATE
        if get > have and not signed_earlier(current_signed_at, offered_signed_at):
            return Decision.UPDATE
        if self.allow_downgrade:
            return Decision.DOWNGRADE
        if self.exact:
            return Decision.DOWNGRADE_REFUSED
        return Decision.NEWER_INSTALLED if get < have else Decision.SIGNED_EARLIER


def release_version(text: str, flag: str) -> str:
    """The one rule for a version a user types (``--version``, ``--skip``, ``--unskip``):
    ``1.2.3`` or ``v1.2.3``, a pre-release too (``1.2.3-rc1``, ``1.2.3rc1``); ``1.2``, ``9.9``
    and ``1.0.1x`` are refused alike (:class:`UsageError` naming ``flag``). Returns it as
    releases spell it (no ``v``)."""
    models = _models()
    version = text.strip().removeprefix("v")
    try:
        models.parse_tag(models.tag_for(version))
    except ParseError:
        raise UsageError(
            f"{flag} {text[:60]!r} is not a release version",
            hint="give one like 1.2.3, v1.2.3 or 1.2.3-rc1",
        ) from None
    return version


def signed_earlier(current_signed_at: int | None, offered_signed_at: int | None) -> bool:
    """The offered release was signed before the current one (False when either is unknown)."""
    if current_signed_at is None or offered_signed_at is None:
        return False
    return offered_signed_at < current_signed_at


def _version(value: str | Version) -> Version:
    return _models().parse_version(value) if isinstance(value, str) else value


def _models() -> ModuleType:
    # deferred (+62 ms, 47 modules): the release documents' parser imports dataclasses and
    # packaging, which the cached check, whose request names no version, does without
    from updater.formats import models

    return models
