"""``mux-release``'s surface, in process (typer's CliRunner): the listing, each command's help,
option names that say what they take, the old spellings kept as hidden aliases, and ``--tag``
in both spellings (issue 38, item 12 and mux-release's part of item 11)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer.main
from typer._click.core import Command, Context
from typer.testing import CliRunner

from release.cli import app
from release.cli.examples import EXAMPLES, shown
from release.cli.options import RENAMED_OPTIONS, release_tag, renamed
from tests.support import docs
from tests.support.releases import TEST_PASSWORD, Feed, make_feed
from updater.errors import MuxError, UsageError

WIDTH = 80


def commands() -> Iterator[tuple[str, Command]]:
    """Every command of mux-release (``tuf init`` as such), hidden ones included."""
    root = typer.main.get_command(app)
    groups: list[tuple[str, Command]] = [("", root)]
    while groups:
        prefix, group = groups.pop()
        for name, command in getattr(group, "commands", {}).items():
            words = f"{prefix} {name}".strip()
            if hasattr(command, "commands"):
                groups.append((words, command))
            else:
                yield words, command


def option_names(command: Command) -> set[str]:
    return {
        name
        for param in command.params
        if param.param_type_name == "option"
        for name in (*param.opts, *param.secondary_opts)
    }


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), terminal_width=WIDTH, prog_name="mux-release")
    if isinstance(result.exception, UsageError):
        return result.exception.exit_code, result.stdout, str(result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result
    return result.exit_code, result.stdout, result.stderr


def help_text(words: str, flag: str = "--help") -> str:
    code, out, err = run(*words.split(), flag)
    assert code == 0, err
    return out


def test_the_listing_fits_each_line_and_cuts_no_summary() -> None:
    listing = help_text("")
    assert all(len(line) <= WIDTH for line in listing.splitlines()), listing
    summaries = listing.split("Commands:")[1]
    assert "..." not in summaries
    listed = {line.split()[0] for line in summaries.splitlines() if line}
    top = {words.split()[0] for words, _ in commands()}
    # tuf-client is the conformance suite's client-under-test: it runs, hidden.
    assert listed == top - {"tuf-client"}
    assert "tuf-client" in top
    assert "..." not in help_text("tuf").split("Commands:")[1]


def block(text: str, title: str) -> list[str]:
    """The lines of the help's ``title:`` block (up to the next blank line)."""
    lines = text.splitlines()
    start = lines.index(f"  {title}:")
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start + 1 : end]


@pytest.mark.parametrize("words", [words for words, _ in commands()])
def test_every_command_says_its_exit_codes_and_examples_and_takes_h(words: str) -> None:
    text = help_text(words)
    assert help_text(words, "-h") == text
    codes = [
        m.group(1) for line in block(text, "Exit codes") if (m := re.match(r"\s+(\d+) ", line))
    ]
    assert codes[:3] == ["0", "1", "2"] and len(codes) == len(set(codes)), codes
    examples = [line.strip() for line in block(text, "Examples") if re.match(r"    \S", line)]
    assert 2 <= len(examples) <= 3, examples
    assert all(len(line) <= WIDTH for line in text.splitlines()), text


@pytest.mark.parametrize("words", list(EXAMPLES))
def test_every_example_runs_this_command_with_options_it_has(words: str) -> None:
    roots = docs.commands()
    for example, _what in EXAMPLES[words]:
        shown_lines = shown(example)
        assert shown_lines.replace(" \\\n    ", " ") == example  # wrapping loses nothing
        inner = re.fullmatch(r'eval "\$\((.*)\)"', example)
        runs = [w for w in docs.invocations(inner[1] if inner else example) if w[0] != "gh"]
        assert len(runs) == 1, example
        assert runs[0][1 : 1 + len(words.split())] == words.split(), example
        assert docs.check_invocation(runs[0], roots) is None, example
    assert set(EXAMPLES) == {words for words, _ in commands()}


@pytest.mark.parametrize("words", [words for words, _ in commands()])
def test_metavars_say_what_to_type(words: str) -> None:
    command = dict(commands())[words]
    context = Context(command, info_name=words)
    for param in command.params:
        if getattr(param, "is_flag", False) or param.name in {"help"}:
            continue
        metavar = param.make_metavar(context)
        # not a type (<str>, <path>), nor a Python name ({feed_dir})
        assert re.fullmatch(r"<[^>]+>( <[^>]+>)?(\.\.\.)?", metavar), (words, param.name, metavar)


def test_every_key_option_names_its_kind() -> None:
    for words, command in commands():
        if words == "tuf-client":
            continue  # the suite's own interface (CLIENT-CLI.md)
        for name in option_names(command):
            if "key" in name and name != "--password-env":
                assert re.search(r"public-key|private-key|key-id", name), (words, name)


def test_one_output_option_name() -> None:
    for words, command in commands():
        names = option_names(command)
        assert not names & {"--out-dir", "--output"}, words


def test_every_renamed_option_has_its_new_name_and_its_old_one_hidden() -> None:
    everything = dict(commands())
    for words, table in RENAMED_OPTIONS.items():
        command = everything[words]
        text = help_text(words)
        for old, new in table.items():
            assert new in option_names(command), (words, new)
            assert old not in option_names(command), (words, old)
            assert not re.search(rf"{re.escape(old)}(?![-\w])", text), (words, old)


def test_renamed_replaces_old_spellings_and_leaves_the_rest() -> None:
    args, notes = renamed(
        "tuf init",
        ["feed", "--root-key", "a.pub.json", "--sign=file2:k.pem", "--", "--sign"],
    )
    assert args == [
        *("feed", "--root-public-key", "a.pub.json", "--private-key=file2:k.pem"),
        *("--", "--sign"),
    ]
    assert notes == [
        "mux-release tuf init: --root-key is now --root-public-key (the old name goes in a "
        "later release)",
        "mux-release tuf init: --sign is now --private-key (the old name goes in a later release)",
    ]
    # The same old word means different keys in different commands.
    assert renamed("tuf add-release", ["--release-key", "x"])[0] == ["--release-private-key", "x"]
    assert renamed("tuf init", ["--release-key", "x"])[0] == ["--release-public-key", "x"]
    assert renamed("glibc", ["--key", "x"]) == (["--key", "x"], [])


def test_an_old_spelling_still_works_and_says_its_new_name(tmp_path: Path) -> None:
    code, out, err = run("keygen", "--out-dir", str(tmp_path / "old"), "--no-password")
    assert code == 0, err
    assert (tmp_path / "old" / "minisign.key").is_file()
    assert "keygen: --out-dir is now --out" in err
    code, out, err = run("keygen", "--out", str(tmp_path / "new"), "--no-password")
    assert code == 0, err
    assert err == ""
    assert "mux-release sign --private-key-file" in out
    assert "mux-release build --public-key RW" in out


def test_release_tag_takes_both_spellings_and_refuses_the_rest() -> None:
    assert release_tag("1.1.0") == release_tag("v1.1.0") == "v1.1.0"
    assert release_tag("2.0.0-rc.1") == "v2.0.0-rc.1"
    for bad in ("1.2", "1.0.1x", "latest", ""):
        with pytest.raises(UsageError, match=r"give X\.Y\.Z or vX\.Y\.Z"):
            release_tag(bad)


def test_publish_flags_takes_the_tag_in_both_spellings(tmp_path: Path) -> None:
    published = tmp_path / "published.json"
    published.write_text(json.dumps([{"tagName": "v1.0.0"}, {"tagName": "v1.1.0"}]))
    answers = {
        run("publish-flags", "--tag", tag, "--published", str(published))
        for tag in (
            "1.2.0",
            "v1.2.0",
        )
    }
    assert len(answers) == 1
    (code, out, _err) = answers.pop()
    assert code == 0 and "--latest=true" in out
    code, _out, err = run("publish-flags", "--tag", "1.2", "--published", str(published))
    assert code == 2 and "give X.Y.Z or vX.Y.Z" in err


# --- lifecycle verbs: what they print, --dry-run, resume ---------------------------------------


@pytest.fixture
def feed(tmp_path: Path) -> Feed:
    return make_feed(tmp_path / "f", versions=["0.1.0", "0.2.0"])


def verb(feed: Feed, *args: str) -> tuple[int, str, str]:
    name, *rest = args
    key = ("--private-key-file", str(feed.keypair.secret_key_path))
    result = CliRunner().invoke(
        app,
        [name, str(feed.path), *key, *rest],
        env={"MINISIGN_PASSWORD": TEST_PASSWORD},
        prog_name="mux-release",
    )
    if isinstance(result.exception, MuxError):
        return result.exception.exit_code, result.stdout, str(result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result
    return result.exit_code, result.stdout, result.stderr


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_verb_prints_what_changed_what_it_signed_and_what_to_publish(feed: Feed) -> None:
    code, out, err = verb(feed, "halt", "--tag", "0.2.0")
    assert code == 0, err
    assert out.splitlines() == [
        "changed: v0.2.0: halted",
        "  was: fully rolled out",
        f"signed: {feed.path / 'releases.json'} with minisign key {feed.keypair.key_id}, seq 3, "
        + out.split(", seq 3, ")[1].splitlines()[0],
        f"publish: {feed.path} (the feed workflow) for clients to see it",
    ]
    assert re.search(r", seq 3, expires \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n", out)


def test_a_dry_run_prints_the_change_and_signs_and_writes_nothing(feed: Feed) -> None:
    before = files(feed.path)
    code, out, err = verb(feed, "withdraw", "--tag", "v0.2.0", "--reason", "bad", "--dry-run")
    assert code == 0, err
    assert out.splitlines() == [
        "changed: v0.2.0: withdrawn",
        "  was: fully rolled out",
        f"would sign: {feed.path / 'releases.json'} with minisign key {feed.keypair.key_id}, seq 3",
        "dry run: nothing was signed or written",
    ]
    assert files(feed.path) == before
    # The real run signs what the dry run said.
    code, out, err = verb(feed, "withdraw", "--tag", "v0.2.0", "--reason", "bad")
    assert code == 0 and out.startswith("changed: v0.2.0: withdrawn\n") and ", seq 3, " in out


def test_resume_on_a_release_that_is_not_halted_is_refused_and_signs_nothing(feed: Feed) -> None:
    before = files(feed.path)
    for dry_run in ((), ("--dry-run",)):
        code, out, err = verb(feed, "resume", "--tag", "v0.2.0", *dry_run)
        assert code == 2 and out == ""
        assert err.startswith("v0.2.0: is not halted: nothing to resume (")
        assert "\n" not in err
    assert files(feed.path) == before  # no new seq
    assert verb(feed, "halt", "--tag", "v0.2.0")[0] == 0
    code, out, err = verb(feed, "resume", "--tag", "1.0.0")
    assert code == 2 and "has no release v1.0.0" in err
    code, out, err = verb(feed, "resume", "--tag", "0.2.0")
    assert code == 0, err
    assert out.splitlines()[:2] == ["changed: v0.2.0: fully rolled out", "  was: halted"]
