"""What ``mux update`` and ``mux update --check`` take from the environment and the flags.

:func:`load` reads them once, at the entry point (the CLI, its fast path, or a library call
that was given no :class:`Settings`), into one frozen :class:`Settings` that is passed down.
Nothing below reads ``os.environ`` for these: a module that needs a setting is given it.

Precedence, lowest first: built-in defaults, the build (its baked repository), the user's
config file (``<user config dir>/mux/config.toml``, :mod:`updater.config.userconfig`: the
settings a policy may also fix), the environment, the flags. The machine policy
(``/etc/mux/policy.toml``, :mod:`updater.config.policy`) is applied last, in :func:`load`:
what it sets wins, and a flag or variable that would loosen it is refused. Without either
file that costs one ``lstat`` each; their readers (and ``tomllib``) are imported only when
there is one.

A malformed number (``MUX_HTTP_TIMEOUT=soon``, a negative one) falls back to its default;
URLs and targets are checked where they are used (:mod:`updater.sources.base`,
:mod:`updater.config.targets`), so that a bad value fails the command that uses it with one line
naming the variable.

Stdlib only: this is on the fast path of the cached check. The records are NamedTuples
(:mod:`updater._records`: no ``typing`` at run time), not frozen dataclasses, for the same
reason; ``pathlib`` is imported only when a variable names a path.
"""

from __future__ import annotations

import os

from updater.config.buildfolder import running_package_folder
from updater.config.dirs import user_config_dir
from updater.config.remembered import (
    RECORD_NAME,
    install_home_of,
    recorded_source,
    source_to_use,
)
from updater.config.settings_record import (
    AUTO_INSTALL_OFF as AUTO_INSTALL_OFF,
)
from updater.config.settings_record import (
    DEFAULT_CHECK_INTERVAL as DEFAULT_CHECK_INTERVAL,
)
from updater.config.settings_record import (
    DEFAULT_RESTART_TIMEOUT as DEFAULT_RESTART_TIMEOUT,
)
from updater.config.settings_record import DEFAULT_SOURCE as DEFAULT_SOURCE
from updater.config.settings_record import UPDATES_ENABLED as UPDATES_ENABLED
from updater.config.settings_record import GitHubSettings as GitHubSettings
from updater.config.settings_record import HttpSettings as HttpSettings
from updater.config.settings_record import Requested as Requested
from updater.config.settings_record import Settings as Settings
from updater.config.trustkeys import trusted_key
from updater.errors import PolicyError, UsageError, printable
from updater.timestamps import parse_duration

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from updater.config.buildinfo import BuildInfo

TRUSTED_ROOT_ENV = "MUX_SIGSTORE_TRUSTED_ROOT"
POLICY_ENV = "MUX_POLICY_FILE"  # a development build's machine policy (tests)
DOWNLOAD_HOSTS_ENV = "MUX_GITHUB_DOWNLOAD_HOSTS"
CHECK_INTERVAL_ENV = "MUX_UPDATE_CHECK_INTERVAL"
RING_ENV = "MUX_UPDATE_RING"
TUF_ROOT_ENV = "MUX_TUF_ROOT"  # a TUF root.json to read releases with (tests, development)
TUF_METADATA_URL_ENV = "MUX_TUF_METADATA_URL"  # the GitHub source's TUF metadata (tests)
# How far ahead of the system clock TUF expiry is judged (tests move it forward; it only makes
# metadata expire sooner, never later, so it cannot lift a freeze).
TUF_CLOCK_AHEAD_ENV = "MUX_TUF_CLOCK_AHEAD"
RESTART_TIMEOUT_ENV = "MUX_RESTART_TIMEOUT"
CI_ENV = "CI"  # set (not empty) by CI runners: no background work (Settings.ci)
SOURCE_ENV = "MUX_UPDATE_SOURCE"
SOURCE_ENV_ALIAS = "MUX_DOWNLOAD_URL"  # install.sh's older name for it
CONFIG_NAME = "config.toml"  # in <user config dir>/mux/
NO_FLAGS = Requested()  # a command given none of the flags that change its settings


def load(
    environ: Mapping[str, str] | None = None,
    *,
    build_repo: str = "",
    flags: Requested = NO_FLAGS,
    policy_file: str | None = None,
    development: bool = False,
    config_file: str | None = None,
    remembered: bool = False,
) -> Settings:
    """The settings for one command: ``environ`` (default: the process's) and its ``flags``,
    under the machine policy at ``policy_file`` (the build's; None: no policy, as for
    mux-release). A ``development`` build takes ``MUX_POLICY_FILE`` instead when it is set.
    ``config_file``: the user's config.toml (None: none read, as for mux-release).
    ``remembered``: with no source from the flags or the environment, take the one the
    install's record remembers (:mod:`updater.config.remembered`)."""
    environ = os.environ if environ is None else environ
    settings = _from_environment(environ, build_repo)
    if config_file is not None:
        settings = _with_user_config(settings, read_config_file(config_file))
    flags = flags._replace(trust_keys=tuple(flags.trust_keys))
    settings = _with_flags(settings, flags)
    if remembered and settings.source_set_by is None:
        settings = _with_remembered_source(settings, development=development)
    # The machine policy is merged here, last, so that it can overrule both.
    policy_file, fixed = policy_to_read(policy_file, development=development, environ=environ)
    policy = None if policy_file is None else read_policy_file(policy_file, fixed=fixed)
    if policy is None:
        return settings
    settings = policy.apply(settings, environ=environ, flags=flags, build_repo=build_repo)
    return settings._replace(source_set_by=policy.path) if policy.source else settings


def read_config_file(path: str) -> Any:
    """The user's config file at ``path`` (a :class:`~updater.config.userconfig.UserConfig`),
    or None when there is none. Raises :class:`ConfigError` for a file that cannot be used."""
    if not os.path.lexists(path):
        return None
    # deferred (+28 ms, 24 modules, on the cached check): tomllib and the shared rules,
    # for a user who wrote a config file
    from updater.config.userconfig import read_user_config

    return read_user_config(path)


def policy_to_read(
    policy_file: str | None, *, development: bool, environ: Mapping[str, str]
) -> tuple[str | None, bool]:
    """The machine policy a command reads (the build's ``policy_file``; a development
    build's ``MUX_POLICY_FILE`` when set), and whether it is the build's own path."""
    if development and environ.get(POLICY_ENV):
        return environ[POLICY_ENV], False
    return policy_file, True


def read_policy_file(path: str, *, fixed: bool) -> Any:
    """The machine policy at ``path`` (a :class:`~updater.config.policy.MachinePolicy`), or
    None when there is none. Raises :class:`PolicyError` for one that cannot be trusted."""
    if not os.path.lexists(path):
        return None
    # deferred (+77 ms, 53 modules, on the cached check): tomllib and the policy's rules,
    # for a machine that has a policy file
    from updater.config.policy import read_policy

    return read_policy(path, fixed=fixed)


def load_for(
    build: BuildInfo,
    environ: Mapping[str, str] | None = None,
    *,
    user_config: bool = True,
    **flags: Any,
) -> Settings:
    """:func:`load` for a command of ``build``: its baked repository, the user's config file
    (:func:`user_config_path`; ``user_config=False``: not read, for a server whose config
    file is broken and that still watches its link), the machine policy file it was built to
    read (a development build: ``MUX_POLICY_FILE``), and the command's ``flags`` (``source``,
    ``home``, ``trust_keys``, ``skip_attestation``, ``allow_expired_feed``). The one way a
    command of mux loads its settings."""
    return load(
        environ,
        build_repo=build.repo,
        policy_file=build.policy_file,
        development=build.development,
        config_file=user_config_path() if user_config else None,
        remembered=True,
        flags=Requested(**flags),
    )


# RFC 6750's b64token, what an "Authorization: Bearer" header carries: GitHub's tokens
# (ghp_, github_pat_, ghs_..., the old 40 hex digits) are all in it. install.sh refuses the
# same characters (docs/contracts.md).
TOKEN_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/")


def check_token(token: str, variable: str) -> str:
    """``token`` when it is a bearer token (:data:`TOKEN_ALPHABET`, then ``=`` padding);
    else a :class:`UsageError` naming ``variable`` and what is wrong, never the value (an
    error line ends up in ``--json``, in the check cache, in a server's log)."""
    body = token.rstrip("=")
    bad = next((c for c in body if c not in TOKEN_ALPHABET), None)
    if body and bad is None:
        return token
    if bad is None:
        what = "nothing but '='"
    elif bad in "\r\n":
        what = "a line break (a trailing newline from a file or a CI secret?)"
    elif bad.isspace():
        what = "white space"
    elif ord(bad) < 32 or ord(bad) == 127:
        what = "a control character"
    else:
        what = "a character outside A-Z a-z 0-9 - . _ ~ + / (and = at its end)"
    raise UsageError(
        f"{variable} is not a token HTTP can carry: it holds {what}; nothing was sent",
        hint=f"set {variable} to the token alone (its value is never shown)",
    )


def user_config_path() -> str:
    """``<user config dir>/mux/config.toml`` (platformdirs' ``user_config_dir("mux")``)."""
    return os.path.join(user_config_dir(), CONFIG_NAME)


def _with_user_config(settings: Settings, config: Any) -> Settings:
    """What the user's config file (a :class:`~updater.config.userconfig.UserConfig`, or None
    when it went away since we looked) sets."""
    if config is None:
        return settings
    changes: dict[str, Any] = {"config_file": config.path}
    for name in ("auto_install", "download_on_metered"):
        value = getattr(config, name)
        if value is not None:
            changes[name] = value
            changes[f"{name}_set_by"] = config.path
    return settings._replace(**changes)


def require_updates(settings: Settings, *, action: str) -> None:
    """Refuse ``action`` (``"check"``: ``mux update --check``; ``"update"``: everything else
    ``mux update`` does) when the machine policy's ``updates`` does not allow it (exit 4)."""
    allowed = {"enabled": ("check", "update"), "check-only": ("check",)}
    if action in allowed.get(settings.updates, ()):
        return

    what = "checking for updates" if action == "check" else "mux update"
    only = "; mux update --check still works" if settings.updates == "check-only" else ""
    raise PolicyError(
        f'the machine policy {settings.policy_file} sets updates = "{settings.updates}": '
        f"{what} is turned off on this machine{only}",
        hint="its administrator updates mux here",
    )


def _from_environment(environ: Mapping[str, str], build_repo: str) -> Settings:
    defaults = Settings()

    def text(name: str) -> str | None:
        return environ.get(name) or None

    def number(name: str, default: float) -> float:
        try:
            value = float(environ.get(name) or default)
        except ValueError:
            return default
        return value if 0 <= value < float("inf") else default  # not negative, NaN or infinite

    def positive(name: str, default: float) -> float:
        value = number(name, default)
        return value if value > 0 else default

    # Strings, not pathlib: pathlib (with urllib.parse and ipaddress, which it imports) was a
    # tenth of a cached check that has one of these set; the layout works on strings.
    def path(*names: str, expand: bool = True) -> str | None:
        name = next((name for name in names if environ.get(name)), None)
        if name is None:
            return None
        value = environ[name]
        if not expand:
            return value
        expanded = os.path.expanduser(value)
        if expanded.startswith("~"):
            # A `~user` with no home: read as a relative folder, a link or an install would
            # land below the working directory.
            raise UsageError(
                f"{name}={printable(value, 80)}: there is no home folder to expand "
                f"{printable(value.split('/')[0], 40)} to",
                hint=f"set {name} to an absolute path",
            )
        return expanded

    source_variable, source = _source_variable(environ)
    return Settings(
        source=source or DEFAULT_SOURCE,
        source_set_by=source_variable,
        github=GitHubSettings(
            repo=text("MUX_REPO") or build_repo,
            web_url=text("MUX_GITHUB_URL"),
            api_url=text("MUX_GITHUB_API_URL"),
            token=text("MUX_GITHUB_TOKEN") or text("GITHUB_TOKEN"),
            token_variable="MUX_GITHUB_TOKEN" if text("MUX_GITHUB_TOKEN") else "GITHUB_TOKEN",
            download_hosts=tuple((environ.get(DOWNLOAD_HOSTS_ENV) or "").replace(",", " ").split()),
        ),
        http=HttpSettings(
            timeout=number("MUX_HTTP_TIMEOUT", defaults.http.timeout),
            retries=int(number("MUX_HTTP_RETRIES", defaults.http.retries)),
            backoff=number("MUX_HTTP_BACKOFF", defaults.http.backoff),
            deadline=positive("MUX_HTTP_DEADLINE", defaults.http.deadline),
            min_speed=number("MUX_HTTP_MIN_SPEED", defaults.http.min_speed),
            speed_window=positive("MUX_HTTP_SPEED_WINDOW", defaults.http.speed_window),
        ),
        allow_expired_feed=environ.get("MUX_ALLOW_EXPIRED_FEED") == "1",
        no_delta=environ.get("MUX_NO_DELTA") == "1",
        sigstore_trusted_root=path(TRUSTED_ROOT_ENV, expand=False),
        target=text("MUX_TARGET"),
        home=path("MUX_HOME"),
        bin_dir=path("MUX_INSTALL_DIR", "XDG_BIN_HOME"),
        lock_timeout=number("MUX_LOCK_TIMEOUT", defaults.lock_timeout),
        smoke_test_timeout=number("MUX_SMOKE_TEST_TIMEOUT", defaults.smoke_test_timeout),
        server_url=text("MUX_SERVER_URL"),
        progress_bar=not environ.get("NO_COLOR") and environ.get("TERM") != "dumb",
        update_check_interval=_duration(text(CHECK_INTERVAL_ENV), defaults.update_check_interval),
        restart_timeout=positive(RESTART_TIMEOUT_ENV, defaults.restart_timeout),
        link_poll_interval=max(0.01, positive("MUX_LINK_POLL", defaults.link_poll_interval)),
        ci=bool(environ.get(CI_ENV)),
        ci_set_by=CI_ENV if environ.get(CI_ENV) else None,
        ring=_ring(text(RING_ENV)),
        tuf_root_file=text(TUF_ROOT_ENV),
        tuf_metadata_url=text(TUF_METADATA_URL_ENV),
        tuf_clock_ahead=max(0.0, _duration(text(TUF_CLOCK_AHEAD_ENV), 0.0)),
    )


def _source_variable(environ: Mapping[str, str]) -> tuple[str | None, str | None]:
    """``MUX_UPDATE_SOURCE``, else ``MUX_DOWNLOAD_URL`` (its older name, install.sh's): the
    variable that names the source, and its value. Both, naming different sources: refused."""
    source, old = environ.get(SOURCE_ENV) or None, environ.get(SOURCE_ENV_ALIAS) or None
    if source and old and source.rstrip("/") != old.rstrip("/"):
        raise UsageError(
            f"{SOURCE_ENV} and {SOURCE_ENV_ALIAS} name different sources",
            hint=f"set {SOURCE_ENV} alone; {SOURCE_ENV_ALIAS} is its older name",
        )
    if source:
        return SOURCE_ENV, source
    return (SOURCE_ENV_ALIAS, old) if old else (None, None)


def _with_remembered_source(settings: Settings, *, development: bool) -> Settings:
    """The source the install's record remembers, when it names one (a development checkout
    belongs to no install unless MUX_HOME or --home names one)."""
    home = settings.home
    if home is None and not development:
        home = install_home_of(running_package_folder())
    if home is None:
        return settings
    recorded = recorded_source(home)
    if recorded is None:
        return settings
    github = settings.github
    source = source_to_use(recorded, github_web=github.web_url, repo=github.repo)
    if source is None:
        return settings
    return settings._replace(source=source, source_set_by=os.path.join(home, RECORD_NAME))


def _ring(value: str | None) -> str:
    """``MUX_UPDATE_RING``: early, default or late; anything else is a usage error (a ring
    silently read as another would move the machine in every rollout)."""
    if value is None:
        return "default"
    if value not in ("early", "default", "late"):
        raise UsageError(
            f"{RING_ENV}={printable(value, 40)} is not a ring", hint="use early, default or late"
        )
    return value


def _duration(value: str | None, default: float) -> float:
    """``90``, ``90s``, ``15m``, ``6h``; a malformed or negative value is the default."""
    if value is None:
        return default

    try:
        seconds = parse_duration(value)
    except ValueError:
        return default
    return seconds if seconds >= 0 else default


def _with_flags(settings: Settings, flags: Requested) -> Settings:
    source, home = flags.source, flags.home
    return settings._replace(
        no_delta=flags.no_delta or settings.no_delta,
        source=source or settings.source,
        source_set_by="--source" if source else settings.source_set_by,
        carried=_carried(flags),
        home=os.fspath(home) if home is not None else settings.home,
        trust_keys=(*settings.trust_keys, *(trusted_key(key) for key in flags.trust_keys)),
        skip_attestation=flags.skip_attestation or settings.skip_attestation,
        allow_expired_feed=flags.allow_expired_feed or settings.allow_expired_feed,
    )


def _carried(flags: Requested) -> tuple[str, ...]:
    """The flags a next step must repeat: a bare ``mux update`` would not find them again."""
    carried: list[str] = []
    if flags.source:
        carried += ["--source", flags.source]
    if flags.home is not None:
        carried += ["--home", os.fspath(flags.home)]
    for key in flags.trust_keys:
        carried += ["--trust-key", key]
    if flags.allow_expired_feed:
        carried.append("--allow-expired-feed")
    if flags.skip_attestation:
        carried.append("--insecure-skip-attestation")
    return tuple(carried)
