"""Help that guides (issue 38, item 11): every ``mux`` command's help lists its exit codes and
two or three examples that parse, metavars say what to type, ``-h`` works everywhere, the
listings' lines fit, and ``mux update --help`` lists the environment.

In-process, through typer's runner and the click command tree (no mux process).
"""

from __future__ import annotations

import re
import shlex

import pytest
import typer
from typer._click.core import Command
from typer.core import TyperGroup as Group
from typer.core import TyperOption as Option
from typer.testing import CliRunner

from tests.support.docs import check_invocation, commands, invocations
from updater.cli.app import app

runner = CliRunner()
ROOT = typer.main.get_command(app)


def _visible(command: Command, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    found = [path]
    if isinstance(command, Group):
        for name, sub in command.commands.items():
            if not sub.hidden:
                found += _visible(sub, (*path, name))
    return found


EVERY = _visible(ROOT, ())


def help_of(path: tuple[str, ...], flag: str = "--help") -> str:
    result = runner.invoke(app, [*path, flag], env={"COLUMNS": "80"})
    assert result.exit_code == 0, (path, result.output)
    return result.stdout


def block(text: str, title: str) -> list[str]:
    """The lines of the help's ``title:`` block (up to the next blank line)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == f"{title}:")
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start + 1 : end]


def exit_codes(text: str) -> list[str]:
    return [
        m.group(1) for line in block(text, "Exit codes") if (m := re.match(r"\s+(\d+)\s", line))
    ]


def examples(text: str) -> list[str]:
    """The example commands (the lines indented least in the block)."""
    lines = block(text, "Examples")
    indent = min(len(line) - len(line.lstrip()) for line in lines)
    return [line.strip() for line in lines if len(line) - len(line.lstrip()) == indent]


def test_the_tree_is_what_the_user_sees() -> None:
    assert {" ".join(path) for path in EVERY} == {
        "",
        "version",
        "update",
        "completions",
        "server",
        "server start",
        "server stop",
        "server restart",
        "server status",
        "server watch",
        "status",
    }


@pytest.mark.parametrize("path", EVERY, ids=lambda path: "mux " + " ".join(path))
def test_every_command_lists_exit_codes_and_examples_that_parse(path: tuple[str, ...]) -> None:
    text = help_of(path)
    assert help_of(path, "-h") == text  # -h everywhere, the same help
    codes = exit_codes(text)
    assert {"0", "2"} <= set(codes) and len(codes) == len(set(codes)), codes
    shown = examples(text)
    assert 2 <= len(shown) <= 3, shown
    roots = commands()
    for example in shown:
        inner = re.fullmatch(r'eval "\$\((.*)\)"', example)  # (a script eval'd: its command)
        runs = list(invocations(inner.group(1) if inner else example))
        assert runs, example
        for words in runs:
            assert words[1 : 1 + len(path)] == list(path), example  # this command's own
            assert check_invocation(words, roots) is None, example
    assert all(len(line) <= 80 for line in text.splitlines()), text


@pytest.mark.parametrize(
    ("path", "codes"),
    [
        (("update",), ["0", "10", "11", "20", "1", "2", "3", "4"]),
        (("server", "restart"), ["0", "5", "1", "2", "6"]),
        (("server", "start"), ["0", "1", "2", "6"]),
        (("server", "stop"), ["0", "1", "2", "6"]),
    ],
)
def test_the_exit_codes_that_apply_are_listed(path: tuple[str, ...], codes: list[str]) -> None:
    assert exit_codes(help_of(path)) == codes


def test_mux_update_help_lists_the_environment() -> None:
    names = {
        line.split()[0] for line in block(help_of(("update",)), "Environment") if line[4] != " "
    }
    assert {
        "MUX_UPDATE_SOURCE",
        "MUX_HOME",
        "MUX_REPO",
        "MUX_GITHUB_URL",
        "MUX_GITHUB_TOKEN",
        "MUX_ALLOW_EXPIRED_FEED=1",
        "MUX_NO_DELTA=1",
        "MUX_HTTP_DEADLINE",
        "MUX_HTTP_MIN_SPEED",
        "MUX_LOCK_TIMEOUT",
    } <= names, names


def _options(path: tuple[str, ...]) -> list[Option]:
    command: Command = ROOT
    for name in path:
        assert isinstance(command, Group)
        command = command.commands[name]
    return [p for p in command.params if isinstance(p, Option) and not p.hidden]


@pytest.mark.parametrize("path", EVERY, ids=lambda path: "mux " + " ".join(path))
def test_metavars_say_what_to_type(path: tuple[str, ...]) -> None:
    for option in _options(path):
        if option.is_flag or option.count:
            continue
        assert option.metavar is not None and re.fullmatch(r"<[^<>]+>", option.metavar), (
            option.opts,
            option.metavar,
        )
    text = help_of(path)
    assert not re.search(r"<(str|path|int|float|text)>|\bTEXT\b|\{\w+\}:", text), text


@pytest.mark.parametrize(
    ("option", "metavar"),
    [
        ("--version", "<X.Y.Z>"),
        ("--skip", "<X.Y.Z>"),
        ("--unskip", "<X.Y.Z>"),
        ("--source", "<github|URL|DIR>"),
        ("--hold", "<DURATION>"),
        ("--max-age", "<DURATION>"),
    ],
)
def test_mux_update_metavars(option: str, metavar: str) -> None:
    assert f"{option} {metavar}" in help_of(("update",))


@pytest.mark.parametrize("path", [(), ("server",)], ids=["mux", "mux server"])
def test_listings_show_a_first_line_that_fits(path: tuple[str, ...]) -> None:
    listed = block(help_of(path), "Commands")
    assert listed and not any(line.endswith("...") for line in listed), listed


def test_examples_are_shell_words() -> None:
    for path in EVERY:
        for example in examples(help_of(path)):
            shlex.split(example)  # (a quote left open would raise)
