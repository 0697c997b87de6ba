"""``mux-release tuf`` (the feed's TUF repository) and ``mux-release tuf-client`` (the
conformance suite's client-under-test).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from release.cli.options import (
    RepoArgument,
    SignOption,
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
    no_args_is_help=True,
)
app.add_typer(tuf_app, name="tuf")


@tuf_app.command("keygen")
def tuf_keygen_command(
    names: Annotated[list[str], typer.Argument(help="Key names (NAME.pem, NAME.pub.json).")],
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Where to write the keys.")],
) -> None:
    """Make Ed25519 keys: NAME.pem (private, 0600: keep it offline) and NAME.pub.json."""
    from release.publish import tuf_keys  # deferred: securesystemslib (release.cli)

    for name in names:
        private, public, key = tuf_keys.generate(out_dir, name)
        print(f"{name}: {private} (private), {public} (key id {key.keyid})")


@tuf_app.command("init")
def tuf_init_command(
    folder: RepoArgument,
    root_keys: Annotated[list[Path], typer.Option("--root-key", help="A root key's .pub.json.")],
    targets_keys: Annotated[
        list[Path], typer.Option("--targets-key", help="A targets key's .pub.json.")
    ],
    online_key: Annotated[
        Path, typer.Option("--online-key", help="The snapshot and timestamp key's .pub.json.")
    ],
    release_keys: Annotated[
        list[Path], typer.Option("--release-key", help="The release workflow's key .pub.json.")
    ],
    root_threshold: Annotated[int, typer.Option("--root-threshold")] = 2,
    targets_threshold: Annotated[int, typer.Option("--targets-threshold")] = 2,
    sign_with: SignOption = None,
) -> None:
    """Make the repository: root v1, targets v1 (delegating v*/* to the release workflow),
    snapshot and timestamp. Roles the --sign keys cannot sign yet wait in staged/."""
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


@tuf_app.command("add-release")
def tuf_add_release_command(
    folder: RepoArgument,
    release_dir: Annotated[Path, typer.Argument(help="A packaged, signed release folder.")],
    release_key: Annotated[list[str], typer.Option("--release-key", help="Its private key.")],
    online_key: Annotated[list[str], typer.Option("--online-key", help="Its private key.")],
) -> None:
    """List every file of a release as a target (length, sha256, custom version, protocol,
    target), then a new snapshot and timestamp."""
    from release.publish import tuf_repo  # deferred: python-tuf (release.cli)

    say(
        tuf_repo.add_release(
            folder, release_dir, signers(folder, release_key), signers(folder, online_key)
        )
    )


@tuf_app.command("timestamp")
def tuf_timestamp_command(
    folder: RepoArgument,
    online_key: Annotated[list[str], typer.Option("--online-key", help="Its private key.")],
    expires_in: Annotated[
        str, typer.Option("--expires-in", help="At most 24h (a freeze is caught within it).")
    ] = "24h",
) -> None:
    """Re-sign the timestamp (and the snapshot when it is due): the feed workflow's schedule."""
    from release.publish import tuf_repo  # deferred: python-tuf (release.cli)

    say(tuf_repo.refresh(folder, signers(folder, online_key), expires_in=parse_expiry(expires_in)))


@tuf_app.command("rotate")
def tuf_rotate_command(
    folder: RepoArgument,
    role: Annotated[
        str, typer.Option("--role", help="root, targets, snapshot, timestamp or release-workflow.")
    ],
    add: Annotated[list[Path] | None, typer.Option("--add", help="A key's .pub.json.")] = None,
    remove: Annotated[
        list[str] | None, typer.Option("--remove", help="A key id (8+ hex digits) to revoke.")
    ] = None,
    threshold: Annotated[int | None, typer.Option("--threshold")] = None,
    sign_with: SignOption = None,
) -> None:
    """A new root (or targets, for the release workflow's keys) with keys added, replaced or
    revoked; published once a threshold of the old and the new keys signed it."""
    from release.publish import tuf_keys, tuf_repo  # deferred: python-tuf (release.cli)

    change = tuf_repo.KeyChange(
        role=role,
        add=[tuf_keys.read_public_key(p) for p in add or []],
        remove=list(remove or []),
        threshold=threshold,
    )
    say(tuf_repo.rotate(folder, [change], signers(folder, sign_with)))


@tuf_app.command("sign")
def tuf_sign_command(
    folder: RepoArgument,
    role: Annotated[str, typer.Argument(help="root, targets or release-workflow.")],
    sign_with: SignOption = None,
) -> None:
    """Add a keyholder's signature to the staged version of a role; published once it meets
    its threshold."""
    from release.publish import tuf_repo  # deferred: python-tuf (release.cli)

    say(tuf_repo.sign(folder, role, signers(folder, sign_with)))


# --- tuf-client ----------------------------------------------------------------------------


@app.command("tuf-client")
def tuf_client_command(
    action: Annotated[str, typer.Argument(help="init, refresh or download.")],
    trusted_root: Annotated[
        str | None, typer.Argument(help="init: the root.json to trust.", show_default=False)
    ] = None,
    metadata_dir: Annotated[
        str, typer.Option("--metadata-dir", help="Where the trusted metadata is kept.")
    ] = "",
    metadata_url: Annotated[
        str | None, typer.Option("--metadata-url", help="The repository's metadata URL.")
    ] = None,
    target_names: Annotated[
        list[str] | None,
        typer.Option("--target-name", help="A target to download (repeatable, in order)."),
    ] = None,
    target_base_url: Annotated[
        str | None, typer.Option("--target-base-url", help="Where targets are downloaded from.")
    ] = None,
    target_dir: Annotated[
        str | None, typer.Option("--target-dir", help="Where downloaded targets go.")
    ] = None,
) -> None:
    """mux's TUF client as tuf-conformance's client-under-test (its CLIENT-CLI.md): exit 0
    or 1."""
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
