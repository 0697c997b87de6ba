"""The records :func:`updater.config.settings.load` fills: :class:`Settings`, with its
:class:`HttpSettings` and :class:`GitHubSettings`, and the defaults they start from.

Apart from the loader so that the machine policy (:mod:`updater.config.policy`), which the
loader applies, can name them without importing the loader back. Stdlib only: the cached
check reads them (NamedTuples of :mod:`updater._records`, no ``typing`` at run time).
"""

from __future__ import annotations

from updater._records import NamedTuple

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    import os
    from collections.abc import Sequence
    from pathlib import Path

DEFAULT_SOURCE = "github"
DEFAULT_CHECK_INTERVAL = 6 * 3600.0
# How long `mux server restart` waits for the new build's status line before it starts the
# previous build again: a release build answers in a fraction of a second, and the fallback
# then still answers within about 10 s of a hung start.
DEFAULT_RESTART_TIMEOUT = 7.0
AUTO_INSTALL_OFF = "off"
UPDATES_ENABLED = "enabled"  # the machine policy's `updates`: enabled | check-only | disabled


class HttpSettings(NamedTuple):
    """How long and how often to try: ``MUX_HTTP_TIMEOUT``, ``_RETRIES``, ``_BACKOFF``, and
    the bounds on a whole answer: ``MUX_HTTP_DEADLINE``, ``_MIN_SPEED``, ``_SPEED_WINDOW``
    (the names install.sh reads too)."""

    timeout: float = 10.0  # seconds to connect, and without a byte while reading (a stall)
    retries: int = 3  # retries after a connection failure, a 5xx or a dropped download
    backoff: float = 0.5  # seconds before the first retry, doubled for each next one
    # MUX_HTTP_DEADLINE: seconds for one small document, every try and redirect included
    deadline: float = 30.0
    # MUX_HTTP_MIN_SPEED / MUX_HTTP_SPEED_WINDOW: an archive download gives up when less than
    # min_speed bytes/s arrived over a window of speed_window seconds (0: no minimum)
    min_speed: float = 1024.0
    speed_window: float = 30.0


class GitHubSettings(NamedTuple):
    """Where the GitHub source looks, and with which token."""

    repo: str = ""  # owner/name: MUX_REPO, else the one baked into the build
    web_url: str | None = None  # MUX_GITHUB_URL (GitHub Enterprise, loopback tests)
    api_url: str | None = None  # MUX_GITHUB_API_URL
    token: str | None = None  # MUX_GITHUB_TOKEN, else GITHUB_TOKEN (check_token's alphabet)
    token_variable: str = "MUX_GITHUB_TOKEN"  # the one of the two it came from
    # MUX_GITHUB_DOWNLOAD_HOSTS: exact hosts downloads may be redirected to (an Enterprise
    # server's storage host), as written; checked by the GitHub source. Never given the token.
    download_hosts: tuple[str, ...] = ()


class Requested(NamedTuple):
    """What the user asked for on the command line (flags): :func:`~updater.config.settings.load`
    lays them over the environment, and the machine policy judges them."""

    source: str | None = None
    home: str | os.PathLike[str] | None = None
    trust_keys: Sequence[str] = ()
    skip_attestation: bool = False
    allow_expired_feed: bool = False
    no_delta: bool = False


class Settings(NamedTuple):
    source: str = DEFAULT_SOURCE  # --source / MUX_UPDATE_SOURCE: "github", a feed URL or folder
    # Where `source` came from: "--source", "MUX_UPDATE_SOURCE", "MUX_DOWNLOAD_URL" (its older
    # name, install.sh's), the install record's path (the source the install was made from),
    # the machine policy's path; None: the default.
    source_set_by: str | None = None
    # The options of the command line that a bare `mux update` would not find again (the
    # flags of --source, --trust-key, --home, ...), as arguments: every next step mux prints
    # carries them (updater.core.nextstep).
    carried: tuple[str, ...] = ()
    github: GitHubSettings = GitHubSettings()
    http: HttpSettings = HttpSettings()
    trust_keys: tuple[str, ...] = ()  # --trust-key: minisign keys trusted besides the build's
    # --allow-expired-feed / MUX_ALLOW_EXPIRED_FEED=1 / the policy's allow_expired_feed = true:
    # accept a feed index past its expiry (a policy's false refuses the flag and the variable)
    allow_expired_feed: bool = False
    # Where the highest feed `seq` per key is kept (feed-seq); None: platformdirs'
    # user_state_dir("mux"), as install.sh computes it (docs/contracts.md)
    state_dir: Path | None = None
    skip_attestation: bool = False  # --insecure-skip-attestation
    no_delta: bool = False  # --no-delta / MUX_NO_DELTA=1: always the full archive
    sigstore_trusted_root: str | None = None  # MUX_SIGSTORE_TRUSTED_ROOT (private instances)
    target: str | None = None  # MUX_TARGET: the build to install instead of this machine's
    home: str | None = None  # --home / MUX_HOME: the install to update
    bin_dir: str | None = None  # MUX_INSTALL_DIR, else XDG_BIN_HOME: where the mux link goes
    lock_timeout: float = 10.0  # MUX_LOCK_TIMEOUT: how long to wait for another update
    smoke_test_timeout: float = 30.0  # MUX_SMOKE_TEST_TIMEOUT: a new build's `version --json`
    server_url: str | None = None  # MUX_SERVER_URL: the one server to ask, else all in the dir
    progress_bar: bool = True  # False with NO_COLOR or TERM=dumb: plain progress lines
    # MUX_UPDATE_CHECK_INTERVAL: how often a server checks in the background (0: never)
    update_check_interval: float = DEFAULT_CHECK_INTERVAL
    # MUX_LINK_POLL: how often a server looks whether the mux link moved (seconds)
    link_poll_interval: float = 1.0
    # The machine policy's `updates` (require_updates() enforces it; "disabled" also stops a
    # server's background checks) and its file, if any.
    updates: str = UPDATES_ENABLED
    policy_file: str | None = None
    # MUX_RESTART_TIMEOUT: seconds `mux server restart` waits for the new build to answer
    restart_timeout: float = DEFAULT_RESTART_TIMEOUT
    # The user's config.toml (and the policy, which may fix them): what a server's background
    # check does with a release on offer ("off" | "download": stage it | "compatible" | "all":
    # install it) and whether it may download on a metered connection; *_set_by names the
    # file that set each (None: the default).
    auto_install: str = AUTO_INSTALL_OFF
    auto_install_set_by: str | None = None
    # CI (any value but empty, as CI runners set it): nothing runs in the background, neither
    # a server's checks nor its staging or automatic installs (as rustup does since 1.28);
    # ci_set_by names the variable ("CI") when it is set.
    ci: bool = False
    ci_set_by: str | None = None
    download_on_metered: bool = False
    download_on_metered_set_by: str | None = None
    config_file: str | None = None  # the user's config.toml, when there is one
    overruled: tuple[str, ...] = ()  # the user's settings the machine policy overrules, said
    # Where this machine stands in a staged rollout (docs/contracts.md, "Release lifecycle"):
    # MUX_UPDATE_RING or the policy's ring ("early", "default", "late"); the policy's pin
    # ("1.4": stay on 1.4.x) and minimum_release_age (seconds: a cooldown).
    ring: str = "default"
    pin: str | None = None
    minimum_release_age: float | None = None
    # The TUF root the releases are read through instead of the build's (MUX_TUF_ROOT, or the
    # machine policy's tuf_root: an organisation's own repository), and who may own it when
    # the policy names it ("root", or for a development MUX_POLICY_FILE "user": as the policy
    # itself; "" for MUX_TUF_ROOT); None: the build's own root.
    tuf_root_file: str | None = None
    tuf_root_owner: str = ""
    # Where the GitHub source reads its TUF metadata (MUX_TUF_METADATA_URL, the policy's
    # tuf_metadata_url); None: the URL baked into the build (the project's GitHub Pages).
    tuf_metadata_url: str | None = None
    # Seconds added to the clock when TUF expiry is judged (MUX_TUF_CLOCK_AHEAD; never < 0).
    tuf_clock_ahead: float = 0.0

    def trusted_keys(self, build_keys: Sequence[str]) -> tuple[str, ...]:
        """Every minisign key trusted here: the build's, then these settings' (--trust-key,
        and whatever the machine policy merged in), each once. One list for the feed index
        and for releases."""
        return tuple(dict.fromkeys((*build_keys, *self.trust_keys)))
