"""The source a command reads from: GitHub, or a static feed (a folder or a URL)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from updater.config.settings import check_token
from updater.errors import (
    UsageError,
)
from updater.sources.base import ReleaseSource
from updater.sources.feed import FeedSource
from updater.sources.feed_index import IndexPolicy
from updater.sources.feed_seq import state_path
from updater.sources.github import GitHubSource
from updater.sources.tuf_index import tuf_spec

if TYPE_CHECKING:
    from updater.config.buildinfo import BuildInfo
    from updater.config.settings import Settings
    from updater.sources.feed_index import IndexPolicy


def open_source(
    settings: Settings,
    *,
    spec: str | None = None,
    build_keys: Sequence[str] = (),
    unsigned_index: bool = False,
    build: BuildInfo | None = None,
) -> ReleaseSource:
    """``spec`` (default ``settings.source``): ``github``, a feed URL or a feed directory.

    A ``build`` that trusts a TUF root (or settings that name one: the machine policy's
    ``tuf_root``) reads every source through its TUF repository
    (:mod:`updater.sources.tuf_index`). Otherwise a feed's index must be signed by one of
    ``build_keys`` or the keys the settings add
    (:meth:`~updater.config.settings.Settings.trusted_keys`), fresh and not rolled back
    (:mod:`updater.sources.feed_index`). ``unsigned_index`` reads it unchecked: only for a mirror of
    another project's artifacts (``mux-release repin``), whose files are checked one by one.
    """
    chosen = spec or settings.source
    try:
        if chosen == "github":
            github = settings.github
            return GitHubSource(
                github.repo,
                web_url=github.web_url,
                api_url=github.api_url,
                token=check_token(github.token, github.token_variable) if github.token else None,
                http=settings.http,
                download_hosts=github.download_hosts,
                tuf=tuf_spec(settings, build, feed=None) if build is not None else None,
                lock_wait=settings.lock_timeout,
            )
        tuf = tuf_spec(settings, build, feed=chosen) if build is not None else None
        if tuf is not None:
            return FeedSource(chosen, http=settings.http, tuf=tuf, lock_wait=settings.lock_timeout)
        index = None if unsigned_index else index_policy(settings, build_keys)
        return FeedSource(chosen, http=settings.http, index=index)
    except ValueError as exc:  # urllib's word on a malformed URL (a bad port, a bad [host])
        what = "MUX_GITHUB_URL / MUX_GITHUB_API_URL" if chosen == "github" else chosen[:200]
        raise UsageError(f"invalid release source URL in {what}: {exc}") from None


def index_policy(settings: Settings, build_keys: Sequence[str]) -> IndexPolicy:
    """What a feed's index must satisfy under ``settings`` (keys, expiry, the seq state)."""

    return IndexPolicy(
        keys=settings.trusted_keys(build_keys),
        allow_expired=settings.allow_expired_feed,
        state_file=state_path(settings.state_dir),
    )
