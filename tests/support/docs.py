"""The checks that keep the documentation true, for tests/test_docs.py and by hand.

Run: uv run python -m tests.support.docs [ROOT]   (ROOT: a tree with README.md and docs/)

- every relative link and ``#anchor`` in the Markdown files resolves, with GitHub's rules for
  a heading's anchor (lower case; what is not a letter, digit, space, ``-`` or ``_`` dropped;
  each space a ``-``; a repeated heading gets ``-1``, ``-2``);
- every section a sentence names by its heading, after the page's name (``docs/release.md,
  "The feed"``, ``contracts.md ("Release lifecycle")``), is a heading of that page: its whole
  text, or the text before its ``:`` or `` (``;
- every ``mux …`` and ``mux-release …`` command line in a shell block (```sh, ```shell,
  ```bash, ```console) names a real command path, and each of its options is one that this
  exact command declares (what its ``--help`` lists), checked in-process on the click
  commands typer builds;
- no commit of this repository (a 7-40 hex run that ``git`` knows as a commit) and no
  "issue N" is named, except in the generated docs/performance.md, whose tables name the
  commit each figure was measured on.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import typer
import typer.main

# typer builds its commands on its own copy of click (typer._click), where a group is a
# command with get_command.
from typer._click.core import Command, Context

ROOT = Path(__file__).resolve().parent.parent.parent
SHELL_BLOCKS = {"sh", "shell", "bash", "console", "zsh"}
# Files that name commits on purpose: generated from the benches' recorded results.
MAY_NAME_COMMITS = {"docs/performance.md"}

FENCE = re.compile(r"^\s*(```|~~~)\s*([\w+-]*)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
HEX_RUN = re.compile(r"(?<![0-9A-Za-z])[0-9a-f]{7,40}(?![0-9A-Za-z])")
ISSUE = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
SEPARATORS = {"|", "||", "&&", ";", "&", "(", ")", "|&"}
# What may stand before the program's name in a simple command.
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PREFIXES = {"sudo", "exec", "command", "time"}


@dataclass(frozen=True)
class Block:
    """A fenced block: its info string and its lines, with the line number of the first."""

    language: str
    start: int
    lines: list[str]


@dataclass
class Page:
    path: Path
    name: str  # relative to the root, with /
    prose: list[tuple[int, str]]  # (line number, text) outside fenced blocks
    blocks: list[Block]


def read_page(root: Path, path: Path) -> Page:
    prose: list[tuple[int, str]] = []
    blocks: list[Block] = []
    current: Block | None = None
    marker = ""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fence = FENCE.match(line)
        if current is None and fence:
            marker = fence.group(1)
            current = Block(fence.group(2).lower(), number + 1, [])
        elif current is not None and line.strip().startswith(marker) and not line.strip()[3:]:
            blocks.append(current)
            current = None
        elif current is not None:
            current.lines.append(line)
        else:
            prose.append((number, line))
    return Page(path, path.relative_to(root).as_posix(), prose, blocks)


def markdown_files(root: Path) -> list[Path]:
    top = [root / name for name in ("README.md", "CHANGELOG.md", "CONTRIBUTING.md")]
    return [p for p in top if p.is_file()] + sorted((root / "docs").glob("*.md"))


# --- anchors -----------------------------------------------------------------------------


def heading_text(markdown: str) -> str:
    """What GitHub shows of a heading: code spans' text, links' text, no emphasis or tags."""
    text = INLINE_CODE.sub(lambda m: m.group(2).strip(), markdown)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"(?<!\w)[*_]{1,3}|[*_]{1,3}(?!\w)", "", text)


def slug(text: str) -> str:
    """GitHub's anchor for a heading's text (github-slugger)."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Page) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for _, line in page.prose:
        heading = HEADING.match(line)
        if not heading:
            continue
        base = slug(heading_text(heading.group(2)))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    for _, line in page.prose:  # explicit anchors
        found.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", line))
    return found


def links(page: Page) -> Iterator[tuple[int, str]]:
    for number, line in page.prose:
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            yield number, match.group(1)


def link_problems(root: Path, pages: dict[Path, Page]) -> list[str]:
    problems = []
    cache: dict[Path, set[str]] = {}
    for page in pages.values():
        for number, target in links(page):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
                continue  # https:, mailto: ...
            path_part, _, anchor = target.partition("#")
            where = f"{page.name}:{number}: {target}"
            resolved = (page.path.parent / path_part).resolve() if path_part else page.path
            if not resolved.exists():
                problems.append(f"{where}: {path_part} does not exist")
                continue
            if not anchor:
                continue
            if resolved.suffix != ".md" or not resolved.is_file():
                problems.append(f"{where}: an anchor into a file that is not Markdown")
                continue
            if resolved not in cache:
                known = pages.get(resolved) or read_page(root, resolved)
                cache[resolved] = anchors(known)
            if anchor.lower() not in cache[resolved]:
                problems.append(f"{where}: no heading of {resolved.name} has the anchor #{anchor}")
    return problems


SECTION_REFERENCE = re.compile(
    r"(?P<file>[\w./-]+\.md)`?(?:#[\w-]*)?\)?(?:,\s*|\s+\(|\s+)\"(?P<section>[^\"]+)\""
)


def paragraphs(page: Page) -> Iterator[tuple[int, str]]:
    """Each paragraph of prose as one line (a reference may wrap), with its first line."""
    lines: list[str] = []
    first = 0
    for number, line in [*page.prose, (0, "")]:
        if line.strip():
            first = first or number
            lines.append(line.strip())
        elif lines:
            yield first, " ".join(lines)
            lines, first = [], 0


def heading_texts(page: Page) -> list[str]:
    return [
        heading_text(m.group(2)).strip().lower()
        for _, line in page.prose
        if (m := HEADING.match(line))
    ]


def names_heading(section: str, headings: list[str]) -> bool:
    wanted = section.strip().lower()
    return any(h == wanted or h.startswith((f"{wanted}:", f"{wanted} (")) for h in headings)


def section_problems(root: Path, pages: dict[Path, Page]) -> list[str]:
    problems = []
    for page in pages.values():
        for number, text in paragraphs(page):
            for match in SECTION_REFERENCE.finditer(INLINE_CODE.sub(r"\2", text)):
                name = match.group("file")
                candidates = [(page.path.parent / name).resolve(), (root / name).resolve()]
                target = next((c for c in candidates if c.is_file()), None)
                if target is None:
                    continue
                known = pages.get(target) or read_page(root, target)
                if not names_heading(match.group("section"), heading_texts(known)):
                    problems.append(
                        f'{page.name}:{number}: {name} has no section "{match.group("section")}"'
                    )
    return problems


# --- command lines -----------------------------------------------------------------------


def commands() -> dict[str, Command]:
    from release.cli import app as release_app
    from updater.cli.app import app as mux_app

    return {
        "mux": typer.main.get_command(mux_app),
        "mux-release": typer.main.get_command(release_app),
    }


def command_lines(block: Block) -> Iterator[tuple[int, str]]:
    """The block's command lines, continuations joined (console: only ``$ `` lines)."""
    pending, first = "", 0
    for offset, raw in enumerate(block.lines):
        line = raw.rstrip()
        if block.language == "console" and not pending:
            if not line.lstrip().startswith("$ "):
                continue
            line = line.lstrip()[2:]
        if not pending:
            first = block.start + offset
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield first, pending + line
        pending = ""


def invocations(line: str) -> Iterator[list[str]]:
    """Each simple command of a shell line that runs mux or mux-release, from its name on."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError:
        return
    segment: list[str] = []
    for token in [*tokens, ";"]:
        if token not in SEPARATORS:
            segment.append(token)
            continue
        words = segment
        segment = []
        while words and (ASSIGNMENT.match(words[0]) or words[0] in PREFIXES):
            words = words[1:]
        if words[:2] == ["uv", "run"]:
            words = words[2:]
        if words and words[0] in {"mux", "mux-release"}:
            yield words


def options_of(command: Command) -> set[str]:
    names = {"--help"}
    for parameter in command.params:
        names.update(parameter.opts)
        names.update(parameter.secondary_opts)
    return names


def check_invocation(words: list[str], roots: dict[str, Command]) -> str | None:
    """Why ``words`` does not parse against the real CLI, or None."""
    command = roots[words[0]]
    path = [words[0]]
    rest = words[1:]
    while rest:
        token = rest[0]
        if token == "--":
            return None
        if token.startswith("-") and len(token) > 1:
            name = token.split("=", 1)[0]
            if name not in options_of(command):
                return f"{' '.join(path)} has no option {name}"
        elif hasattr(command, "get_command"):
            sub = command.get_command(Context(command), token)
            if sub is None:
                return f"{' '.join(path)} has no command {token}"
            command, path = sub, [*path, token]
        rest = rest[1:]
    return None


def command_problems(pages: dict[Path, Page]) -> list[str]:
    roots = commands()
    problems = []
    for page in pages.values():
        for block in page.blocks:
            if block.language not in SHELL_BLOCKS:
                continue
            for number, line in command_lines(block):
                for words in invocations(line):
                    why = check_invocation(words, roots)
                    if why:
                        problems.append(f"{page.name}:{number}: {' '.join(words)}: {why}")
    return problems


# --- commits and issue numbers -----------------------------------------------------------


def known_commits(candidates: set[str], repository: Path) -> set[str]:
    """Those of ``candidates`` that name a commit of the git repository at ``repository``."""
    if not candidates:
        return set()
    ordered = sorted(candidates)
    result = subprocess.run(
        ["git", "cat-file", "--batch-check=%(objecttype)"],
        cwd=repository,
        input="".join(f"{c}^{{commit}}\n" for c in ordered),
        capture_output=True,
        text=True,
        check=False,
    )
    answers = result.stdout.splitlines()
    if result.returncode != 0 or len(answers) != len(ordered):
        raise RuntimeError(f"git cat-file failed: {result.stderr.strip()}")
    return {c for c, answer in zip(ordered, answers, strict=True) if answer == "commit"}


def history_problems(root: Path, repository: Path) -> list[str]:
    """Commits and "issue N" named in README.md and docs/ (not CHANGELOG or CONTRIBUTING)."""
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    found: list[tuple[str, int, str]] = []
    problems = []
    for path in pages:
        if not path.is_file():
            continue
        name = path.relative_to(root).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for issue in ISSUE.finditer(line):
                problems.append(f"{name}:{number}: names {issue.group(0)!r}")
            if name not in MAY_NAME_COMMITS:
                found.extend((name, number, run) for run in HEX_RUN.findall(line))
    commits = known_commits({run for _, _, run in found}, repository)
    problems += [f"{n}:{line}: names the commit {run}" for n, line, run in found if run in commits]
    return problems


def problems(root: Path = ROOT, repository: Path = ROOT) -> list[str]:
    pages = {p.resolve(): read_page(root, p) for p in markdown_files(root)}
    return (
        link_problems(root, pages)
        + section_problems(root, pages)
        + command_problems(pages)
        + history_problems(root, repository)
    )


def main(argv: list[str]) -> int:
    root = Path(argv[0]).resolve() if argv else ROOT
    found = problems(root)
    for line in found:
        print(line)
    print(f"{len(found)} problem(s) in the docs of {root}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
