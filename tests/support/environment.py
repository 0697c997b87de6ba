"""The one list of variables from the developer's or CI's shell that would steer what mux or
install.sh does in a test; every test's environment starts from the sandbox without them
(``tests/conftest.py``, ``sandbox_env``), and a test that wants one sets it itself."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from tests.support.servers import stop_servers_in

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


# A RAM file system for the tests' folders: Linux's /dev/shm (when it allows running programs:
# install.sh and mux run the builds they unpacked).
RAM_DIR = Path("/dev/shm")
# Room the whole suite's folders need at once (2 to 3 GiB), with a margin: a container's small
# /dev/shm (64 MiB by default) is not used.
RAM_DIR_ROOM = 8 << 30


def ram_dir() -> Path | None:
    """RAM_DIR when this machine has it writable, executable and with RAM_DIR_ROOM free."""
    try:
        status = os.statvfs(RAM_DIR)
    except OSError:
        return None
    if status.f_flag & (os.ST_NOEXEC | os.ST_RDONLY) or not os.access(RAM_DIR, os.W_OK | os.X_OK):
        return None
    return RAM_DIR if status.f_bavail * status.f_frsize >= RAM_DIR_ROOM else None


def user_dirs(home: Path) -> dict[str, Path]:
    """HOME and the XDG base folders a user's mux reads, under ``home``."""
    return {
        "HOME": home,
        "XDG_CACHE_HOME": home / ".cache",
        "XDG_DATA_HOME": home / ".local" / "share",
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_STATE_HOME": home / ".local" / "state",
    }


@contextmanager
def sandbox(tmp: Path) -> Iterator[dict[str, str]]:
    """A process environment whose HOME and XDG dirs live under ``tmp`` (the tests'
    ``sandbox_env``, bench/bench_stress.py's rounds).

    The runtime dir (where servers put their sockets) is short, under /tmp, because a Unix
    socket path must fit in about 104 bytes; servers left in it are stopped at the end.
    """
    runtime = Path(tempfile.mkdtemp(prefix="mux-run-", dir="/tmp"))
    env = scrubbed(os.environ)
    dirs = {**user_dirs(tmp / "home"), "XDG_RUNTIME_DIR": runtime}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    runtime.chmod(0o700)
    env.update({k: str(v) for k, v in dirs.items()})
    env["MUX_HTTP_BACKOFF"] = "0.05"
    env["MUX_HTTP_TIMEOUT"] = "5"
    env["NO_COLOR"] = "1"
    env.pop("PYTHONPATH", None)
    try:
        yield env
    finally:
        stop_servers_in(runtime / "mux")
        shutil.rmtree(runtime, ignore_errors=True)
