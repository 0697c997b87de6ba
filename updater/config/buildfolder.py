"""Where a build folder keeps its build info: the one rule (docs/contracts.md).

A release build folder has its ``mux`` executable at the top and its build info at
``<code folder>/updater/_build_info.json``, exactly one folder below the top (``_internal/``
in a PyInstaller build, ``lib/`` in the stand-in). The running mux, the layout's reader,
``mux-release package`` and the inventory of a build all find it by this rule.

Stdlib only, and nothing but :mod:`os` and :mod:`sys`: the first thing every mux process does
(:mod:`updater.install.inuse`) uses it.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Iterable

BUILD_INFO_NAME = "_build_info.json"
CODE_PACKAGE = "updater"  # the folder of mux's own modules inside a build's code folder

# This ``updater`` package's folder, wherever it was loaded from.
PACKAGE_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The running mux's package folder, which says which build this process is: its build info is
# there, and the install and version it runs from are above it. Everything that asks reads it
# through the functions below, never a copy, so that this one name is the whole of that
# identity.
running_package = PACKAGE_FOLDER


def running_package_folder() -> str:
    """The running mux's ``updater/`` folder (:data:`running_package`)."""
    return running_package


def running_build_info() -> str:
    """Where the running mux's build info is (a development checkout has none there)."""
    return os.path.join(running_package, BUILD_INFO_NAME)


def running_build_folder() -> str | None:
    """The folder of the release build this process was started from (``…/versions/<v>``),
    whether or not it is still there; None for a development checkout or a Python install.

    Derived from where the modules were loaded when the process started, so it never follows
    the ``<bin>/mux`` link, which ``mux update`` may have moved since.
    """
    if not getattr(sys, "frozen", False):
        return None
    return os.path.dirname(os.path.dirname(running_package))


def is_build_info(relative: str) -> bool:
    """``relative``, a ``/``-separated path inside a build folder, is where the build info
    belongs (``<code folder>/updater/_build_info.json``)."""
    parts = relative.split("/")
    return (
        len(parts) == 3
        and parts[0] not in ("", ".", "..")
        and parts[1:] == [CODE_PACKAGE, BUILD_INFO_NAME]
    )


def the_build_info(relatives: Iterable[str]) -> str | None:
    """Of the ``/``-separated paths a build folder holds, its build info: there must be
    exactly one ``updater/_build_info.json`` anywhere in it, where :func:`is_build_info`
    puts it (a second copy, or one elsewhere, and which one is the build's cannot be told)."""
    found = [r for r in relatives if r.endswith(f"/{CODE_PACKAGE}/{BUILD_INFO_NAME}")]
    return found[0] if len(found) == 1 and is_build_info(found[0]) else None


def build_infos_in(folder: str) -> list[str]:
    """Every ``updater/_build_info.json`` in the build folder ``folder``, as ``/``-separated
    paths inside it (links are not followed)."""
    relatives = []
    for dirpath, dirnames, filenames in os.walk(folder):
        if BUILD_INFO_NAME in filenames and os.path.basename(dirpath) == CODE_PACKAGE:
            path = os.path.join(dirpath, BUILD_INFO_NAME)
            if os.path.isfile(path) and not os.path.islink(path):
                relatives.append(os.path.relpath(path, folder).replace(os.sep, "/"))
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
    return sorted(relatives)


def build_info_in(folder: str) -> str | None:
    """The build info file of the build folder ``folder`` (:func:`the_build_info`), or None."""
    found = the_build_info(build_infos_in(folder))
    return None if found is None else os.path.join(folder, *found.split("/"))
