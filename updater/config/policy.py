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
  the token);
* ``auto_install`` (``"off"`` forbids background staging and automatic installs,
  ``"download"``, ``"compatible"`` or ``"all"`` forces them) and ``download_on_metered``: what a user's ``config.toml`` may set, fixed
  for everyone (:mod:`updater.config.strict` parses both files' values, once).
* ``pin`` (``"1.4"``: stay on 1.4.x), ``minimum_release_age`` (``"72h"``: a cooldown) and
  ``ring`` (``early``, ``default``, ``late``): where the machine stands in a release's
  lifecycle (:mod:`updater.core.lifecycle`).

A policy takes from users exactly the choices it makes, and no flag or environment
variable can loosen it: :func:`apply_policy` is the one place where it is merged into the
:class:`~updater.config.settings.Settings` (called last by :func:`updater.config.settings.load`), and every
conflict is a :class:`~updater.errors.PolicyError` (exit 4) naming the file and the setting.
A policy that cannot be trusted (writable by another user, or owned by anyone but root at
the fixed path), read or parsed, or that holds an unknown setting or value, is an error too:
mux fails closed, it never ignores a policy it cannot read.

This module is imported only when a policy file exists; ``tomllib`` with it
(:mod:`updater.config.strict`: the reading rules it shares with the user's config).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from updater.config.strict import (
    SHARED_SETTINGS,
    check_who_can_write,
    parse_toml,
    read_toml,
    refuse_unknown,
    setting_text,
    shared_values,
    shown,
)
from updater.errors import NetworkError, ParseError, PolicyError, printable
from updater.formats.lifecycle import MAX_RELEASE_AGE, RINGS, pin_parts
from updater.formats.minisign import PublicKey
from updater.timestamps import parse_duration
from updater.urls import check_url_scheme, github_api_for, parse_download_host

if TYPE_CHECKING:
    from updater.config.settings_record import Requested, Settings

POLICY_ENV = "MUX_POLICY_FILE"
UPDATES = ("enabled", "check-only", "disabled")
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
    *SHARED_SETTINGS,
    "pin",
    "minimum_release_age",
    "ring",
    "tuf_root",
    "tuf_metadata_url",
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
    auto_install: str | None = None  # one of strict.AUTO_INSTALL: "off" forbids, others force
    download_on_metered: bool | None = None
    pin: str | None = None  # "1.4": every mux here stays on 1.4.x
    minimum_release_age: float | None = None  # seconds: nothing younger is offered
    ring: str | None = None  # early | default | late
    tuf_root: str | None = None  # an absolute path to the root.json releases are read with
    tuf_metadata_url: str | None = None  # the GitHub source's TUF metadata
    fixed: bool = True  # at the build's path (root's), not a development MUX_POLICY_FILE

    def setting(self, name: str) -> str:
        """``name = <value>`` as the file says it, for messages."""
        return setting_text(name, getattr(self, name))

    def apply(
        self, settings: Settings, *, environ: Mapping[str, str], flags: Requested, build_repo: str
    ) -> Settings:
        """:func:`apply_policy` of this policy (what :func:`~updater.config.settings.load`
        calls, without importing this module until a policy file exists)."""
        return apply_policy(settings, self, environ=environ, flags=flags, build_repo=build_repo)


# -- reading ---------------------------------------------------------------------------------


def read_policy(path: str, *, fixed: bool) -> MachinePolicy | None:
    """The policy at ``path``; None when there is no file there.

    ``fixed``: the path the build names (only root may own it and the folders leading to
    it); otherwise a development build's ``MUX_POLICY_FILE`` (root or the user may).
    Raises :class:`PolicyError` for a policy that cannot be trusted, read or parsed.
    """
    owners = {0} if fixed else {0, os.geteuid()}
    who = "root" if fixed else "root or you"
    document = read_toml(path, owners=owners, who=who, unusable=lambda r: _unusable(path, r))
    return None if document is None else _validate(document, path)._replace(fixed=fixed)


def parse_policy(raw: bytes, path: str) -> MachinePolicy:
    """The policy in ``raw`` (TOML), validated; :class:`PolicyError` for anything else."""
    return _validate(parse_toml(raw, lambda reason: _unusable(path, reason)), path)


def _unusable(path: str, reason: str) -> PolicyError:
    return PolicyError(
        f"the machine policy {path} cannot be used: {reason}; updates are off until it is fixed",
        hint="ask its administrator to fix or remove it",
    )


def check_file_owner(path: str, info: os.stat_result, *, fixed: bool = True) -> None:
    """A file the policy names (its ``tuf_root``) is held to the policy's own rules: only
    root (``fixed``; else root or the user, as for ``MUX_POLICY_FILE``) can change it or a
    folder on the way to it."""
    owners = {0} if fixed else {0, os.geteuid()}
    who = "root" if fixed else "root or you"

    def unusable(reason: str) -> PolicyError:
        return PolicyError(
            f"the file {path} the machine policy names cannot be trusted: {reason}",
            hint="only root may be able to change it and the folders leading to it",
        )

    check_who_can_write(path, info, owners=owners, who=who, unusable=unusable)


def _validate(document: Mapping[str, Any], path: str) -> MachinePolicy:
    def unusable(reason: str) -> PolicyError:
        return _unusable(path, reason)

    refuse_unknown(document, KNOWN_SETTINGS, unusable)
    values: dict[str, Any] = shared_values(document, unusable)
    # In this order: a policy with several faults names the first.
    _read_source(document, path, values)
    _read_trust(document, path, values)
    _read_limits(document, path, values)
    return MachinePolicy(path=path, **values)


def _bad(document: Mapping[str, Any], path: str, name: str, expected: str) -> PolicyError:
    return _unusable(path, f"{name} = {shown(document[name])} is not {expected}")


def _read_source(document: Mapping[str, Any], path: str, values: dict[str, Any]) -> None:
    """``updates`` and where releases come from: ``source`` and GitHub's addresses."""
    if "updates" in document:
        if document["updates"] not in UPDATES:
            raise _bad(document, path, "updates", " or ".join(f'"{u}"' for u in UPDATES))
        values["updates"] = document["updates"]
    if "source" in document:
        source = _source(document["source"])
        if source is None:
            expected = '"github", an https:// feed URL or an absolute feed directory'
            raise _bad(document, path, "source", expected)
        values["source"] = source
    for name in ("github_url", "github_api_url", "repo"):
        if name in document and values.get("source") != "github":
            raise _unusable(path, f'{name} goes with source = "github"')
    for name in ("github_url", "github_api_url"):
        if name in document:
            url = _url(document[name])
            if url is None:
                raise _bad(document, path, name, "an https:// URL")
            values[name] = url
    if "repo" in document:
        if not _is_repo(document["repo"]):
            raise _bad(document, path, "repo", "a GitHub repository (owner/name)")
        values["repo"] = document["repo"]


def _read_trust(document: Mapping[str, Any], path: str, values: dict[str, Any]) -> None:
    """What a release is trusted by: ``trusted_keys``, ``allow_expired_feed``,
    ``download_hosts``."""
    if "trusted_keys" in document:
        keys = _strings(document["trusted_keys"], MAX_TRUSTED_KEYS)
        if keys is None:
            expected = f"a list of at most {MAX_TRUSTED_KEYS} minisign public keys"
            raise _bad(document, path, "trusted_keys", expected)
        try:
            values["trusted_keys"] = tuple(PublicKey.parse(key).to_base64() for key in keys)
        except ParseError as exc:
            raise _unusable(path, f"trusted_keys: {exc.message}") from None
    if "allow_expired_feed" in document:
        if not isinstance(document["allow_expired_feed"], bool):
            raise _bad(document, path, "allow_expired_feed", "true or false")
        values["allow_expired_feed"] = document["allow_expired_feed"]
    if "download_hosts" in document:
        hosts = _strings(document["download_hosts"], MAX_DOWNLOAD_HOSTS)
        checked = [parse_download_host(h) for h in hosts] if hosts is not None else None
        if checked is None or None in checked:
            expected = "a list of exact host names (host or host:port)"
            raise _bad(document, path, "download_hosts", expected)
        values["download_hosts"] = tuple(h for h in checked if h)


def _read_limits(document: Mapping[str, Any], path: str, values: dict[str, Any]) -> None:
    """Which releases are taken: ``pin``, ``minimum_release_age``, ``ring``, and the TUF
    repository's root and address."""
    if "pin" in document:
        try:
            pin_parts(document["pin"])
        except ParseError:
            raise _bad(document, path, "pin", 'a version prefix such as "1.4"') from None
        values["pin"] = document["pin"]
    if "minimum_release_age" in document:
        age = document["minimum_release_age"]
        # One number and a unit, as install.sh reads it too (no "1h30m", no fractions).
        strict = isinstance(age, str) and re.fullmatch(r"[0-9]{1,8}[smhdw]?", age) is not None
        seconds = parse_duration(age) if strict else -1.0
        if not 0 < seconds <= MAX_RELEASE_AGE:
            expected = 'a duration such as "72h" (at most 366 days)'
            raise _bad(document, path, "minimum_release_age", expected)
        values["minimum_release_age"] = seconds
    if "ring" in document:
        if document["ring"] not in RINGS:
            raise _bad(document, path, "ring", " or ".join(f'"{r}"' for r in RINGS))
        values["ring"] = document["ring"]
    if "tuf_root" in document:
        root = document["tuf_root"]
        if not isinstance(root, str) or not os.path.isabs(root) or len(root) > 2000:
            raise _bad(document, path, "tuf_root", "the absolute path of a TUF root.json")
        values["tuf_root"] = root
    if "tuf_metadata_url" in document:
        if values.get("source") != "github":
            raise _unusable(path, 'tuf_metadata_url goes with source = "github"')
        url = _url(document["tuf_metadata_url"])
        if url is None:
            raise _bad(document, path, "tuf_metadata_url", "an https:// URL")
        values["tuf_metadata_url"] = url


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
        for variable in ("MUX_TUF_ROOT", "MUX_TUF_METADATA_URL"):
            if environ.get(variable):
                raise refuse("source", f"{variable} cannot replace its TUF repository")
        settings = settings._replace(
            source=pinned,
            trust_keys=(),
            skip_attestation=False,
            tuf_root_file=None,
            tuf_metadata_url=None,
        )
    if policy.tuf_root is not None:
        if environ.get("MUX_TUF_ROOT") and environ["MUX_TUF_ROOT"] != policy.tuf_root:
            raise refuse("tuf_root", "MUX_TUF_ROOT cannot replace it")
        settings = settings._replace(
            tuf_root_file=policy.tuf_root, tuf_root_owner="root" if policy.fixed else "user"
        )
    if policy.tuf_metadata_url is not None:
        settings = settings._replace(tuf_metadata_url=policy.tuf_metadata_url)

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
    if policy.ring is not None:
        _same_or_refuse(environ, "MUX_UPDATE_RING", policy.ring, "ring", refuse)
    return _with_shared(settings, policy)._replace(
        ring=policy.ring or settings.ring,
        pin=policy.pin,
        minimum_release_age=policy.minimum_release_age,
        github=github._replace(download_hosts=hosts),
        trust_keys=(*settings.trust_keys, *policy.trusted_keys),
        allow_expired_feed=allow_expired,
        updates=policy.updates,
        policy_file=policy.path,
    )


def _with_shared(settings: Settings, policy: MachinePolicy) -> Settings:
    """The policy's word on the settings a user's config.toml may make: it wins. A user's
    choice it overrules is said (``Settings.overruled``: the check shows it), not ignored."""
    overruled = list(settings.overruled)
    changes: dict[str, Any] = {}
    for name in SHARED_SETTINGS:
        fixed = getattr(policy, name)
        if fixed is None:
            continue
        mine, set_by = getattr(settings, name), getattr(settings, f"{name}_set_by")
        if set_by is not None and mine != fixed:
            overruled.append(
                f"{setting_text(name, mine)} in {set_by} has no effect: the machine policy "
                f"{policy.path} sets {setting_text(name, fixed)}"
            )
        changes[name] = fixed
        changes[f"{name}_set_by"] = policy.path
    return settings._replace(**changes, overruled=tuple(overruled))


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
