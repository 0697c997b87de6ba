"""Where mux keeps its check cache and finds its servers: platformdirs' answers, computed
without importing it in the usual cases.

A cached ``mux update --check`` needs both directories, and importing platformdirs (with the
``pathlib``, ``tempfile``, ``shutil``, ``bz2``, ``lzma`` and ``random`` it pulls in) cost more
than the rest of that check. The answer, in the usual cases, is a few environment variables
and ``lstat`` calls. Each function here gives exactly what platformdirs gives when the case
is plain: Linux or macOS, an absolute ``HOME``, and for the runtime directory a private
directory (as platformdirs checks it: the user's own, mode 0700, not a symlink, below
folders nobody else can replace). In every other case it asks platformdirs itself, so an
unusual machine gets the same answer, only slower. tests/test_dirs.py holds the two to the
same answers across those cases, with the platformdirs version the lock pins.
"""

from __future__ import annotations

import os
import stat
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast paths
if TYPE_CHECKING:
    from types import ModuleType

APP = "mux"
_PRIVATE = 0o700  # what platformdirs (and XDG) require of a runtime directory


def user_cache_dir() -> str:
    """``platformdirs.user_cache_dir("mux", appauthor=False)``."""
    if _plain_platform():
        base = _xdg("XDG_CACHE_HOME") or _in_home("~/Library/Caches" if _MACOS else "~/.cache")
        if base is not None:
            return os.path.join(base, APP)
    return _platformdirs().user_cache_dir(APP, appauthor=False)


def user_runtime_dir() -> str:
    """``platformdirs.user_runtime_dir("mux")``; raises what it raises (``OSError``,
    ``RuntimeError``) when there is no usable directory. Its warnings about a rejected
    ``XDG_RUNTIME_DIR`` are not shown: falling back is the documented behaviour."""
    if _plain_platform():
        xdg = _xdg("XDG_RUNTIME_DIR")
        if xdg is not None:
            if _private_directory(xdg):
                return os.path.join(xdg, APP)
        elif _MACOS:
            base = _in_home("~/Library/Caches/TemporaryItems")
            if base is not None:
                return os.path.join(base, APP)
        else:
            default = f"/run/user/{os.geteuid()}"
            if _private_directory(default):
                return os.path.join(default, APP)
    # deferred: this module is on a fast path (docs/build.md)
    import warnings

    platformdirs = _platformdirs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return platformdirs.user_runtime_dir(APP)


_MACOS = sys.platform == "darwin"


def _plain_platform() -> bool:
    """Linux or macOS, and not an Android app (platformdirs has its own rules there)."""
    if _MACOS:
        return True
    if not sys.platform.startswith("linux") or hasattr(sys, "getandroidapilevel"):
        return False
    return "ANDROID_DATA" not in os.environ and "ANDROID_ROOT" not in os.environ


def _xdg(name: str) -> str | None:
    """The variable when it is an absolute path (platformdirs ignores it otherwise)."""
    value = os.environ.get(name, "")
    return value if value.startswith("/") else None


def _in_home(path: str) -> str | None:
    """``path`` (``~/...``) expanded as platformdirs expands it when ``HOME`` is absolute;
    None otherwise (it then looks the user up)."""
    return os.path.expanduser(path) if os.environ.get("HOME", "").startswith("/") else None


def _private_directory(path: str) -> bool:
    """True when platformdirs accepts ``path`` as a runtime directory as it is; False when
    it might not (it then decides, and may fall back elsewhere)."""
    if path != os.path.normpath(path) or path.startswith("//"):
        return False  # spelled in a way pathlib and os.path read differently: let it decide
    uid = os.geteuid()
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or info.st_mode & 0o777 != _PRIVATE:
        return False
    # Every folder above it: root's or the user's, a real folder (no symlink), and writable
    # by nobody else unless sticky (platformdirs' "runtime" policy).
    parent = os.path.dirname(path)
    walked = "/"
    for part in parent.split("/"):
        if not part:
            continue
        walked = os.path.join(walked, part)
        try:
            info = os.lstat(walked)
        except OSError:
            return False
        if info.st_uid not in (0, uid) or not stat.S_ISDIR(info.st_mode):
            return False  # a symlink, a file, or someone else's folder
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
            return False
    return True


def _platformdirs() -> ModuleType:
    # deferred: this module is on a fast path (docs/build.md)
    import platformdirs

    return platformdirs
