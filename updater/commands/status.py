"""``mux status``: gather what the view of the install shows (read only; nothing changes).

:func:`gather_status` reads the settings, the install (its link, its versions and why each
is kept, their size on disk), the user's config file and the machine policy, the user's skips
and holds, and takes the servers the CLI asked; :func:`updater.core.install_view.install_status`
makes the view of it. Whatever cannot be read is said in the view (``problem``), so that
``mux status`` works on the broken install one runs it to understand.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from updater.commands.userstate import read_state, state_path
from updater.config.buildinfo import BuildInfo
from updater.config.settings import (
    Settings,
    load,
    load_for,
    policy_to_read,
    read_config_file,
    read_policy_file,
    user_config_path,
)
from updater.core.install_view import FileFacts, InstallFacts, VersionFacts, with_removable
from updater.core.verdicts import ServerReport
from updater.errors import MuxError
from updater.install.layout import Layout, kept_versions, resolve_layout, tree_size


def gather_status(
    build: BuildInfo,
    reports: Sequence[ServerReport],
    servers: Sequence[Mapping[str, Any]],
    *,
    now: float,
) -> InstallFacts:
    """The facts of ``mux status`` for ``build``; ``reports`` the servers asked (they keep
    the versions they run from), ``servers`` the same as ``mux server status --json``."""
    settings = _settings(build)
    layout, home_problem = _layout(settings, build)
    state = _user_state(settings)
    return InstallFacts(
        link=layout.link if layout else None,
        link_target=_readlink(layout.link) if layout else None,
        active=layout.active_version() if layout else None,
        home=layout.home if layout else None,
        home_problem=home_problem,
        versions=_versions(layout, reports) if layout else (),
        source=settings.source,
        source_set_by=settings.source_set_by,
        config=_file(user_config_path(), read_config_file),
        policy=_policy_file(build),
        skipped=state[0],
        hold_until=state[1],
        servers=tuple(servers),
        now=now,
    )


def _settings(build: BuildInfo) -> Settings:
    """The settings every command reads; without the files that cannot be read (the view
    says why), and without the environment's when it is what is wrong."""
    try:
        return load_for(build)
    except MuxError:
        pass
    try:
        return load(build_repo=build.repo, development=build.development, remembered=True)
    except MuxError:
        return Settings()


def _layout(settings: Settings, build: BuildInfo) -> tuple[Layout | None, str | None]:
    try:
        return resolve_layout(settings.home, settings.bin_dir, development=build.development), None
    except MuxError as exc:
        return None, exc.message + (f"; {exc.hint}" if exc.hint else "")


def _readlink(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def _versions(layout: Layout, reports: Sequence[ServerReport]) -> tuple[VersionFacts, ...]:
    kept = [VersionFacts(k.version, k.kind, k.reason) for k in kept_versions(layout, reports)]
    installed = layout.installed_versions()
    sizes = {version: tree_size(layout.version_dir(version)) for version in installed}
    return with_removable(installed, kept, sizes)


def _user_state(settings: Settings) -> tuple[tuple[str, ...], float | None]:
    try:
        state = read_state(state_path(settings))
    except MuxError:
        return (), None
    return state.skipped, state.hold_until


def _sets(record: Any) -> tuple[tuple[str, Any], ...]:
    """What a file (its validated record) sets: each field whose value is not the default."""
    defaults = type(record)._field_defaults
    found = []
    for name in record._fields:
        value = getattr(record, name)
        if name in ("path", "fixed") or value == defaults.get(name):
            continue
        found.append((name, list(value) if isinstance(value, tuple) else value))
    return tuple(found)


def _file(path: str, read: Callable[[str], Any]) -> FileFacts:
    """A settings file as the view shows it: absent, what it sets, or why it is unusable."""
    try:
        record = read(path)
    except MuxError as exc:
        return FileFacts(path, exists=True, problem=exc.message)
    if record is None:
        return FileFacts(path)
    return FileFacts(path, exists=True, sets=_sets(record))


def _policy_file(build: BuildInfo) -> FileFacts:
    path, fixed = policy_to_read(
        build.policy_file, development=build.development, environ=os.environ
    )
    if path is None:
        return FileFacts(None)
    return _file(path, lambda where: read_policy_file(where, fixed=fixed))
