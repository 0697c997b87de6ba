"""``mux completions bash|zsh|fish``: a shell's completion script, read off the CLI itself.

typer's own completion hook stays off (``add_completion=False``): it costs every start-up,
and its scripts call the program back at each TAB. These scripts are static instead: they
are written from the command tree the CLI declares (:func:`command_tree` walks it), so a
command or option added later completes once the script is written again, and a TAB starts
no Python. ``mux-release completions`` writes its own from its own tree.

What completes: subcommands, options (hidden ones excluded), the values of an option or
argument that takes one of a fixed set (``--updates disabled``), and file names after an
option that takes any other value.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

SHELLS = ("bash", "zsh", "fish")
# Command and option names go into shell code unquoted: anything else is left out.
_WORD = re.compile(r"-{0,2}[A-Za-z0-9][A-Za-z0-9_.:=-]*")


class Option(NamedTuple):
    names: tuple[str, ...]  # "--json", "-V"
    help: str
    takes_value: bool
    choices: tuple[str, ...] = ()


class Node(NamedTuple):
    """One command: its visible subcommands (name, first line of help), options, and the
    fixed values its arguments take."""

    path: tuple[str, ...]  # () for the program itself, ("server", "start") below it
    commands: tuple[tuple[str, str], ...]
    options: tuple[Option, ...]
    argument_choices: tuple[str, ...]


def command_tree(command: Any, path: tuple[str, ...] = ()) -> list[Node]:
    """Every visible command under ``command`` (a click command as ``typer.main.get_command``
    returns it), the program first, parents before children."""
    children = {
        name: sub
        for name, sub in sorted(getattr(command, "commands", {}).items())
        if not sub.hidden and _WORD.fullmatch(name)
    }
    options, argument_choices = [], []
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        choices = tuple(c for c in getattr(param.type, "choices", ()) if _WORD.fullmatch(str(c)))
        if param.param_type_name == "argument":
            argument_choices += [str(c) for c in choices]
            continue
        names = tuple(n for n in (*param.opts, *param.secondary_opts) if _WORD.fullmatch(n))
        takes_value = not param.is_flag and not getattr(param, "count", False)
        options.append(Option(names, _first_line(param.help), takes_value, choices))
    options.append(Option(("--help",), "Show this message and exit", False))
    node = Node(
        path,
        tuple((name, _first_line(sub.help or sub.short_help)) for name, sub in children.items()),
        tuple(options),
        tuple(argument_choices),
    )
    return [node, *(n for name, sub in children.items() for n in command_tree(sub, (*path, name)))]


def _first_line(text: str | None) -> str:
    """The first sentence of a help text (its first paragraph, unwrapped)."""
    paragraph = " ".join((text or "").strip().split("\n\n", 1)[0].split())
    return paragraph.split(". ", 1)[0].rstrip(".")


def script(shell: str, program: str, tree: list[Node]) -> str:
    """The completion script of ``program`` for ``shell`` (one of :data:`SHELLS`)."""
    writers = {"bash": _bash, "zsh": _zsh, "fish": _fish}
    return writers[shell](program, tree)


def _function(program: str) -> str:
    return "_" + re.sub(r"[^A-Za-z0-9_]", "_", program) + "_complete"


def _key(path: tuple[str, ...]) -> str:
    return " ".join(path)


def _words(node: Node) -> list[str]:
    """What completes as the next word of ``node``'s command line."""
    return [
        *(name for name, _ in node.commands),
        *node.argument_choices,
        *(name for option in node.options for name in option.names),
    ]


def _valued(tree: list[Node]) -> list[tuple[str, str, tuple[str, ...]]]:
    """(command path, option name, its values) for every option that takes a value."""
    return [
        (_key(node.path), name, option.choices)
        for node in tree
        for option in node.options
        if option.takes_value
        for name in option.names
    ]


def _descend_cases(tree: list[Node]) -> str:
    """A shell ``case`` pattern matching "<path> <word>" when the word is a subcommand."""
    paths = [_key((*n.path, name)) for n in tree for name, _ in n.commands]
    return "|".join(f'"{p}"' for p in paths) or '"//"'


def _bash(program: str, tree: list[Node]) -> str:
    function = _function(program)
    words = "\n".join(f'        "{_key(n.path)}") words="{" ".join(_words(n))}" ;;' for n in tree)
    values = _value_cases(tree, _bash_values)
    return f"""\
# bash completion for {program}: eval "$({program} completions bash)"
{function}() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" path="" next words i
    for ((i = 1; i < COMP_CWORD; i++)); do
        next="${{path:+$path }}${{COMP_WORDS[i]}}"
        case "$next" in
            {_descend_cases(tree)}) path="$next" ;;
        esac
    done
    case "$path|${{COMP_WORDS[COMP_CWORD-1]}}" in
{values}
    esac
    case "$path" in
{words}
    esac
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F {function} {program}
"""


def _value_cases(tree: list[Node], complete: Callable[[tuple[str, ...]], str]) -> str:
    """``case`` arms on "<path>|<previous word>": an option's fixed values, or file names
    (one arm for every option that takes any value)."""
    arms = [
        f'        "{path}|{name}") {complete(choices)} ;;'
        for path, name, choices in _valued(tree)
        if choices
    ]
    free = "|".join(f'"{path}|{name}"' for path, name, choices in _valued(tree) if not choices)
    if free:
        arms.append(f"        {free}) {complete(())} ;;")
    return "\n".join(arms)


def _bash_values(choices: tuple[str, ...]) -> str:
    if choices:
        return f'COMPREPLY=($(compgen -W "{" ".join(choices)}" -- "$cur")); return'
    return "COMPREPLY=(); return"  # complete -o default: then file names


def _zsh(program: str, tree: list[Node]) -> str:
    function = _function(program)
    words = "\n".join(
        f'        "{_key(n.path)}") candidates=({" ".join(_words(n))}) ;;' for n in tree
    )
    values = _value_cases(tree, _zsh_values)
    return f"""\
#compdef {program}
# zsh completion for {program}: {program} completions zsh > "${{fpath[1]}}/_{program}"
{function}() {{
    local cmdpath="" next i
    local -a candidates
    for ((i = 2; i < CURRENT; i++)); do
        next="${{cmdpath:+$cmdpath }}${{words[i]}}"
        case "$next" in
            {_descend_cases(tree)}) cmdpath="$next" ;;
        esac
    done
    case "$cmdpath|${{words[CURRENT-1]}}" in
{values}
    esac
    case "$cmdpath" in
{words}
    esac
    compadd -- $candidates
}}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    {function} "$@"
else
    compdef {function} {program}
fi
"""


def _zsh_values(choices: tuple[str, ...]) -> str:
    if choices:
        return f"compadd -- {' '.join(choices)}; return"
    return "_files; return"


def _fish(program: str, tree: list[Node]) -> str:
    function = _function(program)
    lines = [
        f"# fish completion for {program}: {program} completions fish | source",
        f"function {function}_path",
        "    set -l path",
        "    for word in (commandline -opc)[2..-1]",
        "        switch (string join ' ' $path $word)",
        f"            case {_fish_cases(tree)}",
        "                set path $path $word",
        "        end",
        "    end",
        "    string join ' ' $path",
        "end",
        f"function {function}_at",
        f"    set -l path ({function}_path)",
        '    test "$path" = "$argv"',
        "end",
        f"complete -c {program} -f",
    ]
    for node in tree:
        when = "-n '" + " ".join([f"{function}_at", *node.path]) + "'"
        for name, help_text in node.commands:
            lines.append(f"complete -c {program} {when} -a {name} -d {_fish_quote(help_text)}")
        if node.argument_choices:
            lines.append(f"complete -c {program} {when} -a '{' '.join(node.argument_choices)}'")
        for option in node.options:
            lines.append(f"complete -c {program} {when} {_fish_option(option)}")
    return "\n".join(lines) + "\n"


def _fish_cases(tree: list[Node]) -> str:
    paths = [_key((*n.path, name)) for n in tree for name, _ in n.commands]
    return " ".join(_fish_quote(p) for p in paths) or "''"


def _fish_option(option: Option) -> str:
    flags = [f"-l {n[2:]}" if n.startswith("--") else f"-s {n[1:]}" for n in option.names]
    if option.choices:
        flags.append(f"-x -a '{' '.join(option.choices)}'")
    elif option.takes_value:
        flags.append("-r -F")
    return " ".join([*flags, "-d", _fish_quote(option.help)])


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
