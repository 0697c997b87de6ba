"""Hints that fit (issue 38, item 14): a 404 names only what applies, "does not list" says what
is listed, a mistyped source gets "did you mean", one version rule for every flag, and no
Python error text in a message.

The rules are pure (:mod:`updater.core.hints`, :func:`updater.core.request.release_version`)
and tested as tables; one real mux process each shows a rule where a user meets it.
"""

from __future__ import annotations

import io
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.processes import run_mux
from tests.support.releases import make_feed, serve_directory
from updater.cli.app import run
from updater.config.settings import HttpSettings
from updater.core.hints import did_you_mean, error_words, listed_versions, not_found_hint
from updater.core.request import ReleaseRequest, release_version
from updater.errors import EXIT_USAGE, NetworkError, UsageError
from updater.net.client import HttpClient

QUICK = HttpSettings(retries=0, backoff=0.0)

# -- no Python error text ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("[Errno 111] Connection refused", "nothing listens on that port (connection refused)"),
        ("[Errno -2] Name or service not known", "the name does not resolve"),
        ("[Errno 104] Connection reset by peer", "the server closed the connection"),
        (
            "[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)",
            "it does not speak TLS on that port (plain http?)",
        ),
        (
            "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed "
            "certificate (_ssl.c:1006)",
            "its certificate did not verify: self-signed certificate",
        ),
        ("[SSL: SOMETHING_NEW] odd thing (_ssl.c:999)", "odd thing"),
        ("[Errno 113] Some other trouble", "Some other trouble"),
        ("the server said no", "the server said no"),
    ],
)
def test_error_words_drop_pythons_wrapping(raw: str, words: str) -> None:
    assert error_words(raw) == words
    assert "Errno" not in words and "_ssl.c" not in words and "[SSL" not in words


def test_a_refused_connection_is_said_in_words(sandbox_env: dict[str, str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]  # closed again: nothing listens there
    result = run_mux(["update", "--check", "--source", f"http://127.0.0.1:{dead}"], sandbox_env)
    assert result.returncode == 1, result.stderr
    assert "nothing listens on that port" in result.stderr
    assert "Errno" not in result.stderr and "111" not in result.stderr


def test_plain_http_on_a_tls_url_is_said_in_words(sandbox_env: dict[str, str]) -> None:
    with serve_directory(Path(sandbox_env["HOME"])) as url:
        tls = url.replace("http://", "https://")
        result = run_mux(["update", "--check", "--source", tls], sandbox_env)
    assert result.returncode == 1, result.stderr
    assert "it does not speak TLS on that port" in result.stderr
    assert "_ssl.c" not in result.stderr and "WRONG_VERSION_NUMBER" not in result.stderr


# -- a 404 names only what applies --------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "asked", "index", "names", "never"),
    [
        ("feed", False, True, ["--source"], ["MUX_REPO", "--version"]),
        ("feed", False, False, ["--source"], ["MUX_REPO", "--version"]),
        ("feed", True, False, ["--source", "--version"], ["MUX_REPO"]),
        ("github", False, False, ["MUX_REPO"], ["--source", "--version"]),
        ("github", True, False, ["MUX_REPO", "--version"], ["--source"]),
    ],
)
def test_a_not_found_hint_names_only_what_applies(
    kind: str, asked: bool, index: bool, names: list[str], never: list[str]
) -> None:
    hint = not_found_hint(kind, asked_version=asked, index=index)
    assert all(name in hint for name in names), hint
    assert not any(name in hint for name in never), hint


def test_a_feed_that_is_not_there_names_neither_mux_repo_nor_version(
    sandbox_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    with serve_directory(tmp_path / "empty") as url:
        result = run_mux(["update", "--check", "--source", f"{url}/feed"], sandbox_env)
    assert result.returncode == 1, result.stderr
    assert f"{url}/feed/releases.json was not found (HTTP 404)" in result.stderr
    assert "--source" in result.stderr
    assert "MUX_REPO" not in result.stderr and "--version" not in result.stderr


# -- "does not list" says what is listed ----------------------------------------------------


def test_listed_versions_names_the_newest_first_and_counts_the_rest() -> None:
    assert listed_versions(["1.1.0", "1.0.0"]) == (
        "it lists 1.1.0, 1.0.0; run without --version for the newest"
    )
    many = [f"1.{minor}.0" for minor in range(10, 0, -1)]
    assert listed_versions(many, limit=3) == (
        "it lists 1.10.0, 1.9.0, 1.8.0 and 7 more; run without --version for the newest"
    )
    assert listed_versions([]) == "it lists no release"


def test_a_version_the_feed_does_not_list_is_told_what_it_lists(
    sandbox_env: dict[str, str], tmp_path: Path
) -> None:
    feed = make_feed(tmp_path, versions=["1.0.0", "1.1.0", "1.2.0rc1"], prereleases=["1.2.0rc1"])
    result = run_mux(
        [
            "update",
            "--check",
            "--source",
            str(feed.path),
            "--trust-key",
            feed.keypair.public_key,
            "--version",
            "9.9.9",
        ],
        sandbox_env,
    )
    assert result.returncode == 1, result.stderr
    assert "does not list v9.9.9" in result.stderr
    assert "it lists 1.2.0rc1, 1.1.0, 1.0.0" in result.stderr


# -- "did you mean github" ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("gihtub", "github"),
        ("githb", "github"),
        ("GitHub ", None),  # (the name itself, any case: nothing to suggest)
        ("gthub", "github"),
        ("github", None),
        ("gitlab", None),
        ("./gihtub", None),
        ("https://gihtub", None),
        ("", None),
    ],
)
def test_did_you_mean_a_source_name(typed: str, meant: str | None) -> None:
    assert did_you_mean(typed) == meant


def test_a_mistyped_source_is_told_what_it_meant(
    sandbox_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # (no folder named gihtub here)
    result = run_mux(["update", "--check", "--source", "gihtub"], sandbox_env)
    assert result.returncode == EXIT_USAGE, result.stderr
    assert "release feed gihtub is not a directory or a URL" in result.stderr
    assert "did you mean github?" in result.stderr


# -- one version rule ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "version"),
    [("1.2.3", "1.2.3"), ("v1.2.3", "1.2.3"), ("1.2.3-rc1", "1.2.3-rc1"), ("1.2.3rc1", "1.2.3rc1")],
)
@pytest.mark.parametrize("flag", ["--version", "--skip", "--unskip"])
def test_one_version_rule_accepts(typed: str, version: str, flag: str) -> None:
    assert release_version(typed, flag) == version


@pytest.mark.parametrize("typed", ["1.2", "9.9", "1.0.1x", "v1.0.1x", "1.2.3.", "latest", ""])
@pytest.mark.parametrize("flag", ["--version", "--skip", "--unskip"])
def test_one_version_rule_refuses_alike(typed: str, flag: str) -> None:
    with pytest.raises(UsageError, match=f"^{flag} .* is not a release version") as refused:
        release_version(typed, flag)
    assert refused.value.hint == "give one like 1.2.3, v1.2.3 or 1.2.3-rc1"


def test_version_and_skip_refuse_the_same_versions(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    for typed in ("9.9", "1.0.1x"):
        with pytest.raises(UsageError):
            ReleaseRequest.exactly(typed)
        assert run(["update", "--skip", typed]) == EXIT_USAGE
        said = capsys.readouterr().err
        assert f"--skip '{typed}' is not a release version" in said
    assert not (tmp_path / "state").exists()  # nothing was written


class _Reset(httpx.SyncByteStream):
    """A body that breaks after its first block, as a reset connection does."""

    def __iter__(self) -> Iterator[bytes]:
        yield b"x" * 100
        raise httpx.ReadError("[Errno 104] Connection reset by peer")


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (httpx.ConnectError("[Errno 111] Connection refused"), "nothing listens on that port"),
        (
            httpx.ConnectError("[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)"),
            "it does not speak TLS on that port",
        ),
    ],
)
def test_the_client_says_transport_errors_in_words(error: Exception, words: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise error

    http = HttpClient(transport=httpx.MockTransport(handler), settings=QUICK)
    with http, pytest.raises(NetworkError) as caught:
        http.get("https://releases.example/releases.json")
    assert words in caught.value.message, caught.value.message
    assert "Errno" not in caught.value.message and "_ssl.c" not in caught.value.message


def test_a_broken_download_of_unknown_size_is_said_in_words() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=_Reset())

    http = HttpClient(transport=httpx.MockTransport(handler), settings=QUICK)
    with http, pytest.raises(NetworkError) as caught:
        http.download_into(
            "https://releases.example/a.tar.gz",
            io.BytesIO(),
            size=None,
            max_size=1000,
            label="a.tar.gz",
            progress=_Silent(),
        )
    message = caught.value.message
    assert message.endswith("failed after 100 bytes: the server closed the connection"), message


class _Silent:
    def advance(self, done: int) -> None:
        pass
