"""updater.config.strict: the one strict reading of mux's TOML files (the machine policy and the
user's config): who may write them, what they may say, each refusal one line naming why."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from updater.config.strict import (
    parse_toml,
    read_toml,
    refuse_unknown,
    setting_text,
    shared_values,
    shown,
)
from updater.errors import MuxError


class Unusable(MuxError):
    pass


def unusable(reason: str) -> MuxError:
    return Unusable(f"the file is unusable: {reason}")


def read(path: Path) -> dict | None:
    return read_toml(str(path), owners={os.geteuid()}, who="you", unusable=unusable)


def test_a_file_of_its_owner_is_read_and_no_file_is_none(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    path = tmp_path / "config.toml"
    assert read(path) is None
    path.write_text('auto_install = "compatible"\n')
    path.chmod(0o644)
    assert read(path) == {"auto_install": "compatible"}


@pytest.mark.parametrize(
    ("raw", "words"),
    [(b"\xff\xfe", "not UTF-8"), (b"auto_install = ", "not valid TOML"), (b"a = 1\na = 2", "TOML")],
)
def test_what_is_not_toml_is_refused(raw: bytes, words: str) -> None:
    with pytest.raises(Unusable, match=words):
        parse_toml(raw, unusable)


def test_a_file_others_can_change_is_refused(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    path = tmp_path / "config.toml"
    path.write_text("")
    path.chmod(0o666)
    with pytest.raises(Unusable, match="writable by other users"):
        read(path)
    path.chmod(0o664)
    with pytest.raises(Unusable, match="writable by its group"):
        read(path)
    path.chmod(0o644)
    tmp_path.chmod(0o777)
    with pytest.raises(Unusable, match=f"{tmp_path} is writable by other users"):
        read(path)
    tmp_path.chmod(0o1777)  # sticky, as /tmp: others cannot replace what is in it
    assert read(path) == {}
    tmp_path.chmod(0o755)
    with pytest.raises(Unusable, match="owned by uid"):
        read_toml(str(path), owners={os.geteuid() + 1}, who="root", unusable=unusable)


def test_a_link_to_nothing_is_not_no_file(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    (tmp_path / "config.toml").symlink_to(tmp_path / "gone.toml")
    with pytest.raises(Unusable, match="symbolic link to nothing"):
        read(tmp_path / "config.toml")


def test_unknown_settings_and_bad_values_are_named() -> None:
    with pytest.raises(Unusable, match="'colour' is not a setting mux knows"):
        refuse_unknown({"auto_install": "off", "colour": 1}, ("auto_install",), unusable)
    assert shared_values({"auto_install": "all", "download_on_metered": False}, unusable) == {
        "auto_install": "all",
        "download_on_metered": False,
    }
    with pytest.raises(Unusable, match='auto_install = "sometimes" is not "off" or'):
        shared_values({"auto_install": "sometimes"}, unusable)
    with pytest.raises(Unusable, match="download_on_metered = 1 is not true or false"):
        shared_values({"download_on_metered": 1}, unusable)


def test_values_are_shown_as_a_file_says_them() -> None:
    assert setting_text("download_on_metered", True) == "download_on_metered = true"
    assert setting_text("pin", "1.4") == 'pin = "1.4"'
    assert setting_text("keys", ("a", "b")) == 'keys = ["a", "b"]'
    assert len(shown("x" * 500)) <= 83 and "\x1b" not in shown("\x1b[31m")
