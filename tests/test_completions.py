"""``mux completions`` and ``mux-release completions``: scripts read off the command tree.

The tree and the scripts are tested in-process; each shell's script is loaded in the real
shell (bash, zsh, fish) and asked to complete, since what a shell does with it is the point.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Annotated, Literal

import pytest
import typer

from release import cli as release_cli
from updater.cli.app import run
from updater.cli.completions import SHELLS, Node, command_tree, script


def mux_script(shell: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert run(["completions", shell]) == 0
    return capsys.readouterr().out


def mux_tree() -> dict[tuple[str, ...], Node]:
    from updater.cli.app import app

    return {node.path: node for node in command_tree(typer.main.get_command(app))}


def test_the_tree_holds_every_visible_command_and_no_hidden_one() -> None:
    tree = mux_tree()
    assert {(), ("update",), ("server",), ("server", "start"), ("completions",)} <= set(tree)
    assert ("server", "run") not in tree  # hidden: the daemon's own entry
    assert ("server", "check-updates") not in tree
    update = tree[("update",)]
    names = {n for option in update.options for n in option.names}
    assert {"--check", "--json", "--rollback", "--help"} <= names
    assert tree[("completions",)].argument_choices == SHELLS


def test_a_command_added_later_completes_without_touching_the_generator() -> None:
    app = typer.Typer(add_completion=False)
    later = typer.Typer()
    app.add_typer(later, name="later")

    @app.command()
    def first() -> None: ...

    @later.command("deeper")
    def deeper(
        mode: Annotated[Literal["one", "two"], typer.Option("--mode", help="Which.")] = "one",
        quiet: Annotated[bool, typer.Option("--quiet", "-q", hidden=True)] = False,
    ) -> None:
        """Go deeper. More words."""

    tree = {n.path: n for n in command_tree(typer.main.get_command(app))}
    assert tree[("later",)].commands == (("deeper", "Go deeper"),)
    deeper_options = {o.names: o for o in tree[("later", "deeper")].options}
    assert deeper_options[("--mode",)].choices == ("one", "two")
    assert not any("--quiet" in names for names in deeper_options)  # hidden stays hidden
    text = script("bash", "tool", list(tree.values()))
    assert '"later deeper|--mode") COMPREPLY=($(compgen -W "one two"' in text


def shell_env(home: Path) -> dict[str, str]:
    """A shell's environment with its own HOME: no history or settings of the user's."""
    return {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "xterm", "LANG": "C.UTF-8"}


def bash_complete(script_path: Path, function: str, *cases: list[str]) -> list[list[str]]:
    """Each case's COMPREPLY, the last word of the case being the one under the cursor."""
    lines = [f"source {script_path}"]
    for words in cases:
        quoted = " ".join(f"'{w}'" for w in words)
        lines += [
            f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; COMPREPLY=()",
            f'{function}; echo "${{COMPREPLY[*]}}"',
        ]
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", "\n".join(lines)],
        env=shell_env(script_path.parent),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return [line.split() for line in done.stdout.splitlines()]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completes_commands_subcommands_options_and_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mux.bash"
    path.write_text(mux_script("bash", capsys), encoding="utf-8")
    got = bash_complete(
        path,
        "_mux_complete",
        ["mux", "up"],
        ["mux", "server", "st"],
        ["mux", "update", "--roll"],
        ["mux", "completions", ""],
        ["mux", "update", "--home", "x"],  # a path: bash's own file names (-o default)
    )
    assert got == [["update"], ["start", "status", "stop"], ["--rollback"], [*SHELLS, "--help"], []]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_mux_release_writes_its_own_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        release_cli.app(["completions", "bash"], prog_name="mux-release")
    assert done.value.code == 0
    path = tmp_path / "mux-release.bash"
    path.write_text(capsys.readouterr().out, encoding="utf-8")
    got = bash_complete(path, "_mux_release_complete", ["mux-release", "pack"])
    assert got == [["package", "packager-marker"]]
    assert "complete -o default -F _mux_release_complete mux-release" in path.read_text()


ZPTY_DRIVER = r"""
zmodload zsh/zpty
zpty shell 'zsh -f -i'
# The prompt is typed as \x52EADY so that only the prompt itself reads READY.
zpty -w shell $'PS1=$\'\\x52EADY> \'; autoload -Uz compinit; compinit -u -D; source %(script)s; mux() { print -r -- "AR""GS:$*" }'
zpty -r shell out '*READY*'
zpty -w shell $'mux up\t'
zpty -r shell out '*ARGS:*READY*'
print -r -- "FIRST:$out"
zpty -w shell $'mux server st\t\t'
zpty -r shell out '*ARGS:*READY*'
print -r -- "SECOND:$out"
zpty -d shell
"""


@pytest.mark.skipif(shutil.which("zsh") is None, reason="needs zsh")
def test_zsh_completes_at_a_real_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An interactive zsh on a pseudo-terminal, TAB typed: the line it runs, the list it shows."""
    path = tmp_path / "_mux"
    path.write_text(mux_script("zsh", capsys), encoding="utf-8")
    driver = tmp_path / "driver.zsh"
    driver.write_text(ZPTY_DRIVER % {"script": path}, encoding="utf-8")
    done = subprocess.run(
        ["zsh", "-f", str(driver)],
        env=shell_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", " ", done.stdout)  # the terminal's codes
    first, _, second = shown.partition("SECOND:")
    assert "ARGS:update\n" in first  # `mux up<TAB>` became `mux update`
    listed = [line.split() for line in second.split("\n") if "status" in line]
    assert listed == [["start", "status", "stop"]]
    assert "watch" not in second and "restart" not in second


@pytest.mark.skipif(shutil.which("fish") is None, reason="needs fish")
def test_fish_completes_with_descriptions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mux.fish"
    path.write_text(mux_script("fish", capsys), encoding="utf-8")
    commands = [f"source {path}"] + [
        f"echo '=='; complete -C '{line}'"
        for line in ("mux up", "mux server st", "mux update --ro", "mux completions ")
    ]
    done = subprocess.run(
        ["fish", "--no-config", "-c", "; ".join(commands)],
        env=shell_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    answers = [
        [line.split("\t")[0] for line in block.strip().splitlines()]
        for block in done.stdout.split("==")[1:]
    ]
    assert answers == [["update"], ["start", "status", "stop"], ["--rollback"], sorted(SHELLS)]
    assert "update\tCheck for, verify and install the newest mux" in done.stdout


def test_an_unknown_shell_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["completions", "ksh"]) == 2
    assert "'ksh' is not one of 'bash', 'zsh', 'fish'" in capsys.readouterr().err
