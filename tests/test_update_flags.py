"""Every flag of ``mux update`` is honoured or refused (issue 38, item 5).

One validation (:func:`updater.core.update_flags.refusal`) refuses each combination mux
would not honour, with one line naming both flags and exit 2, before anything is read or
changed: a table in-process, and the real command for the combinations the issue found
ignored (``--rollback --version`` once switched versions).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.processes import run_mux
from updater.core.update_flags import refusal


@pytest.mark.parametrize(
    ("given", "line"),
    [
        (["--rollback", "--version"], "--version does not go with --rollback"),
        (["--check", "--rollback"], "--check and --rollback do not go together"),
        (["--check", "--dry-run"], "--check and --dry-run do not go together"),
        (["--prune", "--check"], "--check and --prune do not go together"),
        (["--skip", "--hold"], "--skip and --hold do not go together"),
        (["--allow-downgrade"], "--allow-downgrade goes with --version X"),
        (["--check", "--allow-downgrade"], "--allow-downgrade goes with --version X"),
        (["--allow-withdrawn", "--pre"], "--allow-withdrawn goes with --version X"),
        (["--pre", "--version"], "--pre and --version do not go together"),
        (["--max-age"], "--max-age goes with --check"),
        (["--dry-run", "--max-age"], "--max-age does not go with --dry-run"),
        (["--check", "--exit-code"], "--exit-code does not go with --check"),
        (["--check", "--no-delta"], "--no-delta does not go with --check"),
        (["--rollback", "--source"], "--source does not go with --rollback"),
        (["--prune", "--trust-key"], "--trust-key does not go with --prune"),
        (["--hold", "--home"], "--home does not go with --hold"),
    ],
)
def test_a_combination_mux_would_not_honour_is_refused(given: list[str], line: str) -> None:
    refused = refusal(given)
    assert refused is not None and refused.message == line
    assert refused.exit_code == 2


@pytest.mark.parametrize(
    "given",
    [
        [],
        ["--json"],
        ["--check", "--max-age", "--json", "--source", "--trust-key", "--pre"],
        ["--version", "--allow-downgrade", "--allow-withdrawn", "--no-delta", "--exit-code"],
        ["--dry-run", "--version", "--allow-downgrade", "--source", "--home"],
        ["--rollback", "--home", "--exit-code", "--json"],
        ["--prune", "--home", "--json"],
        ["--skip", "--json"],
        ["--unhold"],
    ],
)
def test_what_mux_honours_passes(given: list[str]) -> None:
    assert refusal(given) is None


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--rollback", "--version", "9.9.9"], "--version does not go with --rollback"),
        (["--check", "--rollback"], "--check and --rollback do not go together"),
        (["--check", "--dry-run"], "--check and --dry-run do not go together"),
        (["--check", "--allow-downgrade"], "--allow-downgrade goes with --version X"),
        (["--allow-downgrade"], "--allow-downgrade goes with --version X"),
        (["--prune", "--check", "--json"], "--check and --prune do not go together"),
    ],
)
def test_the_command_refuses_in_one_line_and_changes_nothing(
    args: list[str], line: str, sandbox_env: dict[str, str], tmp_path: Path
) -> None:
    home = tmp_path / "mux-home"
    env = {**sandbox_env, "MUX_HOME": str(home), "MUX_UPDATE_SOURCE": str(tmp_path / "feed")}
    result = run_mux(["update", *args], env)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mux: error: {line} ("), lines
    assert not home.exists() and not (tmp_path / "feed").exists()
