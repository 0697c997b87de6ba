"""The user's config.toml: read by the machine policy's strict rules, one parser of the keys
both may set, and the policy's word over it. The development mux run in this process
(tests/support/inprocess.py), files the tests own.

The same cases as the policy's bad files (tests/test_policy.py): each is one line naming the
file and what is wrong, for every command that reads it, never ignored.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.feeds import trusting, write_feed, write_release
from tests.support.inprocess import run_in_process
from updater.config import settings as mux_settings
from updater.config.policy import parse_policy
from updater.config.userconfig import read_user_config
from updater.errors import ConfigError, PolicyError


@pytest.fixture
def check_feed(tmp_path: Path) -> Path:
    root = tmp_path / "check-feed"
    write_release(root, "9.0.0")
    write_feed(root, [("v9.0.0", False)])
    return root


@pytest.fixture
def config(sandbox_env: dict[str, str]) -> Path:
    return Path(sandbox_env["XDG_CONFIG_HOME"]) / "mux" / "config.toml"


def write(path: Path, content: str | bytes, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    path.chmod(mode)
    return path


def one_error_line(result) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mux: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def check(env: dict[str, str], feed: Path, *extra: str):
    return run_in_process(["update", "--check", "--source", str(feed), *trusting(), *extra], env)


BAD_FILES = {
    "not TOML": ("auto_install = \n", "it is not valid TOML"),
    "a table": ('[auto_install]\nmode = "on"\n', 'auto_install = {"mode": "on"} is not'),
    "an unknown value": ('auto_install = "sometimes"\n', 'auto_install = "sometimes" is not "off"'),
    "a number": ("auto_install = 1\n", "auto_install = 1 is not"),
    "a string for a bool": ('download_on_metered = "yes"\n', 'download_on_metered = "yes" is not'),
    "an unknown setting": ('colour = "blue"\n', "'colour' is not a setting mux knows"),
    "a policy-only setting": ('updates = "disabled"\n', "'updates' is not a setting mux knows"),
    "not UTF-8": (b'auto_install = "\xff"\n', "not UTF-8"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_config_file_is_one_error_for_every_command_never_ignored(
    case: str, sandbox_env: dict[str, str], config: Path, check_feed: Path, tmp_path: Path
) -> None:
    content, expected = BAD_FILES[case]
    write(config, content)
    for result in (
        check(sandbox_env, check_feed),
        check(sandbox_env, check_feed, "--max-age", "1h"),  # the fast path reads it too
        run_in_process(["update", "--home", str(tmp_path / "home"), "--dry-run"], sandbox_env),
        run_in_process(["update", "--hold", "1d"], sandbox_env),
        run_in_process(["server", "restart", "--name", "nothing-here"], sandbox_env),
    ):
        line = one_error_line(result)
        assert f"the config file {config} cannot be used: " in line, line
        assert expected in line, line


def test_json_callers_get_the_error_as_json(
    sandbox_env: dict[str, str], config: Path, check_feed: Path
) -> None:
    write(config, 'auto_install = "sometimes"\n')
    result = check(sandbox_env, check_feed, "--json")
    assert result.returncode == 1
    error = json.loads(result.stdout)["error"]
    assert error["message"].startswith(f"the config file {config}") and error["kind"] == "config"


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("huge", "larger than 65536 bytes"),
        ("fifo", "not a regular file"),
        ("dangling", "a symbolic link to nothing"),
        ("group-writable", "is writable by its group"),
        ("folder-writable", "is writable by other users"),
    ],
)
def test_a_config_file_that_cannot_be_trusted_is_refused(
    setup: str, expected: str, config: Path, tmp_path: Path
) -> None:
    config.parent.mkdir(parents=True, exist_ok=True)
    if setup == "huge":
        write(config, "# padding\n" * 10_000)
    elif setup == "fifo":
        os.mkfifo(config)
    elif setup == "dangling":
        config.symlink_to(tmp_path / "gone.toml")
    elif setup == "group-writable":
        write(config, 'auto_install = "all"\n', mode=0o664)
    else:
        write(config, 'auto_install = "all"\n')
        config.parent.chmod(0o777)
    try:
        with pytest.raises(ConfigError, match=expected):
            read_user_config(str(config))
    finally:
        config.parent.chmod(0o755)


def test_a_good_config_file_sets_what_it_says_and_the_check_shows_it(
    sandbox_env: dict[str, str], config: Path, check_feed: Path
) -> None:
    write(config, '# mine\nauto_install = "compatible"  # opt in\ndownload_on_metered = true\n')
    doc = json.loads(check(sandbox_env, check_feed, "--json").stdout)
    assert doc["auto_install"] == {
        "mode": "compatible",
        "set_by": str(config),
        "download_on_metered": True,
        "download_on_metered_set_by": str(config),
        "config_file": str(config),
        "ci_set_by": None,
        "refused": None,
    }
    config.unlink()
    doc = json.loads(check(sandbox_env, check_feed, "--json").stdout)
    assert doc["auto_install"]["mode"] == "off" and doc["auto_install"]["set_by"] is None


def test_the_policy_forbids_or_forces_and_says_what_it_overrules(
    sandbox_env: dict[str, str], config: Path, check_feed: Path, tmp_path: Path
) -> None:
    policy = write(tmp_path / "admin" / "policy.toml", 'auto_install = "off"\n')
    env = {**sandbox_env, "MUX_POLICY_FILE": str(policy)}
    write(config, 'auto_install = "all"\n')
    result = check(env, check_feed, "--json")
    doc = json.loads(result.stdout)
    assert (doc["auto_install"]["mode"], doc["auto_install"]["set_by"]) == ("off", str(policy))
    overruled = f'auto_install = "all" in {config} has no effect: the machine policy {policy} sets auto_install = "off"'
    assert overruled in doc["notes"]
    assert f"note: {overruled}" in check(env, check_feed).stdout
    write(policy, 'auto_install = "compatible"\ndownload_on_metered = false\n')
    config.unlink()  # forced even for a user with no config at all
    doc = json.loads(check(env, check_feed, "--json").stdout)
    assert (doc["auto_install"]["mode"], doc["auto_install"]["set_by"]) == (
        "compatible",
        str(policy),
    )
    assert doc["auto_install"]["download_on_metered_set_by"] == str(policy)
    # Nothing overruled now (a checkout is told that it is no install: not the policy's word)
    assert [note for note in doc["notes"] if "development checkout" not in note] == []


def test_one_parser_reads_the_shared_settings_for_both_files(tmp_path: Path) -> None:
    """The same value is refused with the same words by the policy and the user's config."""
    for text, words in (
        (
            'auto_install = "sometimes"\n',
            'auto_install = "sometimes" is not "off" or "download" or "compatible" or "all"',
        ),
        ("download_on_metered = 1\n", "download_on_metered = 1 is not true or false"),
    ):
        with pytest.raises(PolicyError) as by_policy:
            parse_policy(text.encode(), "policy.toml")
        config = write(tmp_path / "c" / "config.toml", text)
        with pytest.raises(ConfigError) as by_config:
            read_user_config(str(config))
        assert words in by_policy.value.message and words in by_config.value.message
    for mode in ("off", "compatible", "all"):
        text = f'auto_install = "{mode}"\n'
        config = write(tmp_path / "c" / "config.toml", text)
        assert parse_policy(text.encode(), "p").auto_install == mode
        read = read_user_config(str(config))
        assert read is not None and read.auto_install == mode


def test_without_a_config_file_the_defaults_hold_and_nothing_is_parsed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "nothing"))
    loaded = mux_settings.load(config_file=mux_settings.user_config_path())
    assert (loaded.auto_install, loaded.download_on_metered, loaded.config_file) == (
        "off",
        False,
        None,
    )
    assert mux_settings.user_config_path() == str(tmp_path / "nothing" / "mux" / "config.toml")
