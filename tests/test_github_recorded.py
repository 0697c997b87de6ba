"""GitHub's real answers, replayed: the corpus in tests/fixtures/github-recorded.

Every response here was recorded from GitHub by another project (PyGithub, octokit/fixtures,
github3.py; sources and licences in the corpus README) and is served byte for byte from a
loopback server (tests/support/replay.py) to the real client: the GitHub source in this
process, or a whole ``mux update --check`` (run in this process too).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.inprocess import run_in_process
from tests.support.replay import Exchange, Replay, recorded, serve_replay
from updater.errors import NetworkError
from updater.sources.github import GitHubSource


@pytest.fixture(autouse=True)
def _sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The ETag cache and the rate-limit file go where platformdirs says: keep them here.
    for variable, folder in (("HOME", "home"), ("XDG_CACHE_HOME", "cache")):
        monkeypatch.setenv(variable, str(tmp_path / folder))


@pytest.fixture
def replay() -> Iterator[Replay]:
    with serve_replay(Replay()) as server:
        yield server


def github_source(replay: Replay, repo: str, **extra) -> GitHubSource:
    return GitHubSource(repo, web_url=replay.url, api_url=replay.url, **extra)


def pep440_tag(tag: str) -> object:
    from packaging.version import Version

    return Version(tag.removeprefix("v"))


# -- the release list, three pages ---------------------------------------------------------------


def serve_three_pages(replay: Replay) -> list[Exchange]:
    pages = recorded("releases-three-pages")
    replay.routes["/repos/PyGithub/PyGithub/releases"] = pages[0]
    for page in pages[1:]:
        replay.exact[page.recorded.removeprefix("GET https://api.github.com")] = page
    return pages


def test_pre_follows_the_link_header_through_every_page(replay: Replay) -> None:
    pages = serve_three_pages(replay)
    source = github_source(replay, "PyGithub/PyGithub")
    try:
        assert source.latest_tag(include_pre=True, parse=pep440_tag) == "v1.55"
        asked = [seen.path for seen in replay.seen]
        assert asked == [
            "/repos/PyGithub/PyGithub/releases?per_page=100",
            "/repositories/3544490/releases?per_page=10&page=2",
            "/repositories/3544490/releases?per_page=10&page=3",
        ]
        # A release from the last page is known without another request.
        listing = source.listing("v1.39")
        assert len(replay.seen) == 3
        assert listing.tag == "v1.39" and listing.draft is False
    finally:
        source.close()
    last = json.loads(pages[2].body)
    assert {a["name"] for a in next(r for r in last if r["tag_name"] == "v1.39")["assets"]} == set(
        listing.assets
    )


def test_mux_tags_among_other_projects_tags(replay: Replay) -> None:
    """With mux's own tag rule (vX.Y.Z…), tags like v1.55 are not releases of mux."""
    serve_three_pages(replay)
    with github_source(replay, "PyGithub/PyGithub") as source:
        assert source.latest_tag(include_pre=True) == "v1.54.1"


# -- rate limits, through real mux processes ---------------------------------------------------


@pytest.fixture
def env(sandbox_env: dict[str, str], replay: Replay) -> dict[str, str]:
    return {
        **sandbox_env,
        "MUX_GITHUB_URL": replay.url,
        "MUX_GITHUB_API_URL": replay.url,
        "MUX_REPO": "PyGithub/PyGithub",
    }


def one_line(result) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mux: ") and "Traceback" not in lines[0]
    return lines[0]


def test_a_secondary_rate_limit_says_when_and_is_not_asked_again_sooner(
    replay: Replay, env: dict[str, str]
) -> None:
    """403, Retry-After: 60 and "abuse detection" (no "API rate limit") is a rate limit:
    reported with when to retry, and no mux process asks again before then."""
    replay.routes["/repos/PyGithub/PyGithub/releases"] = recorded("secondary-rate-limit")[0]
    started = time.time()
    line = one_line(run_in_process(["update", "--check", "--pre"], env))
    assert "GitHub's secondary rate limit stopped" in line
    retry = re.search(r"retry at (\d\d:\d\d:\d\d) UTC \(in (\d+) s\)", line)
    assert retry is not None and 55 <= int(retry.group(2)) <= 60, line
    assert "You have triggered an abuse detection mechanism" in line
    assert "refused access" not in line and "check MUX_GITHUB_TOKEN" not in line
    assert time.time() - started < 30  # it did not wait the minute out either
    assert len(replay.seen) == 1

    again = run_in_process(["update", "--check", "--pre", "--json"], env)
    line = one_line(again)
    assert "not asking before then" in line
    assert json.loads(again.stdout)["exit_code"] == 1
    assert len(replay.seen) == 1  # nothing reached the server

    with_token = run_in_process(
        ["update", "--check", "--pre"], {**env, "MUX_GITHUB_TOKEN": "t0ken"}
    )
    one_line(with_token)  # another credential has its own limit: it may ask
    assert len(replay.seen) == 2
    assert replay.seen[1].headers.get("Authorization") == "Bearer t0ken"


def test_a_spent_primary_limit_names_the_token(replay: Replay, env: dict[str, str]) -> None:
    replay.routes["/repos/PyGithub/PyGithub/releases"] = recorded("primary-rate-limit")[0]
    line = one_line(run_in_process(["update", "--check", "--pre"], env))
    assert "GitHub's API rate limit is used up (60 requests an hour)" in line
    assert "(GitHub: API Rate Limit Exceeded for 92.104.200.119)" in line
    assert "set MUX_GITHUB_TOKEN (or GITHUB_TOKEN) to a token to raise the limit" in line
    one_line(run_in_process(["update", "--check", "--pre"], env))
    assert len(replay.seen) == 1


def test_a_forbidden_answer_is_not_a_rate_limit(replay: Replay, env: dict[str, str]) -> None:
    replay.routes["/repos/PyGithub/PyGithub/releases"] = recorded("forbidden")[0]
    line = one_line(run_in_process(["update", "--check", "--pre"], env))
    assert "refused access (HTTP 403: Must have push access to view collaborator permission.)" in (
        line
    )
    assert "rate limit" not in line and "MUX_GITHUB_TOKEN" in line
    one_line(run_in_process(["update", "--check", "--pre"], env))
    assert len(replay.seen) == 2  # no rate limit: the next run asks again


def test_a_422_shows_githubs_message(replay: Replay, env: dict[str, str]) -> None:
    replay.routes["/repos/PyGithub/PyGithub/releases"] = recorded("validation-failed")[0]
    line = one_line(run_in_process(["update", "--check", "--pre"], env))
    assert line.endswith("answered HTTP 422: Validation Failed (ReleaseAsset name already_exists)")


def test_githubs_message_is_escaped_and_bounded(replay: Replay, env: dict[str, str]) -> None:
    forbidden = recorded("forbidden")[0]
    hostile = json.dumps({"message": "\x1b]0;owned\x07\x1b[2J" + "x" * 5000}).encode()
    replay.routes["/repos/PyGithub/PyGithub/releases"] = replace(forbidden, body=hostile)
    line = one_line(run_in_process(["update", "--check", "--pre"], env))
    assert "\x1b" not in line and "\x07" not in line
    assert "\\x1b]0;owned\\x07\\x1b[2J" in line
    assert len(line) < 1000


# -- single releases, as recorded ----------------------------------------------------------------


def test_digest_null_uploader_objects_and_immutable_parse(replay: Replay) -> None:
    replay.routes["/repos/EnricoMi/PyGithub/releases/tags/v1.55"] = recorded("release-digest-null")[
        0
    ]
    with github_source(replay, "EnricoMi/PyGithub") as source:
        listing = source.listing("v1.55")
    assert {(a.name, a.size, a.sha256) for a in listing.assets.values()} == {
        ("asset1.md", 2524, None),
        ("asset2.gz", 1199, None),
    }


def test_a_published_digest_is_read(replay: Replay) -> None:
    tag = "v0.3.0__src_sink_carbon__sink-carbon_cli22.0.1"
    replay.routes[f"/repos/stellarcarbon/sorocarbon/releases/tags/{tag}"] = recorded(
        "release-with-digest"
    )[0]
    with github_source(replay, "stellarcarbon/sorocarbon") as source:
        asset = source.listing(tag).assets["sink-carbon_v0.3.0.wasm"]
    assert asset.sha256 == "2e4ca075988921c6c8bf01cc9e7bd4530830898f47346f1945cad930b7dfdf4d"
    assert asset.size == 4945


def test_author_null_and_no_assets(replay: Replay) -> None:
    replay.routes["/repos/qiskit-community/qiskit-qec/releases/tags/v0.0.0-alpha"] = recorded(
        "release-author-null"
    )[0]
    with github_source(replay, "qiskit-community/qiskit-qec") as source:
        listing = source.listing("v0.0.0-alpha")
    assert listing.tag == "v0.0.0-alpha" and dict(listing.assets) == {}


def test_a_weak_etag_then_a_304(replay: Replay) -> None:
    """The second process asks with If-None-Match and reads GitHub's 304 from its cache."""
    release = recorded("release-digest-null")[0]
    not_modified = recorded("not-modified")[0]
    etag = release.header("ETag")
    assert etag is not None and etag.startswith('W/"')

    def route(target: str, headers: dict[str, str]) -> Exchange:
        return not_modified if headers.get("If-None-Match") == etag else release

    replay.routes["/repos/EnricoMi/PyGithub/releases/tags/v1.55"] = route
    with github_source(replay, "EnricoMi/PyGithub") as first:
        fresh = first.listing("v1.55")
    with github_source(replay, "EnricoMi/PyGithub") as second:
        cached = second.listing("v1.55")
    assert cached == fresh
    assert [seen.headers.get("If-None-Match") for seen in replay.seen] == [None, etag]


def test_a_renamed_repository_is_followed(replay: Replay) -> None:
    """GitHub answers an old name with 301 to /repositories/<id>; here for a release path
    (the recorded Location named the repository itself: it is extended to the path asked)."""
    moved = recorded("renamed-repository")[0]
    location = moved.header("Location")
    assert location == "https://api.github.com/repositories/6895566"
    headers = tuple(
        (k, f"{v}/releases/tags/v1.55" if k.lower() == "location" else v) for k, v in moved.headers
    )
    replay.routes["/repos/sigmavirus24/charade/releases/tags/v1.55"] = replace(
        moved, headers=headers
    )
    replay.routes["/repositories/6895566/releases/tags/v1.55"] = recorded("release-digest-null")[0]
    with github_source(replay, "sigmavirus24/charade") as source:
        assert set(source.listing("v1.55").assets) == {"asset1.md", "asset2.gz"}
    assert [seen.path for seen in replay.seen] == [
        "/repos/sigmavirus24/charade/releases/tags/v1.55",
        "/repositories/6895566/releases/tags/v1.55",
    ]


def test_a_download_sent_to_an_unnamed_storage_host_is_refused_without_its_signature(
    replay: Replay,
) -> None:
    name = "github3.py-0.7.1-py2.py3-none-any.whl"
    replay.routes[f"/sigmavirus24/github3.py/releases/download/v0.7.1/{name}"] = recorded(
        "asset-redirect"
    )[0]
    with (
        github_source(replay, "sigmavirus24/github3.py") as source,
        pytest.raises(NetworkError) as refused,
    ):
        source.fetch("v0.7.1", name)
    message = str(refused.value)
    host = "github-production-release-asset-2e65be.s3.amazonaws.com"
    assert f"{host} is not an allowed release host" in message
    assert "MUX_GITHUB_DOWNLOAD_HOSTS" in message
    assert "X-Amz-Signature" not in message and "46f3475f" not in message
    assert len(replay.seen) == 1


def test_the_corpus_is_what_its_readme_lists() -> None:
    from tests.support.replay import CORPUS

    readme = (CORPUS / "README.md").read_text(encoding="utf-8")
    for path in sorted(CORPUS.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert path.name in readme, path.name
        assert doc["source"] and doc["licence"] and doc["exchanges"], path.name
        for exchange in doc["exchanges"]:
            assert exchange["recorded"].split(" ", 1)[1].startswith("https://"), path.name


# -- the classification, as a table (the recorded cases above, and the shapes around them) -------

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("status", "headers", "body", "retry_in", "kind"),
    [
        (
            403,
            {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) + 900)},
            b"",
            900,
            "primary",
        ),
        (
            429,
            {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) + 60)},
            b"",
            60,
            "primary",
        ),
        (
            403,
            {"retry-after": "120"},
            b'{"message": "You have exceeded a secondary rate limit."}',
            120,
            "secondary",
        ),
        (403, {}, b'{"message": "You have exceeded a secondary rate limit."}', 60, "secondary"),
        (403, {}, b'{"message": "API rate limit exceeded for installation ID 1."}', 60, "primary"),
        (429, {}, b"", 60, "secondary"),
        (429, {"retry-after": "Fri, 15 Jan 2027 08:00:30 GMT"}, b"", None, "secondary"),
        (
            403,
            {"x-ratelimit-remaining": "4999"},
            b'{"message": "Must have admin rights"}',
            None,
            None,
        ),
        (401, {"retry-after": "30"}, b'{"message": "Bad credentials"}', None, None),
        (404, {}, b'{"message": "Not Found"}', None, None),
    ],
)
def test_what_is_a_rate_limit(
    status: int, headers: dict[str, str], body: bytes, retry_in: int | None, kind: str | None
) -> None:
    import httpx

    from updater.net.refusals import rate_limit_of, status_error

    request = httpx.Request("GET", "https://api.github.com/x")
    response = httpx.Response(status, headers=headers, request=request)
    retry_at = rate_limit_of(response, body, now=NOW)
    if kind is None:
        assert retry_at is None
        return
    assert retry_at is not None
    if retry_in is not None:
        assert retry_at == NOW + retry_in
    error = status_error("https://api.github.com/x", response, body)
    assert getattr(error, "kind", None) == kind, error.message


@pytest.mark.parametrize(
    "headers",
    [
        {"retry-after": "Fri, 15 Jan 3027 08:00:30 GMT"},
        {"retry-after": "999999999999"},
        {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "99999999999"},
    ],
)
def test_no_answer_imposes_a_wait_longer_than_a_week(headers: dict[str, str]) -> None:
    """A lying or broken date must not block every mux on the machine for years."""
    import httpx

    from updater.net.refusals import LONGEST_RATE_LIMIT_WAIT, rate_limit_of

    request = httpx.Request("GET", "https://api.github.com/x")
    response = httpx.Response(429, headers=headers, request=request)
    assert rate_limit_of(response, b"", now=NOW) == NOW + LONGEST_RATE_LIMIT_WAIT


def test_a_stored_wait_beyond_a_week_is_dropped_not_obeyed(tmp_path: Path) -> None:
    """An entry no answer could have written (an older mux, a hand edit) is ignored."""
    from updater.net.refusals import LONGEST_RATE_LIMIT_WAIT, RateLimits

    path = tmp_path / "rate-limits.json"
    url = "https://api.github.com/repos/o/r/releases"
    limits = RateLimits(path)
    key = limits.key(url, "anonymous")
    now = time.time()
    for until, obeyed in (
        (now + 3600, True),
        (now + LONGEST_RATE_LIMIT_WAIT - 60, True),
        (now + 1000 * 365 * 86400, False),
        (now - 1, False),
    ):
        path.write_text(json.dumps({"schema": 1, "limits": {key: {"until": until}}}))
        assert (limits.blocked(url, "anonymous") is not None) is obeyed, until
