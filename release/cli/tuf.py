"""``mux-release tuf`` (the feed's TUF repository) and ``mux-release tuf-client`` (the
conformance suite's client-under-test).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from release.cli.options import (
    Group,
    RepoArgument,
    SignOption,
    command_help,
    say,
    signers,
)
from release.publish.feed import parse_duration as parse_expiry
from updater.errors import UsageError

app = typer.Typer()


# --- tuf -----------------------------------------------------------------------------------

tuf_app = typer.Typer(
    help="The feed's TUF repository: make it, add releases, sign, rotate keys, re-sign the "
    'timestamp (docs/release.md, "The key ceremony").',
    short_help="The feed's TUF repository: keys, releases, signatures.",
    no_args_is_help=True,
    cls=Group,
)


def _help(name: str) -> str:
    """``tuf NAME``'s examples and exit codes (every tuf command's are the same)."""
    return command_help(
        f"tuf {name}",
        (0, "done: signed and published, or staged until enough keys sign (each printed)"),
        (1, "error (e.g. a key that cannot sign)"),
    )


app.add_typer(tuf_app, name="tuf")


@tuf_app.command("keygen", epilog=_help("keygen"))
def tuf_keygen_command(
    names: Annotated[
        list[str],
        typer.Argument(metavar="<NAME>...", help="Key names (NAME.pem, NAME.pub.json)."),
    ],
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="<DIR>", help="Where to write the keys.")
    ],
) -> None:
    """Make Ed25519 keys for the TUF repository.

    NAME.pem is the private key (0600: keep it offline), NAME.pub.json the public key."""
    from release.publish import tuf_keys  # deferred: securesystemslib (release.cli)

    for name in names:
        private, public, key = tuf_keys.generate(out_dir, name)
        print(f"{name}: {private} (private), {public} (key id {key.keyid})")


@tuf_app.command("init", epilog=_help("init"))
def tuf_init_command(
    folder: RepoArgument,
    root_keys: Annotated[
        list[Path],
        typer.Option("--root-public-key", metavar="<PUB_JSON>", help="A root key's .pub.json."),
    ],
    targets_keys: Annotated[
        list[Path],
        typer.Option(
            "--targets-public-key", metavar="<PUB_JSON>", help="A targets key's .pub.json."
        ),
    ],
    online_key: Annotated[
        Path,
        typer.Option(
            "--online-public-key",
            metavar="<PUB_JSON>",
            help="The snapshot and timestamp key's .pub.json.",
        ),
    ],
    release_keys: Annotated[
        list[Path],
        typer.Option(
            "--release-public-key",
            metavar="<PUB_JSON>",
            help="The release workflow's key .pub.json.",
        ),
    ],
    root_threshold: Annotated[int, typer.Option("--root-threshold", metavar="<N>")] = 2,
    targets_threshold: Annotated[int, typer.Option("--targets-threshold", metavar="<N>")] = 2,
    sign_with: SignOption = None,
) -> None:
    """Make the TUF repository.

    Root v1, targets v1 (delegating v*/* to the release workflow), snapshot and timestamp.
    Roles the --private-key keys cannot sign yet wait in staged/."""
    from release.publish import tuf_keys, tuf_repo  # deferred: python-tuf (release.cli)

    keys = tuf_repo.Keys(
        root=[tuf_keys.read_public_key(p) for p in root_keys],
        root_threshold=root_threshold,
        targets=[tuf_keys.read_public_key(p) for p in targets_keys],
        targets_threshold=targets_threshold,
        online=tuf_keys.read_public_key(online_key),
        release=[tuf_keys.read_public_key(p) for p in release_keys],
    )
    say(tuf_repo.create(folder, keys, signers(None, sign_with)))


_OnlinePrivateKeyOption = Annotated[
    list[str],
    typer.Option(
        "--online-private-key",
        metavar="<KEY_URI>",
        help="The snapshot and timestamp private key (file2:PATH, env:NAME, KEYID=URI).",
    ),
]


@tuf_app.command("add-release", epilog=_help("add-release"))
def tuf_add_release_command(
    folder: RepoArgument,
    release_dir: Annotated[
        Path,
        typer.Argument(metavar="<RELEASE_DIR>", help="A packaged, signed release folder."),
    ],
    release_key: Annotated[
        list[str],
        typer.Option(
            "--release-private-key",
            metavar="<KEY_URI>",
            help="The release workflow's private key (file2:PATH, env:NAME, KEYID=URI).",
        ),
    ],
    online_key: _OnlinePrivateKeyOption,
) -> None:
    """List a release's files in the TUF repository.

    Each file is a target (length, sha256, custom version, protocol, target), then a new
    snapshot and timestamp are signed."""
    from release.publish import tuf_repo  # deferred: python-tuf (release.cli)

    say(
        tuf_repo.add_release(
            folder, release_dir, signers(folder, release_key), signers(folder, online_key)
        )
    )


@tuf_app.command("timestamp", epilog=_help("timestamp"))
def tuf_timestamp_command(
    folder: RepoArgument,
    online_key: _OnlinePrivateKeyOption,
    expires_in: Annotated[
        str,
        typer.Option(
            "--expires-in",
            metavar="<DURATION>",
            help="At most 24h (a freeze is caught within it).",
        ),
    ] = "24h",
) -> None:
    """Re-sign the TUF timestamp (the feed workflow's schedule).

    The snapshot is re-signed too when it is due."""
    from release.publish import tuf_repo  # deferred: python-tuf (release.cli)

    say(tuf_repo.refresh(folder, signers(folder, online_key), expires_in=parse_expiry(expires_in)))


@tuf_app.command("rotate", epilog=_help("rotate"))
def tuf_rotate_command(
    folder: RepoArgument,
    role: Annotated[
        str,
        typer.Option(
            "--role",
            metavar="<ROLE>",
            help="root, targets, snapshot, timestamp or release-workflow.",
        ),
    ],
    add: Annotated[
        list[Path] | None,
        typer.Option("--add-public-key", metavar="<PUB_JSON>", help="A key's .pub.json to add."),
    ] = None,
    remove: Annotated[
        list[str] | None,
        typer.Option(
            "--remove-key-id", metavar="<KEY_ID>", help="A key id (8+ hex digits) to revoke."
        ),
    ] = None,
    threshold: Annotated[int | None, typer.Option("--threshold", metavar="<N>")] = None,
    sign_with: SignOption = None,
) -> None:
    """Add, replace or revoke a TUF role's keys.

    A new root (or targets, for the release workflow's keys), published once a threshold of
    the old and the new keys signed it."""
    from release.publish import tuf_keys, tuf_repo  # deferred: python-tuf (release.cli)

    change = tuf_repo.KeyChange(
        role=role,
        add=[tuf_keys.read_public_key(p) for p in add or []],
        remove=list(remove or []),
        threshold=threshold,
    )
    say(tuf_repo.rotate(folder, [change], signers(folder, sign_with)))


@tuf_app.command("sign", epilog=_help("sign"))
def tuf_sign_command(
    folder: RepoArgument,
    role: Annotated[
        str, typer.Argument(metavar="<ROLE>", help="root, targets or release-workflow.")
    ],
    sign_with: SignOption = None,
) -> None:
    """Sign the staged version of a TUF role.

    It is published once it meets its threshold."""
    from release.publish import tuf_repo  # deferred: python-tuf (release.cli)

    say(tuf_repo.sign(folder, role, signers(folder, sign_with)))


# --- tuf-client ----------------------------------------------------------------------------


# Hidden: tuf-conformance's client-under-test, not a release engineer's command.
@app.command(
    "tuf-client", hidden=True, epilog=command_help("tuf-client", (1, "the suite's failure"))
)
def tuf_client_command(
    action: Annotated[
        str, typer.Argument(metavar="<init|refresh|download>", help="init, refresh or download.")
    ],
    trusted_root: Annotated[
        str | None,
        typer.Argument(
            metavar="<ROOT_JSON>", help="init: the root.json to trust.", show_default=False
        ),
    ] = None,
    metadata_dir: Annotated[
        str,
        typer.Option("--metadata-dir", metavar="<DIR>", help="Where the trusted metadata is kept."),
    ] = "",
    metadata_url: Annotated[
        str | None,
        typer.Option("--metadata-url", metavar="<URL>", help="The repository's metadata URL."),
    ] = None,
    target_names: Annotated[
        list[str] | None,
        typer.Option(
            "--target-name",
            metavar="<NAME>",
            help="A target to download (repeatable, in order).",
        ),
    ] = None,
    target_base_url: Annotated[
        str | None,
        typer.Option(
            "--target-base-url", metavar="<URL>", help="Where targets are downloaded from."
        ),
    ] = None,
    target_dir: Annotated[
        str | None,
        typer.Option("--target-dir", metavar="<DIR>", help="Where downloaded targets go."),
    ] = None,
) -> None:
    """mux's TUF client, as tuf-conformance drives it.

    The suite's client-under-test (its CLIENT-CLI.md): exit 0 or 1."""
    from release.rehearsal.tuf_client import run  # deferred: python-tuf and httpx (release.cli)

    if not metadata_dir:
        raise UsageError("--metadata-dir is required")
    code = run(
        action,
        metadata_dir=metadata_dir,
        metadata_url=metadata_url,
        trusted_root=trusted_root,
        target_names=target_names or [],
        target_dir=target_dir,
        target_base_url=target_base_url,
    )
    raise typer.Exit(code)
