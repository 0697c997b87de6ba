"""updater.core.offer.decide_offer: the check cache's rules as a table (pure: no cache file,
no clock, no network; the fetch is a plain function)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.offers import release_offer
from updater.core.offer import (
    CachedAnswer,
    ReleaseOffer,
    cached_failure,
    decide_offer,
    failure_to_cache,
)
from updater.core.request import Decision
from updater.errors import EXIT_WITHDRAWN, MuxError, NetworkError, UsageError

NOW = 1_800_000_000.0


def offer(tag: str = "v1.2.0", fresh_until: int | None = None) -> ReleaseOffer:
    return release_offer(Decision.UPDATE)._replace(
        tag=tag, version=tag.removeprefix("v"), fresh_until=fresh_until
    )


class Fetch:
    """A source that answers ``answer`` (or raises it) and remembers what it was told."""

    def __init__(self, answer: ReleaseOffer | Exception) -> None:
        self.answer = answer
        self.known: list[ReleaseOffer | None] = []

    def __call__(self, known: ReleaseOffer | None) -> ReleaseOffer:
        self.known.append(known)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def entry(doc: dict, age: float) -> CachedAnswer:
    return CachedAnswer(doc, NOW - age)


OLD = offer("v1.1.0")
NEW = offer("v1.2.0")
OFFLINE = NetworkError("cannot reach the feed")

# (case, cached, max_age, fetch answer) -> (cached?, fetched?, offer tag, error?, stored?)
CASES = [
    (
        "a fresh hit answers without a fetch",
        entry(OLD.to_cache(), 10),
        60,
        NEW,
        True,
        False,
        "v1.1.0",
        None,
        False,
    ),
    (
        "an entry older than max_age is fetched again",
        entry(OLD.to_cache(), 61),
        60,
        NEW,
        False,
        True,
        "v1.2.0",
        None,
        True,
    ),
    (
        "no max_age: always fetched",
        entry(OLD.to_cache(), 1),
        None,
        NEW,
        False,
        True,
        "v1.2.0",
        None,
        True,
    ),
    (
        "an entry from the future is not a hit",
        entry(OLD.to_cache(), -5),
        60,
        NEW,
        False,
        True,
        "v1.2.0",
        None,
        True,
    ),
    (
        "a signed answer past its expiry is fetched again",
        entry(offer("v1.1.0", fresh_until=int(NOW) - 1).to_cache(), 10),
        60,
        NEW,
        False,
        True,
        "v1.2.0",
        None,
        True,
    ),
    (
        "a cached failure is raised again",
        entry(failure_to_cache(OFFLINE), 10),
        60,
        NEW,
        True,
        False,
        None,
        "cannot reach the feed (cached result)",
        False,
    ),
    (
        "a stale failure is fetched again",
        entry(failure_to_cache(OFFLINE), 61),
        60,
        NEW,
        False,
        True,
        "v1.2.0",
        None,
        True,
    ),
    ("no cache: fetched", None, 60, NEW, False, True, "v1.2.0", None, True),
    (
        "a failed lookup is cached",
        None,
        60,
        OFFLINE,
        False,
        True,
        None,
        "cannot reach the feed",
        True,
    ),
    (
        "a corrupt entry is a miss",
        entry({"what": 1}, 10),
        60,
        NEW,
        False,
        True,
        "v1.2.0",
        None,
        True,
    ),
]


@pytest.mark.parametrize(
    ("case", "cached", "max_age", "answer", "from_cache", "fetched", "tag", "error", "stored"),
    CASES,
    ids=[c[0] for c in CASES],
)
def test_decide_offer(
    case: str,
    cached: CachedAnswer | None,
    max_age: float | None,
    answer: ReleaseOffer | Exception,
    from_cache: bool,
    fetched: bool,
    tag: str | None,
    error: str | None,
    stored: bool,
) -> None:
    fetch = Fetch(answer)
    got = decide_offer(cached, NOW, max_age, fetch)
    assert got.cached is from_cache, case
    assert bool(fetch.known) is fetched
    assert (got.offer.tag if got.offer else None) == tag
    assert (got.error.message if got.error else None) == error
    assert (got.store is not None) is stored
    if got.store is not None:
        assert got.checked_at == NOW  # a new answer is as old as this call
        assert got.store == (got.offer.to_cache() if got.offer else failure_to_cache(answer))


def test_a_stale_answer_is_handed_to_the_fetch_to_reuse_by_tag() -> None:
    fetch = Fetch(NEW)
    decide_offer(entry(OLD.to_cache(), 3600), NOW, 60, fetch)
    assert fetch.known == [OLD]


def test_a_usage_error_is_raised_and_never_cached() -> None:
    fetch: Callable[[ReleaseOffer | None], ReleaseOffer] = Fetch(UsageError("--version 1.2"))
    with pytest.raises(UsageError):
        decide_offer(None, NOW, 60, fetch)


def test_a_cached_failure_keeps_its_exit_code_and_hint() -> None:
    withdrawn = MuxError("withdrawn", hint="mux update --version 1.0.0")
    withdrawn.exit_code = EXIT_WITHDRAWN
    error = cached_failure(failure_to_cache(withdrawn))
    assert error is not None
    assert (error.exit_code, error.hint) == (EXIT_WITHDRAWN, "mux update --version 1.0.0")
    assert cached_failure(NEW.to_cache()) is None
