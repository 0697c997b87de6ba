"""``mux update --check``: source -> plan -> report, with the cached fast path.

:func:`check` is the library entry point. With ``max_age`` it first tries the cache
(:mod:`updater.cache`) and, on a hit, answers without importing the HTTP stack; the live
servers are always asked afresh, since a restart can change them at any moment.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from . import buildinfo, cache
from .buildinfo import BuildInfo
from .plan import CheckReport, plan_check
from .timestamps import rfc3339


@dataclass(frozen=True)
class CheckOptions:
    source: str | None = None
    include_pre: bool = False
    version: str | None = None
    max_age: float | None = None
    query_servers: bool = True


def _source_spec(options: CheckOptions) -> str:
    return options.source or os.environ.get("MUX_UPDATE_SOURCE") or "github"


def cache_key(options: CheckOptions, build: BuildInfo) -> dict[str, Any]:
    return {
        "source": _source_spec(options),
        "repo": buildinfo.effective_repo(build),
        "github": os.environ.get("MUX_GITHUB_URL", ""),
        "pre": options.include_pre,
        "version": options.version,
        "current": build.version,
        "target": build.target,
    }


def _live_servers(options: CheckOptions) -> list[Any]:
    if not options.query_servers:
        return []
    from .servers import query_all

    return query_all()


def _plan(
    build: BuildInfo,
    answer: dict[str, Any],
    options: CheckOptions,
    *,
    cached: bool,
    checked_at: str,
) -> CheckReport:
    from .servers import restart_command

    return plan_check(
        build,
        answer,
        _live_servers(options),
        cached=cached,
        checked_at=checked_at,
        restart_command=restart_command,
    )


def cached_report(options: CheckOptions, build: BuildInfo | None = None) -> CheckReport | None:
    """The answer from the cache when it is fresh enough; ``None`` means go to the network."""
    if options.max_age is None:
        return None
    build = build or buildinfo.current()
    key = cache_key(options, build)
    hit = cache.load(key, options.max_age)
    if hit is None:
        return None
    answer, checked_at = hit
    return _plan(build, answer, options, cached=True, checked_at=rfc3339(checked_at))


def resolve_release(options: CheckOptions, build: BuildInfo) -> dict[str, Any]:
    """Ask the source which release is on offer and decide it against this build."""
    from packaging.version import Version

    from . import models
    from .plan import release_answer
    from .sources import open_source

    source = open_source(options.source, repo=buildinfo.effective_repo(build))
    try:
        if options.version:
            models.parse_version(options.version)
            tag = models.tag_for(options.version.removeprefix("v"))
        else:
            tag = source.latest_tag(include_pre=options.include_pre)
        manifest = models.parse_manifest(source.fetch(tag, models.MANIFEST_NAME))
        if models.parse_version(manifest.version) != models.parse_tag(tag):
            from .errors import ParseError

            raise ParseError(
                f"{models.MANIFEST_NAME} of {tag} says version {manifest.version}; refusing it"
            )
        current = Version(build.version)
        offered = Version(manifest.version)
        update = offered != current if options.version else offered > current
        return release_answer(
            source_kind=source.kind,
            source_location=source.location,
            tag=tag,
            manifest=manifest,
            release_url=source.release_page(tag),
            target=build.target,
            update_available=update,
            requested=bool(options.version),
        )
    finally:
        source.close()


def check(options: CheckOptions, build: BuildInfo | None = None) -> CheckReport:
    """Run a check; raises :class:`updater.errors.MuxError` on failure (also a cached one)."""
    from .errors import MuxError

    build = build or buildinfo.current()
    hit = cached_report(options, build)
    if hit is not None:
        _raise_cached_failure(hit.answer)
        return hit
    key = cache_key(options, build)
    now = time.time()
    try:
        answer = resolve_release(options, build)
    except MuxError as exc:
        cache.store(
            key,
            {"ok": False, "error": exc.message, "hint": exc.hint, "exit_code": exc.exit_code},
            now=now,
        )
        raise
    cache.store(key, answer, now=now)
    return _plan(build, answer, options, cached=False, checked_at=rfc3339(now))


def _raise_cached_failure(answer: dict[str, Any]) -> None:
    if answer.get("ok") is False:
        from .errors import MuxError

        error = MuxError(f"{answer.get('error')} (cached result)", hint=answer.get("hint"))
        code = answer.get("exit_code")
        if isinstance(code, int):
            error.exit_code = code
        raise error
