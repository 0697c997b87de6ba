"""The one list of variables from the developer's or CI's shell that would steer what mux or
install.sh does in a test; every test's environment starts from the sandbox without them
(``tests/conftest.py``, ``sandbox_env``), and a test that wants one sets it itself."""

from __future__ import annotations

from collections.abc import Mapping

STEERING = (
    # where releases come from, with which trust, into which install
    "GITHUB_TOKEN",
    "MUX_GITHUB_TOKEN",
    "MUX_REPO",
    "MUX_UPDATE_SOURCE",
    "MUX_GITHUB_URL",
    "MUX_GITHUB_API_URL",
    "MUX_GITHUB_DOWNLOAD_HOSTS",
    "MUX_SIGSTORE_TRUSTED_ROOT",
    "MUX_POLICY_FILE",
    "MUX_ALLOW_EXPIRED_FEED",
    "MUX_TUF_ROOT",
    "MUX_TUF_METADATA_URL",
    "MUX_TUF_CLOCK_AHEAD",
    "MUX_NO_DELTA",
    "MUX_SERVER_URL",
    "MUX_HOME",
    "MUX_INSTALL_DIR",
    "MUX_TARGET",
    "XDG_BIN_HOME",
    # install.sh's own
    "MUX_VERSION",
    "MUX_DOWNLOAD_URL",
    "MUX_NO_MODIFY_PATH",
    "MUX_REQUIRE_SIGNATURE",
    "MUX_INSTALL_PRINT",
    # bounds and waits
    "MUX_HTTP_DEADLINE",
    "MUX_HTTP_MIN_SPEED",
    "MUX_HTTP_SPEED_WINDOW",
    "MUX_LOCK_TIMEOUT",
    # what a shell or a downloader reads at start: the tests' servers are on loopback and
    # set proxies and TLS trust themselves
    "ZDOTDIR",
    "ENV",
    "BASH_ENV",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "CURL_CA_BUNDLE",
    "SSL_CERT_FILE",
    "WGETRC",
    "CURL_HOME",
    # a CI runner's (CI stops a server's background work: a test that wants that sets it)
    "CI",
    "GITHUB_PATH",
    "GITHUB_ACTIONS",
)


def scrubbed(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the variables of :data:`STEERING`."""
    return {k: v for k, v in environ.items() if k not in STEERING}
