"""The options and arguments several ``mux-release`` commands share, declared once, and the
helpers that read them (private keys, tags, TUF signers, small files).

Option names say what kind of thing they take: a key option names its kind (``--public-key``
a minisign public key line, ``--private-key-file`` and ``--private-key-env`` the minisign
private key, ``--release-public-key`` a TUF key's ``.pub.json``, ``--release-private-key`` a
TUF signer), an output is ``--out``, a release is ``--tag`` (``1.1.0`` or ``v1.1.0``). The
spellings they replaced still work for one release, hidden from ``--help``
(:data:`RENAMED_OPTIONS`, :class:`Group`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

# typer builds its commands on its own copy of click (tests/support/docs.py says the same).
from typer._click.core import Command as ClickCommand
from typer._click.core import Context
from typer.core import TyperCommand, TyperGroup

from release.cli.examples import EXAMPLES, shown
from release.pins.pinfile import DEFAULT_NOTICES_PATH, DEFAULT_PINS_PATH
from release.publish.signing import SecretKey
from updater.cli import helptext
from updater.errors import ParseError, UsageError
from updater.files import NotReadable, read_small_file
from updater.formats.models import parse_tag

DEFAULT_PASSWORD_ENV = "MINISIGN_PASSWORD"


def password_from_env(variable: str) -> str | None:
    return os.environ.get(variable) or None


# How `sign`, `feed` and the lifecycle verbs take the release's minisign private key.
KeyFileOption = Annotated[
    Path | None,
    typer.Option(
        "--private-key-file", metavar="<FILE>", help="The minisign private key file to sign with."
    ),
]
KeyEnvOption = Annotated[
    str | None,
    typer.Option(
        "--private-key-env",
        metavar="<VAR>",
        help="Environment variable holding the private key file's text (instead of a file).",
    ),
]
PasswordEnvOption = Annotated[
    str,
    typer.Option(
        "--password-env", metavar="<VAR>", help="Environment variable holding the password."
    ),
]
# The minisign public keys a build or install.sh trusts, or verify checks with.
_PUBLIC_KEY_HELP = (
    "A trusted minisign public key: its base64 line (RW...), as mux-release keygen prints it"
)
PublicKeysOption = Annotated[
    list[str] | None,
    typer.Option("--public-key", metavar="<KEY_LINE>", help=_PUBLIC_KEY_HELP + "; at most two."),
]
PublicKeysFromEnvOption = Annotated[
    list[str] | None,
    typer.Option(
        "--public-key",
        metavar="<KEY_LINE>",
        envvar="MUX_MINISIGN_PUBLIC_KEY",
        help=_PUBLIC_KEY_HELP + "; one or two. Env: MUX_MINISIGN_PUBLIC_KEY.",
    ),
]


def read_secret_key(key_file: Path | None, key_env: str | None, password_env: str) -> SecretKey:
    """The private key from ``--private-key-file`` or ``--private-key-env``, opened with the
    password variable."""
    if (key_file is None) == (key_env is None):
        raise UsageError("give exactly one of --private-key-file and --private-key-env")
    if key_file is not None:
        try:
            data = key_file.read_bytes()
        except OSError as exc:
            raise UsageError(f"cannot read {key_file}: {exc.strerror}") from None
    else:
        assert key_env is not None
        text = os.environ.get(key_env)
        if not text:
            raise UsageError(f"the environment variable {key_env} is not set")
        data = text.encode("utf-8")
    return SecretKey.parse(data, password_from_env(password_env))


def read_small(path: Path, what: str, limit: int = 512_000) -> bytes:
    """A small file an option names (``what``), or one line saying why not."""
    try:
        data = read_small_file(str(path), limit)
    except (NotReadable, OSError) as exc:
        raise UsageError(f"{what} {path}: {exc}") from None
    if data is None:
        raise UsageError(f"{what} {path} does not exist")
    return data


# The TUF keys of `feed` and the lifecycle verbs.
TufReleaseKeyOption = Annotated[
    list[str] | None,
    typer.Option(
        "--tuf-release-private-key",
        metavar="<KEY_URI>",
        help="The release workflow's TUF private key (file2:PATH, env:NAME, KEYID=URI), for "
        "the feed's TUF repository (metadata/): it signs each release's files and lifecycle.",
    ),
]
TufOnlineKeyOption = Annotated[
    list[str] | None,
    typer.Option(
        "--tuf-online-private-key",
        metavar="<KEY_URI>",
        help="The TUF snapshot and timestamp private key (file2:PATH, env:NAME, KEYID=URI).",
    ),
]

# The lifecycle verbs'.
TagOption = Annotated[
    str,
    typer.Option(
        "--tag", metavar="<X.Y.Z>", help="The release, listed in the feed (1.1.0 or v1.1.0)."
    ),
]
ExpiresOption = Annotated[
    str,
    typer.Option(
        "--expires-in",
        metavar="<DURATION>",
        help="How long the new signature holds (14d, 12h).",
    ),
]
FeedDirArgument = Annotated[
    Path,
    typer.Argument(
        metavar="<FEED_DIR>", help="The feed folder (releases.json, v*/).", show_default=False
    ),
]
NotesOption = Annotated[
    str | None,
    typer.Option("--notes", metavar="<TEXT>", help="A short plain-text summary (1000 characters)."),
]
DryRunOption = Annotated[
    bool,
    typer.Option(
        "--dry-run", help="Print what would change and be signed; sign and write nothing."
    ),
]

# pins.toml, for the builds and the upkeep commands.
PinsOption = Annotated[
    Path | None,
    typer.Option("--pins", metavar="<FILE>", help="pins.toml to use (default: release/pins.toml)."),
]


def pins_path(pins: Path | None) -> Path:
    return pins or DEFAULT_PINS_PATH


def notices_path(notices: Path | None) -> Path:
    return notices or DEFAULT_NOTICES_PATH


# The TUF repository's commands.
SignOption = Annotated[
    list[str] | None,
    typer.Option(
        "--private-key",
        metavar="<KEY_URI>",
        help="A TUF private key to sign with: file2:PATH (PEM), env:NAME, or KEYID=URI for a "
        "hardware or KMS key (repeatable).",
    ),
]
RepoArgument = Annotated[
    Path,
    typer.Argument(
        metavar="<FEED_DIR>",
        help="The repository's folder (the feed: it holds metadata/).",
        show_default=False,
    ),
]


def signers(folder: Path | None, uris: list[str] | None) -> list[Any]:
    """The TUF signers of ``uris``, matched to the keys of the repository in ``folder``."""
    from release.publish import tuf_keys, tuf_repo  # deferred: python-tuf (release.cli)

    known: list[Any] = []
    if folder is not None and (folder / tuf_repo.METADATA_DIR).is_dir():
        known.append(tuf_repo.Repository(folder).keys_by_id())
    return tuf_keys.signers_for(uris or [], tuf_keys.key_index(*known))


def say(lines: list[str]) -> None:
    for line in lines:
        print(line)


def release_tag(value: str, flag: str = "--tag") -> str:
    """The release tag ``value`` names, as the feed spells it: ``1.1.0`` and ``v1.1.0`` are
    both ``v1.1.0`` (as ``mux update --version`` takes them); anything else is one line."""
    tag = "v" + value.strip().removeprefix("v")
    try:
        parse_tag(tag)
    except ParseError:
        raise UsageError(
            f"{flag} {value[:60]!r} is not a release tag (give X.Y.Z or vX.Y.Z, e.g. 1.1.0)"
        ) from None
    return tag


def command_help(command: str, *codes: tuple[int, str]) -> str:
    """The end of ``mux-release COMMAND --help``, laid out as mux's own: its examples
    (:data:`release.cli.examples.EXAMPLES`) and its exit codes, the shared ones (0 done,
    1 error, 2 usage error) unless ``codes`` says them its own way."""
    said = {code for code, _ in codes}
    shared = [(0, "done"), (1, "error"), (2, "usage error (bad options, nothing done)")]
    every = sorted([*codes, *(pair for pair in shared if pair[0] not in said)])
    return helptext.epilog(
        examples=[(shown(example), what) for example, what in EXAMPLES[command]],
        exit_codes=[(str(code), meaning) for code, meaning in every],
    )


# --- renamed options -------------------------------------------------------------------------

_MINISIGN_PRIVATE = {"--key-file": "--private-key-file", "--key-env": "--private-key-env"}
_TUF_PRIVATE = {
    "--tuf-release-key": "--tuf-release-private-key",
    "--tuf-online-key": "--tuf-online-private-key",
}
LIFECYCLE_VERBS = ("rollout", "halt", "resume", "withdraw", "critical")
# Per command (its words after mux-release), each replaced option spelling and its new name.
# The old spellings are accepted, hidden from --help, with a note on stderr, for one release
# (the 0.x release after this one drops them; CHANGELOG.md lists them).
RENAMED_OPTIONS: Mapping[str, Mapping[str, str]] = {
    "build": {"--key": "--public-key"},
    "install-sh": {"--key": "--public-key"},
    "verify": {"--key": "--public-key"},
    "sign": _MINISIGN_PRIVATE,
    "feed": _MINISIGN_PRIVATE | _TUF_PRIVATE,
    **{verb: _MINISIGN_PRIVATE | _TUF_PRIVATE for verb in LIFECYCLE_VERBS},
    "keygen": {"--out-dir": "--out"},
    "notices": {"--output": "--out"},
    "tuf keygen": {"--out-dir": "--out"},
    "tuf init": {
        "--root-key": "--root-public-key",
        "--targets-key": "--targets-public-key",
        "--online-key": "--online-public-key",
        "--release-key": "--release-public-key",
        "--sign": "--private-key",
    },
    "tuf add-release": {
        "--release-key": "--release-private-key",
        "--online-key": "--online-private-key",
    },
    "tuf timestamp": {"--online-key": "--online-private-key"},
    "tuf rotate": {
        "--add": "--add-public-key",
        "--remove": "--remove-key-id",
        "--sign": "--private-key",
    },
    "tuf sign": {"--sign": "--private-key"},
}


def renamed(command: str, args: list[str]) -> tuple[list[str], list[str]]:
    """``args`` of ``command`` with each old option spelling replaced by its new name, and
    the notes saying so (one per spelling used). Pure: what ``--`` is followed by is left."""
    table = RENAMED_OPTIONS.get(command, {})
    out: list[str] = []
    notes: list[str] = []
    for index, arg in enumerate(args):
        if arg == "--":
            out.extend(args[index:])
            break
        name, eq, value = arg.partition("=")
        new = table.get(name)
        if new is None:
            out.append(arg)
            continue
        out.append(new + eq + value)
        note = f"mux-release {command}: {name} is now {new} (the old name goes in a later release)"
        if note not in notes:
            notes.append(note)
    return out, notes


class Command(TyperCommand):
    """A mux-release command: its usage line shows an argument as its metavar says
    (``<FEED_DIR>``), without the braces typer puts around a required one."""

    def collect_usage_pieces(self, ctx: Context) -> list[str]:
        return [
            piece[1:-1] if piece.startswith("{<") and piece.endswith("}") else piece
            for piece in super().collect_usage_pieces(ctx)
        ]


class Group(TyperGroup):
    """mux-release's groups: a subcommand's old option spellings (:data:`RENAMED_OPTIONS`)
    become their new names before the subcommand parses them, with a note on stderr; every
    command is a :class:`Command`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for command in self.commands.values():
            if type(command) is TyperCommand:
                # typer builds every command from the one class; Command adds no state.
                command.__class__ = Command

    def resolve_command(
        self, ctx: Context, args: list[str]
    ) -> tuple[str | None, ClickCommand | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        words = [*_command_words(ctx), name or ""]
        rest, notes = renamed(" ".join(words), rest)
        for note in notes:
            print(note, file=sys.stderr)
        return name, command, rest


def _command_words(ctx: Context) -> list[str]:
    """The words naming the group of ``ctx`` after ``mux-release`` (``[]`` or ``["tuf"]``)."""
    words: list[str] = []
    while ctx.parent is not None:
        words.append(ctx.info_name or "")
        ctx = ctx.parent
    return words[::-1]


# Every command and group takes -h as --help, as mux's do.
CONTEXT_SETTINGS = helptext.CONTEXT_SETTINGS
