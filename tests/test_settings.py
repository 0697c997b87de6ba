"""updater.config.settings: what the environment may say, and how bad values are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.inprocess import run_in_process
from updater.config import settings as mux_settings
from updater.errors import UsageError


@pytest.mark.parametrize("variable", ["MUX_HOME", "MUX_INSTALL_DIR", "XDG_BIN_HOME"])
def test_a_path_variable_whose_home_cannot_be_expanded_is_one_usage_error(
    variable: str, sandbox_env: dict[str, str]
) -> None:
    """`~user` of a user with no home is refused, named, in one line and exit 2, before
    anything is read or written: read as a relative folder, the install or its link would
    land below the working directory."""
    env = {**sandbox_env, variable: "~no-such-user-of-mux/bin"}
    with pytest.raises(UsageError, match=f"{variable}=~no-such-user-of-mux/bin"):
        mux_settings.load(env)
    for args in (["update", "--check", "--max-age", "1h"], ["update"]):
        result = run_in_process(args, env)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.count("\n") == 1 and variable in result.stderr, result.stderr
    assert not (Path.cwd() / "~no-such-user-of-mux").exists()
