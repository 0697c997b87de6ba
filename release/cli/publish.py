"""``mux-release`` commands that sign and publish: sign, feed, keygen, install-sh, publish-flags,
verify.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from release.cli.options import (
    DEFAULT_PASSWORD_ENV,
    FeedDirArgument,
    KeyEnvOption,
    KeyFileOption,
    PasswordEnvOption,
    PublicKeysFromEnvOption,
    TufOnlineKeyOption,
    TufReleaseKeyOption,
    command_help,
    password_from_env,
    read_secret_key,
    read_small,
    release_tag,
    say,
    signers,
)
from release.publish.feed import parse_duration as parse_expiry
from release.publish.feed import sign_feed_index
from release.publish.flags import MAX_RELEASE_LIST_BYTES, parse_release_list, plan_publish
from release.publish.install_script import write_install_script
from release.publish.package import sign_release
from release.publish.signing import generate_keypair
from updater.config import settings
from updater.errors import MuxError, UsageError
from updater.formats.minisign import PublicKey
from updater.timestamps import rfc3339

app = typer.Typer()

SECRET_KEY_NAME = "minisign.key"
PUBLIC_KEY_NAME = "minisign.pub"


# --- sign --------------------------------------------------------------------------------


@app.command(epilog=command_help("sign", (0, "signed (the signature's path printed)")))
def sign(
    release_dir: Annotated[
        Path, typer.Argument(metavar="<RELEASE_DIR>", help="A packaged release folder.")
    ],
    key_file: KeyFileOption = None,
    key_env: KeyEnvOption = None,
    password_env: PasswordEnvOption = DEFAULT_PASSWORD_ENV,
) -> None:
    """Sign a release's SHA256SUMS with minisign.

    The signature goes into SHA256SUMS.minisig, made with the minisign private key."""
    key = read_secret_key(key_file, key_env, password_env)
    path = sign_release(release_dir, key)
    print(f"{path} signed with minisign key {key.key_id}")


# --- feed --------------------------------------------------------------------------------


@app.command(
    "feed",
    epilog=command_help(
        "feed",
        (0, "written and signed"),
        (1, "error (a published feed with no signed index is refused without --new-feed)"),
    ),
)
def feed_command(
    feed_dir: FeedDirArgument,
    key_file: KeyFileOption = None,
    key_env: KeyEnvOption = None,
    password_env: PasswordEnvOption = DEFAULT_PASSWORD_ENV,
    expires_in: Annotated[
        str,
        typer.Option(
            "--expires-in",
            metavar="<DURATION>",
            help="How long the signature holds (14d, 12h, 3600s).",
        ),
    ] = "14d",
    refresh: Annotated[
        bool,
        typer.Option("--refresh", help="Re-sign releases.json as it is (next seq, new expiry)."),
    ] = False,
    seq: Annotated[
        int | None,
        typer.Option(
            "--seq", metavar="<N>", help="Sequence number to sign (default: the previous one + 1)."
        ),
    ] = None,
    new_feed: Annotated[
        bool,
        typer.Option(
            "--new-feed",
            help="A feed never published: with releases but no signed index, start at seq 1 "
            "(or --seq) with no lifecycle records, instead of refusing.",
        ),
    ] = False,
    tuf_release_key: TufReleaseKeyOption = None,
    tuf_online_key: TufOnlineKeyOption = None,
) -> None:
    """Write the feed's index, releases.json, and sign it.

    The index lists the v*/ folders; its signature is releases.json.minisig. The trusted comment carries seq (previous + 1) and expires; clients refuse an expired
    index and a lower seq than they have seen. Re-sign before it expires (--refresh). A feed
    with releases but no signed index continues from its TUF repository (metadata/), or is
    refused unless --new-feed (docs/release.md, "A feed that lost its index").
    """
    seconds = parse_expiry(expires_in)
    key = read_secret_key(key_file, key_env, password_env)
    signed = sign_feed_index(
        feed_dir, key, expires_in=seconds, refresh=refresh, seq=seq, new_feed=new_feed
    )
    action = "re-signed" if refresh else "wrote and signed"
    origin = "" if signed.origin == "the signed index" else f" ({signed.origin})"
    print(
        f"{action} {signed.index} with minisign key {signed.key_id}: "
        f"seq {signed.comment.seq}{origin}, expires {rfc3339(signed.comment.expires)}"
    )
    if tuf_online_key:
        from release.publish import tuf_repo  # deferred: python-tuf (release.cli)

        online = signers(feed_dir, tuf_online_key)
        # The timestamp records the seq just signed: what a feed that loses its index
        # continues from (release.publish.feed.continued_state).
        index = tuf_repo.IndexSeq(signed.key_id, signed.comment.seq)
        if refresh:
            # The index re-signed as it is: TUF gets a new timestamp, and nothing new is listed
            # (a release whose own feed run failed must not reach TUF builds alone).
            say(tuf_repo.refresh(feed_dir, online, index=index))
        else:
            say(
                tuf_repo.publish_feed(
                    feed_dir, signers(feed_dir, tuf_release_key), online, index=index
                )
            )


# --- keygen ------------------------------------------------------------------------------


@app.command(
    epilog=command_help(
        "keygen", (2, "usage error (also: a key file is already there; nothing is overwritten)")
    )
)
def keygen(
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="<DIR>", help="Where to write the key pair.")
    ],
    password_env: PasswordEnvOption = DEFAULT_PASSWORD_ENV,
    no_password: Annotated[
        bool, typer.Option("--no-password", help="Store the private key unencrypted.")
    ] = False,
) -> None:
    """Make a minisign key pair for signing releases.

    minisign.key is the private key (0600), minisign.pub the public key."""
    password = None if no_password else password_from_env(password_env)
    if password is None and not no_password:
        raise UsageError(f"set {password_env} to the key's password, or pass --no-password")
    secret_path, public_path = out_dir / SECRET_KEY_NAME, out_dir / PUBLIC_KEY_NAME
    for path in (secret_path, public_path):
        if path.exists():
            raise UsageError(f"{path} already exists; not overwriting a key")
    secret, public_text = generate_keypair(password)
    out_dir.mkdir(parents=True, exist_ok=True)
    # The secret key is created private (0600) from the start, never widened.
    fd = os.open(secret_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as stream:
        stream.write(secret)
    public_path.write_text(public_text, encoding="utf-8")
    key = PublicKey.parse(public_text)
    print(f"private key: {secret_path} (keep it secret; `mux-release sign --private-key-file`)")
    print(f"public key: {public_path} (id {key.key_id})")
    print(key.to_base64())
    print("Put the public key line in:")
    print("  - the repository variable MUX_MINISIGN_PUBLIC_KEY (a new project), or")
    print("    MUX_MINISIGN_NEXT_PUBLIC_KEY (a rotation: builds and the published install.sh")
    print("    then trust both; swap them once every user has a build that trusts the new one)")
    print("  - the secret MUX_MINISIGN_SECRET_KEY (the secret key file's text) and")
    print("    MUX_MINISIGN_PASSWORD in the repository's `release` environment")
    print(f"  - locally: mux-release build --public-key {key.to_base64()}")


# --- install-sh --------------------------------------------------------------------------


@app.command("install-sh", epilog=command_help("install-sh", (0, "written")))
def install_sh_command(
    out: Annotated[
        Path, typer.Option("--out", metavar="<FILE>", help="Where to write the published copy.")
    ],
    keys: PublicKeysFromEnvOption = None,
    repo: Annotated[
        str | None,
        typer.Option(
            "--repo",
            metavar="<OWNER/NAME>",
            envvar="GITHUB_REPOSITORY",
            help="owner/name to install from. Env: GITHUB_REPOSITORY.",
        ),
    ] = None,
    policy_file: Annotated[
        str | None,
        typer.Option(
            "--policy-file",
            metavar="<PATH>",
            help="Where it reads the machine policy (default /etc/mux/policy.toml).",
        ),
    ] = None,
) -> None:
    """Write the install.sh a release publishes.

    It is this repository's install.sh with the repo and keys filled in."""
    try:
        written = write_install_script(out, keys=keys or [], repo=repo, policy_file=policy_file)
    except MuxError as exc:
        print(f"mux-release: {exc}", file=sys.stderr)
        raise typer.Exit(exc.exit_code) from None
    print(f"wrote {written} (repo {repo or 'unchanged'}, {len(keys or [])} trusted key(s))")


@app.command(
    "publish-flags",
    epilog=command_help(
        "publish-flags", (1, "error (an empty or unreadable list of releases: a failed gh)")
    ),
)
def publish_flags_command(
    tag: Annotated[
        str,
        typer.Option(
            "--tag", metavar="<X.Y.Z>", help="The release being published (1.1.0 or v1.1.0)."
        ),
    ],
    published: Annotated[
        Path,
        typer.Option(
            "--published",
            metavar="<FILE>",
            help="The published releases: `gh release list --json tagName` output ('-': stdin).",
        ),
    ],
) -> None:
    """Print the gh release flags for a release.

    --latest=true only for the highest stable version among the published releases. An empty or unreadable list fails (a failed gh)."""
    try:
        if str(published) == "-":
            raw = sys.stdin.buffer.read(MAX_RELEASE_LIST_BYTES + 1)
        else:
            with open(published, "rb") as stream:
                raw = stream.read(MAX_RELEASE_LIST_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {published}: {exc.strerror}") from None
    plan = plan_publish(release_tag(tag), parse_release_list(raw, what=str(published)))
    print(" ".join(plan.gh_flags()))


# --- verify ------------------------------------------------------------------------------


@app.command(
    "verify",
    epilog=command_help(
        "verify",
        (0, "verified (each layer's result printed)"),
        (3, "verification failed (the layer and why on stderr)"),
    ),
)
def verify_command(
    location: Annotated[
        str,
        typer.Argument(
            metavar="<RELEASE_DIR|X.Y.Z>",
            help="A release folder, or a release on GitHub (1.1.0 or v1.1.0).",
        ),
    ],
    keys: PublicKeysFromEnvOption = None,
    repo: Annotated[
        str,
        typer.Option(
            "--repo",
            metavar="<OWNER/NAME>",
            envvar=["MUX_REPO", "GITHUB_REPOSITORY"],
            help="owner/name whose release workflow must have built it. Env: MUX_REPO, "
            "GITHUB_REPOSITORY.",
        ),
    ] = "",
    tag: Annotated[
        str | None,
        typer.Option(
            "--tag", metavar="<X.Y.Z>", help="The release of a release folder (1.1.0 or v1.1.0)."
        ),
    ] = None,
    insecure_skip_attestation: Annotated[
        bool, typer.Option("--insecure-skip-attestation", help="INSECURE: skip layer 3.")
    ] = False,
    tuf_root: Annotated[
        Path | None,
        typer.Option(
            "--tuf-root",
            metavar="<ROOT_JSON>",
            help="Also read the release through the TUF repository this root.json starts "
            "(the feed's metadata/ beside a release folder, or --tuf-metadata).",
        ),
    ] = None,
    tuf_metadata: Annotated[
        str | None,
        typer.Option(
            "--tuf-metadata", metavar="<URL|DIR>", help="The TUF repository's URL or folder."
        ),
    ] = None,
) -> None:
    """Verify a release as `mux update` does.

    Runs exactly the verification `mux update` runs, and prints each layer's result."""
    from release.publish.verify import verify_release  # deferred: httpx (release.cli)

    if location[:1].isdigit() and not Path(location).is_dir():
        location = "v" + location  # a release named as mux update --version takes it
    try:
        result = verify_release(
            location,
            keys=keys or [],
            repo=repo,
            tag=None if tag is None else release_tag(tag),
            skip_attestation=insecure_skip_attestation,
            settings=settings.load(os.environ),
            tuf_root=read_small(tuf_root, "--tuf-root") if tuf_root is not None else None,
            tuf_metadata=tuf_metadata,
        )
    except MuxError as exc:
        print(f"mux-release: {exc}", file=sys.stderr)
        raise typer.Exit(exc.exit_code) from None
    print(f"verified {result.location} ({result.tag})")
    for layer in result.log.layers:
        mark = "ok" if layer.status == "ok" else "SKIPPED"
        print(f"  {layer.layer}: {mark}: {layer.detail}")
