"""The options and arguments several ``mux-release`` commands share, declared once, and the
helpers that read them (secret keys, TUF signers, small files).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from release.pins.pinfile import DEFAULT_NOTICES_PATH, DEFAULT_PINS_PATH
from release.publish.signing import SecretKey
from updater.errors import UsageError
from updater.files import NotReadable, read_small_file

DEFAULT_PASSWORD_ENV = "MINISIGN_PASSWORD"


def password_from_env(variable: str) -> str | None:
    return os.environ.get(variable) or None


# How `sign` and `feed` take the release's secret key.
KeyFileOption = Annotated[Path | None, typer.Option("--key-file", help="minisign secret key file.")]
KeyEnvOption = Annotated[
    str | None,
    typer.Option("--key-env", help="Environment variable holding the secret key file text."),
]
PasswordEnvOption = Annotated[
    str, typer.Option("--password-env", help="Environment variable holding the password.")
]


def read_secret_key(key_file: Path | None, key_env: str | None, password_env: str) -> SecretKey:
    """The secret key from ``--key-file`` or ``--key-env``, opened with the password variable."""
    if (key_file is None) == (key_env is None):
        raise UsageError("give exactly one of --key-file and --key-env")
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
        "--tuf-release-key",
        help="The release workflow's TUF key (file2:PATH, env:NAME, KEYID=URI), for the "
        "feed's TUF repository (metadata/): it signs each release's files and lifecycle.",
    ),
]
TufOnlineKeyOption = Annotated[
    list[str] | None,
    typer.Option("--tuf-online-key", help="The TUF snapshot and timestamp key."),
]

# The lifecycle verbs'.
TagOption = Annotated[str, typer.Option("--tag", help="The release (vX.Y.Z), listed in the feed.")]
ExpiresOption = Annotated[
    str, typer.Option("--expires-in", help="How long the new signature holds (14d, 12h).")
]
FeedDirArgument = Annotated[Path, typer.Argument(help="The feed folder (releases.json, v*/).")]
NotesOption = Annotated[
    str | None, typer.Option("--notes", help="A short plain-text summary (1000 characters).")
]

# pins.toml, for the builds and the upkeep commands.
PinsOption = Annotated[
    Path | None, typer.Option("--pins", help="pins.toml to use (default: release/pins.toml).")
]


def pins_path(pins: Path | None) -> Path:
    return pins or DEFAULT_PINS_PATH


def notices_path(notices: Path | None) -> Path:
    return notices or DEFAULT_NOTICES_PATH


# The TUF repository's commands.
SignOption = Annotated[
    list[str] | None,
    typer.Option(
        "--sign",
        help="A private key to sign with: file2:PATH (PEM), env:NAME, or KEYID=URI for a "
        "hardware or KMS key (repeatable).",
    ),
]
RepoArgument = Annotated[
    Path, typer.Argument(help="The repository's folder (the feed: it holds metadata/).")
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
