"""updater.config.dirs gives exactly platformdirs' cache and runtime directories.

The fast paths compute them without importing platformdirs; every case here compares the two
answers on this machine's file system, and says which cases are answered without
platformdirs (the usual ones) and which are handed to it. macOS is compared with
platformdirs' own macOS rules (its ``MacOS`` class reads the same variables on any system).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import platformdirs
import platformdirs.macos
import pytest

from updater.config import dirs as _dirs

NOBODY = 65534


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Records each time _dirs hands a question to platformdirs."""
    calls: list[str] = []
    real = _dirs._platformdirs

    def counting():  # type: ignore[no-untyped-def]
        calls.append("platformdirs")
        return real()

    monkeypatch.setattr(_dirs, "_platformdirs", counting)
    yield calls


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., None]:
    """Set exactly these variables among the ones either side reads."""
    # platformdirs' last runtime fallback is runtime-<uid> in the temp dir: keep it here.
    temp = tmp_path / "temp"
    temp.mkdir(mode=0o700)
    monkeypatch.setenv("TMPDIR", str(temp))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)

    def set_only(**values: str | None) -> None:
        names = ("HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR", "ANDROID_DATA", "ANDROID_ROOT")
        for name in (*names, "XDG_STATE_HOME", "XDG_CONFIG_HOME"):
            value = values.get(name)
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)

    return set_only


def platformdirs_runtime() -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return platformdirs.user_runtime_dir("mux")


def private(path: Path, mode: int = 0o700) -> str:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)
    return str(path)


@pytest.mark.parametrize(
    ("cache_home", "home", "fast"),
    [
        ("/somewhere/cache", "/home/someone", True),
        (None, "/home/someone", True),
        (None, "/home/someone/", True),
        (None, "/", True),
        ("relative/cache", "/home/someone", True),  # a relative XDG_CACHE_HOME is ignored
        (None, "relative-home", False),
        (None, None, False),
    ],
)
def test_the_cache_dir_is_platformdirs(
    env: Callable[..., None], asked: list[str], cache_home: str | None, home: str | None, fast: bool
) -> None:
    env(XDG_CACHE_HOME=cache_home, HOME=home)
    assert _dirs.user_cache_dir() == platformdirs.user_cache_dir("mux", appauthor=False)
    assert asked == ([] if fast else ["platformdirs"])


@pytest.mark.parametrize(
    ("xdg", "home", "fast"),
    [
        ("/somewhere/xdg", "/home/someone", True),
        (None, "/home/someone", True),
        ("relative/xdg", "/home/someone", True),  # a relative XDG_*_HOME is ignored
        (None, "relative-home", False),
        (None, None, False),
    ],
)
def test_the_state_and_config_dirs_are_platformdirs(
    env: Callable[..., None], asked: list[str], xdg: str | None, home: str | None, fast: bool
) -> None:
    """Where the user's update state and config.toml live (the cached check reads both)."""
    env(XDG_STATE_HOME=xdg and xdg + "/state", XDG_CONFIG_HOME=xdg and xdg + "/config", HOME=home)
    assert _dirs.user_state_dir() == platformdirs.user_state_dir("mux", appauthor=False)
    assert _dirs.user_config_dir() == platformdirs.user_config_dir("mux", appauthor=False)
    assert asked == ([] if fast else ["platformdirs", "platformdirs"])


def test_an_android_looking_environment_is_left_to_platformdirs(
    env: Callable[..., None], asked: list[str]
) -> None:
    env(HOME="/home/someone", ANDROID_DATA="/data", ANDROID_ROOT="/system")
    assert _dirs.user_cache_dir() == platformdirs.user_cache_dir("mux", appauthor=False)
    assert asked == ["platformdirs"]


def runtime_cases(tmp: Path) -> list[tuple[str, str | None, bool]]:
    """(case, XDG_RUNTIME_DIR, answered without platformdirs)."""
    good = private(tmp / "run" / "good")
    loose = private(tmp / "run" / "loose", 0o755)
    link = tmp / "run" / "link"
    link.symlink_to(good)
    shared = tmp / "shared"
    private(shared, 0o777)  # writable by all, not sticky
    below_shared = private(shared / "run")
    sticky = tmp / "sticky"
    private(sticky, 0o1777)
    below_sticky = private(sticky / "run")
    foreign_parent = tmp / "foreign"
    private(foreign_parent, 0o755)
    below_foreign = private(foreign_parent / "run")
    foreign = private(tmp / "run" / "foreign")
    if os.geteuid() == 0:
        os.chown(foreign_parent, NOBODY, NOBODY)
        os.chown(foreign, NOBODY, NOBODY)
    linked_parent = tmp / "linked"
    linked_parent.symlink_to(tmp / "run")
    return [
        ("a private directory", good, True),
        ("below a sticky shared folder", below_sticky, True),
        ("a trailing slash", good + "/", False),
        ("a dot in it", str(tmp / "run") + "/./good", False),
        ("group and others may read it", loose, False),
        ("a symlink to a private directory", str(link), False),
        ("below a folder everyone may write", below_shared, False),
        ("below another user's folder", below_foreign, os.geteuid() != 0),
        ("another user's directory", foreign, os.geteuid() != 0),
        ("below a symlink", str(linked_parent / "good"), False),
        ("missing", str(tmp / "run" / "missing"), False),
        ("relative", "relative/run", None),  # like unset: the platform's default
        ("unset", None, None),
    ]


def test_the_runtime_dir_is_platformdirs(
    env: Callable[..., None], asked: list[str], tmp_path: Path
) -> None:
    default = f"/run/user/{os.geteuid()}"
    default_is_fast = _dirs._private_directory(default)
    for case, runtime, fast in runtime_cases(tmp_path):
        asked.clear()
        env(HOME="/home/someone", XDG_RUNTIME_DIR=runtime)
        assert _dirs.user_runtime_dir() == platformdirs_runtime(), case
        expect_fast = default_is_fast if fast is None else fast
        assert asked == ([] if expect_fast else ["platformdirs"]), case


def test_a_rejected_runtime_dir_falls_back_quietly(
    env: Callable[..., None], tmp_path: Path
) -> None:
    env(HOME="/home/someone", XDG_RUNTIME_DIR=private(tmp_path / "loose", 0o755))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning would fail here
        assert _dirs.user_runtime_dir() != str(tmp_path / "loose" / "mux")


@pytest.fixture
def macos(monkeypatch: pytest.MonkeyPatch) -> None:
    """platformdirs' macOS rules on this machine, for both sides."""
    monkeypatch.setattr(_dirs, "_MACOS", True)
    monkeypatch.setattr(platformdirs, "PlatformDirs", platformdirs.macos.MacOS)


@pytest.mark.usefixtures("macos")
def test_the_macos_dirs_are_platformdirs(
    env: Callable[..., None], asked: list[str], tmp_path: Path
) -> None:
    env(HOME="/Users/someone")
    assert _dirs.user_cache_dir() == platformdirs.user_cache_dir("mux", appauthor=False)
    assert _dirs.user_cache_dir() == "/Users/someone/Library/Caches/mux"
    for mine, theirs in (
        (_dirs.user_state_dir, platformdirs.user_state_dir),
        (_dirs.user_config_dir, platformdirs.user_config_dir),
    ):
        assert mine() == theirs("mux", appauthor=False)
        assert mine() == "/Users/someone/Library/Application Support/mux"
    assert _dirs.user_runtime_dir() == platformdirs_runtime()
    assert _dirs.user_runtime_dir() == "/Users/someone/Library/Caches/TemporaryItems/mux"
    assert asked == []
    env(HOME="/Users/someone", XDG_CACHE_HOME="/x/cache", XDG_RUNTIME_DIR=private(tmp_path / "r"))
    assert _dirs.user_cache_dir() == platformdirs.user_cache_dir("mux", appauthor=False)
    assert _dirs.user_runtime_dir() == platformdirs_runtime() == str(tmp_path / "r" / "mux")
    assert asked == []
    env(HOME="/Users/someone", XDG_RUNTIME_DIR=private(tmp_path / "loose", 0o755))
    assert _dirs.user_runtime_dir() == platformdirs_runtime()
    assert asked == ["platformdirs"]
