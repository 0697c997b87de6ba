"""The two entry points of ``mux update --check`` take the same flags and give the same answer.

``updater.__main__`` answers a check without typer (:func:`updater.cli.check.parse_check`);
anything else goes to typer. These tests hold :data:`CHECK_FLAGS` against typer's own
declaration of ``mux update`` and feed the same command lines to both readers.
"""

from __future__ import annotations

import pytest
import typer
from hypothesis import assume, given
from hypothesis import strategies as st
from typer.core import TyperGroup, TyperOption
from typer.testing import CliRunner

from updater.cli import app as cli_app
from updater.cli import check as cli_check
from updater.cli import update as cli_update
from updater.cli.check import BARE, CHECK_FLAGS, LIST, NOT_CHECK_FLAGS, CheckFlags, parse_check
from updater.core.update_flags import refusal


def typer_update_options() -> dict[str, TyperOption]:
    command = typer.main.get_command(cli_app.app)
    assert isinstance(command, TyperGroup)
    update = command.commands["update"]
    return {
        name: param
        for param in update.params
        if isinstance(param, TyperOption)
        for name in param.opts
        if name != "--help"
    }


def test_the_fast_path_knows_every_flag_typer_declares_and_no_other() -> None:
    declared = typer_update_options()
    assert set(CHECK_FLAGS) | set(NOT_CHECK_FLAGS) == set(declared)
    assert not set(CHECK_FLAGS) & set(NOT_CHECK_FLAGS)
    for name, kind in CHECK_FLAGS.items():
        option = declared[name]
        expected = BARE if option.is_flag else LIST if option.multiple else "value"
        assert kind == expected, name


def typer_reads(args: list[str], monkeypatch: pytest.MonkeyPatch) -> CheckFlags:
    """The flags typer hands to the check for ``mux update ARGS``."""
    seen: list[CheckFlags] = []

    def capture(flags: CheckFlags) -> int:
        seen.append(flags)
        return 0

    monkeypatch.setattr(cli_update, "answer_check", capture)
    result = CliRunner().invoke(cli_app.app, ["update", *args])
    assert result.exit_code == 0, result.output
    assert len(seen) == 1
    return seen[0]


VALUES = {
    "--max-age": st.sampled_from(["15m", "1h", "bogus"]),
    "--source": st.sampled_from(["github", "/srv/feed", "https://mirror.example/feed"]),
    "--version": st.sampled_from(["1.2.3", "2.0.0-rc.1"]),
    "--home": st.sampled_from(["/opt/mux", "relative/home"]),
    "--trust-key": st.sampled_from(["RWQkey1", "RWQkey2"]),
}


@st.composite
def check_lines(draw: st.DrawFn) -> list[str]:
    """A ``mux update --check …`` line: flags in any order and repeated (the last of a single
    flag wins, a list keeps each), values spelled ``--flag=V`` or ``--flag V``."""
    names = draw(st.lists(st.sampled_from(sorted(CHECK_FLAGS)), max_size=8))
    line: list[str] = []
    for name in [*names, "--check"]:
        if CHECK_FLAGS[name] == BARE:
            line.append(name)
            continue
        value = draw(VALUES[name])
        line.extend([f"{name}={value}"] if draw(st.booleans()) else [name, value])
    return line


@given(check_lines())
def test_both_readers_turn_a_check_line_into_the_same_flags(line: list[str]) -> None:
    # A line the one validation refuses (--allow-downgrade without --version) never reaches
    # the check from typer; the fast path's answer_check refuses it the same way.
    assume(refusal([arg.partition("=")[0] for arg in line if arg.startswith("--")]) is None)
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert parse_check(line) == typer_reads(line, monkeypatch)


@pytest.mark.parametrize(
    "line",
    [
        ["--check", "--dry-run"],  # not a check's flag: typer says what it means
        ["--check", "--unknown"],
        ["--check", "--json=yes"],  # a switch given a value
        ["--check", "--max-age"],  # a value missing
        ["--json"],  # no --check at all
        ["--check", "--help"],
    ],
)
def test_anything_else_is_left_to_typer(line: list[str]) -> None:
    assert parse_check(line) is None


@pytest.mark.parametrize("flag", NOT_CHECK_FLAGS)
def test_a_check_line_with_any_flag_that_is_not_a_check_s_goes_to_typer(flag: str) -> None:
    option = typer_update_options()[flag]
    value = [] if option.is_flag else ["x"]
    assert parse_check(["--check", flag, *value]) is None
    assert parse_check(["--check", "--json", "--max-age", "15m"]) is not None


def test_the_typer_command_answers_through_the_same_function() -> None:
    # The one answer: typer's command calls the function the fast path calls.
    assert cli_update.answer_check is cli_check.answer_check
