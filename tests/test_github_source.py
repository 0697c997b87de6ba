"""updater.sources.github: the token and where it goes."""

from __future__ import annotations

import httpx
import respx


@respx.mock
def test_the_token_never_follows_a_redirect_to_the_download_host() -> None:
    from updater.sources.github import GitHubSource

    download = "https://github.com/acme/mux/releases/download/v1.0.0/manifest.json"
    blob = "https://objects.githubusercontent.com/github-production-release-asset/1/manifest"
    first = respx.get(download).mock(return_value=httpx.Response(302, headers={"Location": blob}))
    second = respx.get(blob).mock(return_value=httpx.Response(200, content=b"{}"))
    source = GitHubSource(
        "acme/mux", web_url="https://github.com", api_url="https://api.github.com", token="secret"
    )
    try:
        assert source.fetch("v1.0.0", "manifest.json") == b"{}"
    finally:
        source.close()
    assert first.calls.last.request.headers["Authorization"] == "Bearer secret"
    assert "Authorization" not in second.calls.last.request.headers
