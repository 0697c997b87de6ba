"""The one set of ``mux update`` flags: the fast path's (``updater.cli.check``) and typer's agree.

``mux update --check`` is answered without typer when every flag on the line is a check flag
(:data:`updater.cli.check.CHECK_FLAGS`); every other flag of ``mux update`` is named in
:data:`updater.cli.check.NOT_CHECK_FLAGS`, so that a line with one of them goes to typer (and
its usage errors). A flag added to typer and forgotten there fails here.
"""

from __future__ import annotations

import typer.main

from updater.cli.app import app
from updater.cli.check import BARE, CHECK_FLAGS, LIST, NOT_CHECK_FLAGS, parse_check


def update_options() -> dict[str, object]:
    group = typer.main.get_command(app)
    command = group.commands["update"]  # type: ignore[attr-defined]
    return {
        name: param
        for param in command.params
        for name in param.opts
        if name.startswith("--") and name != "--help"
    }


def test_every_flag_of_mux_update_is_a_check_flag_or_named_as_not_one() -> None:
    declared = update_options()
    assert set(declared) == set(CHECK_FLAGS) | set(NOT_CHECK_FLAGS)
    assert not set(CHECK_FLAGS) & set(NOT_CHECK_FLAGS)
    for name, kind in CHECK_FLAGS.items():
        param = declared[name]
        assert getattr(param, "is_flag", False) is (kind == BARE), name
        assert getattr(param, "multiple", False) is (kind == LIST), name


def test_a_line_with_a_flag_that_is_not_a_check_s_goes_to_typer() -> None:
    for flag in NOT_CHECK_FLAGS:
        args = ["--check", flag] + (
            [] if flag in ("--dry-run", "--rollback", "--prune", "--unhold") else ["x"]
        )
        assert parse_check(args) is None, flag
    assert parse_check(["--check", "--json", "--max-age", "15m"]) is not None
