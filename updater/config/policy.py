"""The machine policy: what an administrator decides for every mux on a machine.

A root-owned TOML file, ``/etc/mux/policy.toml`` unless the build names another path (its
build info's ``policy_file``; only a development build takes ``MUX_POLICY_FILE``). Its
settings (docs/contracts.md, "Machine policy"):

* ``updates``: ``"enabled"`` (default), ``"check-only"`` (``mux update --check`` only) or
  ``"disabled"`` (no check, no update);
* ``source``: the one source every mux here uses (``"github"``, a feed URL or directory),
  with ``github_url`` / ``github_api_url`` for a GitHub Enterprise server and ``repo`` for
  the repository there (an Enterprise mirror rarely has the build's ``owner/name``);
* ``trusted_keys``: minisign keys trusted besides the build's (for that mirror);
* ``allow_expired_feed``: ``true`` accepts an expired feed index (an air-gapped mirror);
  ``false`` refuses ``--allow-expired-feed``;
* ``download_hosts``: the extra hosts GitHub downloads may be redirected to (never given
  the token).

A policy takes from users exactly the choices it makes, and no flag or environment
variable can loosen it: :func:`apply_policy` is the one place where it is merged into the
:class:`~updater.config.settings.Settings` (called last by :func:`updater.config.settings.load`), and every
conflict is a :class:`~updater.errors.PolicyError` (exit 4) naming the file and the setting.
A policy that cannot be trusted (writable by another user, or owned by anyone but root at
the fixed path), read or parsed, or that holds an unknown setting or value, is an error too:
mux fails closed, it never ignores a policy it cannot read.

This module is imported only when a policy file exists; ``tomllib`` with it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from updater.errors import NetworkError, ParseError, PolicyError, printable
from updater.files import NotReadable, read_small_file
from updater.formats.minisign import PublicKey
from updater.urls import check_url_scheme, github_api_for, parse_download_host

if TYPE_CHECKING:
    from updater.config.settings import Settings

POLICY_ENV = "MUX_POLICY_FILE"
UPDATES = ("enabled", "check-only", "disabled")
MAX_POLICY_BYTES = 64 * 1024
MAX_TRUSTED_KEYS = 8
MAX_DOWNLOAD_HOSTS = 16


KNOWN_SETTINGS = (
    "updates",
    "source",
    "github_url",
    "github_api_url",
    "repo",
    "trusted_keys",
    "allow_expired_feed",
    "download_hosts",
)


class MachinePolicy(NamedTuple):
    """A policy file, validated. ``None`` for a setting the file does not make."""

    path: str
    updates: str = "enabled"
    source: str | None = None
    github_url: str | None = None
    github_api_url: str | None = None
    repo: str | None = None
    trusted_keys: tuple[str, ...] = ()
    allow_expired_feed: bool | None = None
    download_hosts: tuple[str, ...] | None = None

    def setting(self, name: str) -> str:
        """``name = <value>`` as the file says it, for messages."""
        # deferred: this module is on a fast path (docs/build.md)
        import json

        value = getattr(self, name)
        if isinstance(value, bool):
            return f"{name} = {'true' if value else 'false'}"
        if isinstance(value, tuple):
            return f"{name} = [{', '.join(json.dumps(v) for v in value)}]"
        return f"{name} = {json.dumps(value)}"


# -- reading ---------------------------------------------------------------------------------


def read_policy(path: str, *, fixed: bool) -> MachinePolicy | None:
    """The policy at ``path``; None when there is no file there.

    ``fixed``: the path the build names (only root may own it and the folders leading to
    it); otherwise a development build's ``MUX_POLICY_FILE`` (root or the user may).
    Raises :class:`PolicyError` for a policy that cannot be trusted, read or parsed.
    """
    try:
        raw = read_small_file(
            path,
            MAX_POLICY_BYTES,
            inspect=lambda info: _check_who_can_write(path, info, fixed=fixed),
        )
    except NotReadable as exc:
        raise _unusable(path, str(exc)) from None
    if raw is None:
        if os.path.lexists(path):  # a link to nothing is not "no policy"
            raise _unusable(path, "it is a symbolic link to nothing")
        return None
    return parse_policy(raw, path)


def parse_policy(raw: bytes, path: str) -> MachinePolicy:
    """The policy in ``raw`` (TOML), validated; :class:`PolicyError` for anything else."""
    # deferred: this module is on a fast path (docs/build.md)
    import tomllib

    try:
        document = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise _unusable(path, "it is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise _unusable(path, f"it is not valid TOML ({printable(str(exc))})") from None
    return _validate(document, path)


def _unusable(path: str, reason: str) -> PolicyError:
    return PolicyError(
        f"the machine policy {path} cannot be used: {reason}; updates are off until it is fixed",
        hint="ask its administrator to fix or remove it",
    )


def _check_who_can_write(path: str, info: os.stat_result, *, fixed: bool) -> None:
    """Only root (or, for MUX_POLICY_FILE, the user) may be able to change the policy: the
    file and every folder on the way to it (and to its target, through a link)."""
    owners = {0} if fixed else {0, os.geteuid()}
    who = "root" if fixed else "root or you"

    def judge(name: str, entry: os.stat_result, *, folder: bool) -> None:
        if entry.st_uid not in owners:
            raise _unusable(path, f"{name} is owned by uid {entry.st_uid}, not by {who}")
        writable = entry.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if folder and entry.st_mode & stat.S_ISVTX:
            writable = 0  # a sticky folder (/tmp): others cannot replace what is in it
        if writable:
            kind = "other users" if entry.st_mode & stat.S_IWOTH else "its group"
            raise _unusable(path, f"{name} is writable by {kind} (chmod go-w {name})")

    judge(path, info, folder=False)
    seen: set[str] = set()
    for start in (os.path.abspath(path), os.path.realpath(path)):
        folder = os.path.dirname(start)
        while folder not in seen:
            seen.add(folder)
            try:
                judge(folder, os.stat(folder), folder=True)
            except OSError as exc:
                raise _unusable(path, f"{folder}: {exc.strerror}") from None
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent


def _validate(document: Mapping[str, Any], path: str) -> MachinePolicy:
    def bad(name: str, expected: str) -> PolicyError:
        # deferred: this module is on a fast path (docs/build.md)
        import json

        shown = printable(json.dumps(document[name], default=str), 80)
        return _unusable(path, f"{name} = {shown} is not {expected}")

    unknown = [name for name in document if name not in KNOWN_SETTINGS]
    if unknown:
        raise _unusable(
            path,
            f"{printable(unknown[0], 60)!r} is not a setting mux knows "
            f"(known: {', '.join(KNOWN_SETTINGS)})",
        )
    values: dict[str, Any] = {}
    if "updates" in document:
        if document["updates"] not in UPDATES:
            raise bad("updates", " or ".join(f'"{u}"' for u in UPDATES))
        values["updates"] = document["updates"]
    if "source" in document:
        source = _source(document["source"])
        if source is None:
            raise bad("source", '"github", an https:// feed URL or an absolute feed directory')
        values["source"] = source
    for name in ("github_url", "github_api_url", "repo"):
        if name in document and values.get("source") != "github":
            raise _unusable(path, f'{name} goes with source = "github"')
    for name in ("github_url", "github_api_url"):
        if name in document:
            url = _url(document[name])
            if url is None:
                raise bad(name, "an https:// URL")
            values[name] = url
    if "repo" in document:
        if not _is_repo(document["repo"]):
            raise bad("repo", "a GitHub repository (owner/name)")
        values["repo"] = document["repo"]
    if "trusted_keys" in document:
        keys = _strings(document["trusted_keys"], MAX_TRUSTED_KEYS)
        if keys is None:
            raise bad("trusted_keys", f"a list of at most {MAX_TRUSTED_KEYS} minisign public keys")

        try:
            values["trusted_keys"] = tuple(PublicKey.parse(key).to_base64() for key in keys)
        except ParseError as exc:
            raise _unusable(path, f"trusted_keys: {exc.message}") from None
    if "allow_expired_feed" in document:
        if not isinstance(document["allow_expired_feed"], bool):
            raise bad("allow_expired_feed", "true or false")
        values["allow_expired_feed"] = document["allow_expired_feed"]
    if "download_hosts" in document:
        hosts = _strings(document["download_hosts"], MAX_DOWNLOAD_HOSTS)

        checked = [parse_download_host(h) for h in hosts] if hosts is not None else None
        if checked is None or None in checked:
            raise bad("download_hosts", "a list of exact host names (host or host:port)")
        values["download_hosts"] = tuple(h for h in checked if h)
    return MachinePolicy(path=path, **values)


def _source(value: object) -> str | None:
    if not isinstance(value, str) or not value or len(value) > 2000:
        return None
    if value == "github":
        return value
    if value.startswith(("https://", "http://")):
        return _url(value)
    return value.rstrip("/") or "/" if os.path.isabs(value) else None


def _is_repo(value: object) -> bool:
    """``owner/name`` as GitHub spells them: letters, digits, ``-``, ``_`` and ``.``."""
    # deferred: this module is on a fast path (docs/build.md)
    import re

    return (
        isinstance(value, str)
        and re.fullmatch(r"[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}", value) is not None
        and value.split("/")[1] not in (".", "..")
    )


def _url(value: object) -> str | None:
    if not isinstance(value, str) or len(value) > 2000:
        return None
    try:
        check_url_scheme(value)
    except (NetworkError, ValueError):
        return None
    return value.rstrip("/")


def _strings(value: object, limit: int) -> list[str] | None:
    if not isinstance(value, list) or len(value) > limit:
        return None
    if not all(isinstance(item, str) and item for item in value):
        return None
    return list(value)


# -- merging -----------------------------------------------------------------------------------


class Requested(NamedTuple):
    """What the user asked for on the command line (flags), which the policy judges."""

    source: str | None = None
    trust_keys: tuple[str, ...] = ()
    skip_attestation: bool = False
    allow_expired_feed: bool = False


def apply_policy(
    settings: Settings,
    policy: MachinePolicy,
    *,
    environ: Mapping[str, str],
    flags: Requested,
    build_repo: str,
) -> Settings:
    """``settings`` (from the environment and the flags) under ``policy``: what it sets
    wins, and what would loosen it is refused with a :class:`PolicyError`."""

    def refuse(setting: str, what: str) -> PolicyError:
        return PolicyError(
            f"the machine policy {policy.path} sets {policy.setting(setting)}; {what}",
            hint="its administrator decides this for every mux on this machine",
        )

    github = settings.github
    if policy.source is not None:
        pinned = policy.source
        if flags.source and flags.source.rstrip("/") != pinned:
            raise refuse("source", f"--source {printable(flags.source, 100)} cannot change it")
        _same_or_refuse(environ, "MUX_UPDATE_SOURCE", pinned, "source", refuse)
        if pinned == "github":
            for name, variable, default in (
                ("github_url", "MUX_GITHUB_URL", "https://github.com"),
                # without github_api_url: the API of the policy's server, as mux finds it
                ("github_api_url", "MUX_GITHUB_API_URL", github_api_for(policy.github_url)),
            ):
                value = getattr(policy, name)
                setting = name if value is not None else "source"
                expected = value if value is not None else default
                _same_or_refuse(environ, variable, expected, setting, refuse)
            repo = policy.repo or build_repo
            if repo:
                setting = "repo" if policy.repo else "source"
                _same_or_refuse(environ, "MUX_REPO", repo, setting, refuse)
            github = github._replace(
                web_url=policy.github_url, api_url=policy.github_api_url, repo=repo or github.repo
            )
        if flags.trust_keys:
            raise refuse("source", "--trust-key cannot add a key for it")
        if flags.skip_attestation:
            raise refuse("source", "--insecure-skip-attestation cannot weaken its checks")
        if environ.get("MUX_SIGSTORE_TRUSTED_ROOT"):
            raise refuse("source", "MUX_SIGSTORE_TRUSTED_ROOT cannot replace the trust root")
        settings = settings._replace(source=pinned, trust_keys=(), skip_attestation=False)

    hosts = tuple(parse_download_host(h) or h for h in github.download_hosts)
    if policy.download_hosts is not None or policy.source is not None:
        allowed = policy.download_hosts or ()
        extra = [h for h in hosts if h not in allowed]
        if extra:
            setting = "download_hosts" if policy.download_hosts is not None else "source"
            raise refuse(setting, f"MUX_GITHUB_DOWNLOAD_HOSTS cannot add {extra[0]}")
        hosts = allowed
    allow_expired = settings.allow_expired_feed
    if policy.allow_expired_feed is False and (flags.allow_expired_feed or allow_expired):
        raise refuse("allow_expired_feed", "--allow-expired-feed cannot accept an expired feed")
    if policy.allow_expired_feed:
        allow_expired = True
    return settings._replace(
        github=github._replace(download_hosts=hosts),
        trust_keys=(*settings.trust_keys, *policy.trusted_keys),
        allow_expired_feed=allow_expired,
        updates=policy.updates,
        policy_file=policy.path,
    )


def _same_or_refuse(
    environ: Mapping[str, str],
    variable: str,
    expected: str,
    setting: str,
    refuse: Callable[[str, str], PolicyError],
) -> None:
    value = environ.get(variable)
    if value and value.rstrip("/") != expected:
        raise refuse(setting, f"{variable}={printable(value, 100)} cannot change it")
