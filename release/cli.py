"""The ``mux-release`` command: thin wrappers over the release modules.

Each command parses its flags, calls one function of a release module (:mod:`release.build`,
:mod:`release.publish`, ...) and prints the result. Failures are one line on stderr with the
exit code of their kind (:mod:`updater.errors`).

Every command's start, ``mux-release --help`` included, pays for what is imported here (about
510 M instructions for ``--help``, callgrind), so the commands whose modules bring a large
library import them when they run, each saying which (on top of ``import release.cli``): the
builds and the bill bring :mod:`importlib.metadata` (+115 M); ``repin``, ``verify`` and
``fetch-artifacts`` the updater's HTTP stack, httpx (+750 M); ``rehearse`` that and
cryptography's X.509 (+1 G); ``tuf``, ``tuf-client`` and ``feed --tuf-online-key`` python-tuf
and securesystemslib. Everything else is imported below. tomlkit, the ``release`` extra,
is imported by :mod:`release.pins.pinfile` when it reads a file, so without it ``mux-release``
still starts and :func:`main` says how to get it.

Commands are a flat list; add new ones as their own block below, following the same shape (a
lifecycle verb with :func:`_lifecycle_verb`, which declares the options they share once).
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

import updater
from release.build.glibc import GLIBC_FLOOR, check_glibc_floor
from release.build.reproduce import compare_builds, read_environment
from release.checkout import REPO_ROOT, write_text_atomically
from release.pins.pinfile import DEFAULT_NOTICES_PATH, DEFAULT_PINS_PATH, check_pins, load_pins
from release.publish.delta import write_deltas
from release.publish.feed import parse_duration as parse_expiry
from release.publish.feed import sign_feed_index
from release.publish.flags import MAX_RELEASE_LIST_BYTES, parse_release_list, plan_publish
from release.publish.install_script import write_install_script
from release.publish.lifecycle import (
    TufSigners,
    change_lifecycle,
    clock,
    critical,
    describe,
    halt,
    parse_stages,
    resume,
    rollout,
    withdraw,
)
from release.publish.package import package_release, read_release_notes, sign_release
from release.publish.signing import SecretKey, generate_keypair
from release.upkeep.protocol import LOCK_PATH, check_protocol, record_protocol
from updater.cli.completions import command_tree
from updater.cli.completions import script as completion_script
from updater.config import settings
from updater.config.marker import MARKER_NAME, marker_document
from updater.errors import EXIT_ERROR, MuxError, UsageError
from updater.files import NotReadable, atomic_write, read_small_file
from updater.formats.lifecycle import Interval, Lifecycle
from updater.formats.minisign import PublicKey
from updater.protocol import PROTOCOL_VERSION
from updater.timestamps import parse_duration, rfc3339

app = typer.Typer(
    name="mux-release",
    help="Build, package and sign mux releases.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

DEFAULT_PASSWORD_ENV = "MINISIGN_PASSWORD"
SECRET_KEY_NAME = "minisign.key"
PUBLIC_KEY_NAME = "minisign.pub"
# What the `release` extra of the mux distribution adds (pyproject.toml).
RELEASE_EXTRA_MODULES = frozenset({"tomlkit"})


def _password_from_env(variable: str) -> str | None:
    return os.environ.get(variable) or None


# How `sign` and `feed` take the release's secret key.
_KeyFileOption = Annotated[
    Path | None, typer.Option("--key-file", help="minisign secret key file.")
]
_KeyEnvOption = Annotated[
    str | None,
    typer.Option("--key-env", help="Environment variable holding the secret key file text."),
]
_PasswordEnvOption = Annotated[
    str, typer.Option("--password-env", help="Environment variable holding the password.")
]


def _read_secret_key(key_file: Path | None, key_env: str | None, password_env: str) -> SecretKey:
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
    return SecretKey.parse(data, _password_from_env(password_env))


# --- build -------------------------------------------------------------------------------


@app.command()
def build(
    out: Annotated[Path, typer.Option("--out", help="Folder to write mux-<target>/ into.")] = Path(
        "dist"
    ),
    version: Annotated[
        str | None, typer.Option("--version", help="Release version (default: the project's).")
    ] = None,
    protocol_version: Annotated[
        int | None,
        typer.Option("--protocol-version", help="Default: updater.protocol.PROTOCOL_VERSION."),
    ] = None,
    repo: Annotated[
        str, typer.Option("--repo", envvar="GITHUB_REPOSITORY", help="owner/name to update from.")
    ] = "",
    keys: Annotated[
        list[str] | None,
        typer.Option("--key", help="Trusted minisign public key (base64 line); at most two."),
    ] = None,
    target: Annotated[
        str | None, typer.Option("--target", help="Default: this machine's target.")
    ] = None,
    standin: Annotated[
        bool, typer.Option("--standin", help="Fast sh + Python stand-in (tests, rehearsal).")
    ] = False,
    pins: Annotated[
        Path | None,
        typer.Option(
            "--pins", help="pins.toml of the artifacts to ship (default: release/pins.toml)."
        ),
    ] = None,
    artifacts: Annotated[
        Path | None,
        typer.Option(
            "--artifacts",
            help="Folder holding each pinned asset under its asset name (never downloaded); "
            "each is checked against its pin and shipped as vendor/<name>/<asset>.",
        ),
    ] = None,
    policy_file: Annotated[
        str,
        typer.Option(
            "--policy-file",
            help="Where the build reads the machine policy (absolute path; default "
            "/etc/mux/policy.toml).",
        ),
    ] = "/etc/mux/policy.toml",
    tuf_root: Annotated[
        Path | None,
        typer.Option(
            "--tuf-root",
            help="The root.json of the project's TUF repository this build trusts first "
            "(its version 1, or the newest: a build follows every rotation after it).",
        ),
    ] = None,
    tuf_metadata_url: Annotated[
        str,
        typer.Option(
            "--tuf-metadata-url",
            help="Where that repository's metadata is published (the feed's metadata/ on "
            "GitHub Pages); the GitHub source reads it.",
        ),
    ] = "",
) -> None:
    """Build mux for this machine with its build info (version, protocol, keys, TUF root)
    baked in.

    Every artifact pinned in pins.toml ships inside the build, after its size and sha256 were
    checked against the pin (exit 3 on a mismatch, nothing written).
    """
    from release.build.standalone import build_standalone  # importlib.metadata (docstring)
    from release.build.standin import build_standin  # importlib.metadata (docstring)

    if not keys:
        raise UsageError("give at least one trusted minisign public key with --key")
    if version is None:
        version = updater.__version__  # the source tree's: release jobs do not install the project
    if protocol_version is None:
        protocol_version = PROTOCOL_VERSION
    make = build_standin if standin else build_standalone
    folder = make(
        out,
        version=version,
        protocol_version=protocol_version,
        repo=repo,
        minisign_keys=keys,
        target=target,
        pins_path=pins or DEFAULT_PINS_PATH,
        artifacts_dir=artifacts,
        policy_file=policy_file,
        tuf_root=_read_small(tuf_root, "--tuf-root") if tuf_root is not None else None,
        tuf_metadata_url=tuf_metadata_url,
    )
    print(folder)


def _read_small(path: Path, what: str, limit: int = 512_000) -> bytes:
    try:
        data = read_small_file(str(path), limit)
    except (NotReadable, OSError) as exc:
        raise UsageError(f"{what} {path}: {exc}") from None
    if data is None:
        raise UsageError(f"{what} {path} does not exist")
    return data


# --- package -----------------------------------------------------------------------------


@app.command()
def package(
    build_dirs: Annotated[list[Path], typer.Argument(help="Built mux-<target>/ folders.")],
    out: Annotated[Path, typer.Option("--out", help="Empty folder for the release files.")],
    released_at: Annotated[
        str | None, typer.Option("--released-at", help="RFC 3339 time (default: now).")
    ] = None,
    notes: Annotated[
        Path | None,
        typer.Option(
            "--notes",
            help="The release notes (Markdown, at most 64 KiB): signed in manifest.json, "
            "shown by mux update.",
        ),
    ] = None,
) -> None:
    """Write mux-<target>.tar.gz, manifest.json and SHA256SUMS from built folders."""
    release_notes = "" if notes is None else read_release_notes(notes)
    manifest = package_release(
        build_dirs, out, released_at=released_at, release_notes=release_notes
    )
    for asset in manifest.assets:
        print(f"{out / asset.name}  {asset.sha256}")
    print(f"mux {manifest.version} (protocol {manifest.protocol_version}) packaged in {out}")


# --- delta -------------------------------------------------------------------------------


@app.command("delta")
def delta_command(
    release_dir: Annotated[Path, typer.Argument(help="A packaged release folder.")],
    previous: Annotated[
        list[Path] | None,
        typer.Option(
            "--previous",
            help="An earlier release folder (its archives and manifest.json); repeat it. "
            "Deltas are made from the newest three below this release.",
        ),
    ] = None,
) -> None:
    """Write each target's signed file list and its deltas from earlier releases.

    Run after package and before attest and sign: SHA256SUMS is rewritten over the new files
    (its signature removed). A delta of half the full archive or more is not published."""
    report = write_deltas(release_dir, previous or (), say=print)
    published = [d for d in report.deltas if d.published]
    print(
        f"{len(report.file_lists)} file lists, {len(published)} deltas written in {release_dir}"
        f" ({len(report.deltas) - len(published)} refused)"
    )


# --- sign --------------------------------------------------------------------------------


@app.command()
def sign(
    release_dir: Annotated[Path, typer.Argument(help="A packaged release folder.")],
    key_file: _KeyFileOption = None,
    key_env: _KeyEnvOption = None,
    password_env: _PasswordEnvOption = DEFAULT_PASSWORD_ENV,
) -> None:
    """Sign SHA256SUMS into SHA256SUMS.minisig with a minisign secret key."""
    key = _read_secret_key(key_file, key_env, password_env)
    path = sign_release(release_dir, key)
    print(f"{path} signed with minisign key {key.key_id}")


# --- feed --------------------------------------------------------------------------------


_TufReleaseKeyOption = Annotated[
    list[str] | None,
    typer.Option(
        "--tuf-release-key",
        help="The release workflow's TUF key (file2:PATH, env:NAME, KEYID=URI), for the "
        "feed's TUF repository (metadata/): it signs each release's files and lifecycle.",
    ),
]
_TufOnlineKeyOption = Annotated[
    list[str] | None,
    typer.Option("--tuf-online-key", help="The TUF snapshot and timestamp key."),
]


@app.command("feed")
def feed_command(
    feed_dir: Annotated[Path, typer.Argument(help="The feed folder (releases.json, v*/).")],
    key_file: _KeyFileOption = None,
    key_env: _KeyEnvOption = None,
    password_env: _PasswordEnvOption = DEFAULT_PASSWORD_ENV,
    expires_in: Annotated[
        str, typer.Option("--expires-in", help="How long the signature holds (14d, 12h, 3600s).")
    ] = "14d",
    refresh: Annotated[
        bool,
        typer.Option("--refresh", help="Re-sign releases.json as it is (next seq, new expiry)."),
    ] = False,
    seq: Annotated[
        int | None,
        typer.Option("--seq", help="Sequence number to sign (default: the previous one + 1)."),
    ] = None,
    new_feed: Annotated[
        bool,
        typer.Option(
            "--new-feed",
            help="A feed never published: with releases but no signed index, start at seq 1 "
            "(or --seq) with no lifecycle records, instead of refusing.",
        ),
    ] = False,
    tuf_release_key: _TufReleaseKeyOption = None,
    tuf_online_key: _TufOnlineKeyOption = None,
) -> None:
    """Write releases.json from the v*/ folders and sign it (releases.json.minisig).

    The trusted comment carries seq (previous + 1) and expires; clients refuse an expired
    index and a lower seq than they have seen. Re-sign before it expires (--refresh). A feed
    with releases but no signed index continues from its TUF repository (metadata/), or is
    refused unless --new-feed (docs/release.md, "A feed that lost its index").
    """
    seconds = parse_expiry(expires_in)
    key = _read_secret_key(key_file, key_env, password_env)
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
        from release.publish import tuf_repo  # python-tuf (docstring)

        online = _signers(feed_dir, tuf_online_key)
        # The timestamp records the seq just signed: what a feed that loses its index
        # continues from (release.publish.feed.continued_state).
        index = tuf_repo.IndexSeq(signed.key_id, signed.comment.seq)
        if refresh:
            # The index re-signed as it is: TUF gets a new timestamp, and nothing new is listed
            # (a release whose own feed run failed must not reach TUF builds alone).
            _say(tuf_repo.refresh(feed_dir, online, index=index))
        else:
            _say(
                tuf_repo.publish_feed(
                    feed_dir, _signers(feed_dir, tuf_release_key), online, index=index
                )
            )


# --- lifecycle: rollout, halt, resume, withdraw, critical ----------------------------------

_TagOption = Annotated[str, typer.Option("--tag", help="The release (vX.Y.Z), listed in the feed.")]
_ExpiresOption = Annotated[
    str, typer.Option("--expires-in", help="How long the new signature holds (14d, 12h).")
]
_FeedDirArgument = Annotated[Path, typer.Argument(help="The feed folder (releases.json, v*/).")]
_NotesOption = Annotated[
    str | None, typer.Option("--notes", help="A short plain-text summary (1000 characters).")
]
# What a lifecycle verb signs: the record of a release, changed.
Change = Callable[[Lifecycle], Lifecycle]


def _sign_change(
    change: Change,
    feed_dir: _FeedDirArgument,
    tag: _TagOption,
    key_file: _KeyFileOption = None,
    key_env: _KeyEnvOption = None,
    password_env: _PasswordEnvOption = DEFAULT_PASSWORD_ENV,
    tuf_release_key: _TufReleaseKeyOption = None,
    tuf_online_key: _TufOnlineKeyOption = None,
    expires_in: _ExpiresOption = "14d",
) -> None:
    """Sign ``change`` to the lifecycle record of ``tag`` into the feed's index (and its TUF
    repository, given its keys). Its other parameters are the options every lifecycle verb
    takes, declared here once (:func:`_lifecycle_verb`)."""
    key = _read_secret_key(key_file, key_env, password_env)
    tuf = None
    if tuf_release_key or tuf_online_key:
        tuf = TufSigners(_signers(feed_dir, tuf_release_key), _signers(feed_dir, tuf_online_key))
    changed = change_lifecycle(
        feed_dir, key, tag, change, expires_in=parse_expiry(expires_in), tuf=tuf
    )
    print(describe(changed))


def _lifecycle_verb(name: str) -> Callable[[Callable[..., Change]], Callable[..., Change]]:
    """Register ``mux-release NAME``, a lifecycle verb.

    The decorated function takes the feed folder and the verb's own options and returns the
    change; the command takes :func:`_sign_change`'s options around them (the feed folder and
    ``--tag`` first, the signing options last, as ``--help`` lists them) and signs it. typer
    reads a command's parameters from its signature, so the command's is written from the two.
    """
    shared = list(inspect.signature(_sign_change, eval_str=True).parameters.values())[1:]
    first, last = shared[:2], shared[2:]

    def register(verb: Callable[..., Change]) -> Callable[..., Change]:
        own = list(inspect.signature(verb, eval_str=True).parameters.values())[1:]

        def command(**options: Any) -> None:
            signing = {param.name: options.pop(param.name) for param in shared}
            _sign_change(verb(signing["feed_dir"], **options), **signing)

        params = [
            param.replace(kind=inspect.Parameter.KEYWORD_ONLY) for param in (*first, *own, *last)
        ]
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {param.name: param.annotation for param in params}
        command.__doc__ = verb.__doc__
        app.command(name)(command)
        return verb

    return register


@_lifecycle_verb("rollout")
def rollout_command(
    feed_dir: Path,
    stages: Annotated[
        str | None,
        typer.Option(
            "--stages",
            help="Percentages and when each starts: 5,25@1d,100@3d (offsets from now) or "
            "5@2026-12-01T12:00:00Z.",
        ),
    ] = None,
    interval: Annotated[
        str | None,
        typer.Option(
            "--interval",
            help="Sparkle's phased rollout: one more of seven groups every INTERVAL (1d).",
        ),
    ] = None,
    full: Annotated[bool, typer.Option("--full", help="Offer it to everyone now.")] = False,
    notes: _NotesOption = None,
) -> Change:
    """Stage a release (or finish its rollout with --full) in the feed's signed index."""
    if sum(x is not None and x is not False for x in (stages, interval, full or None)) != 1:
        raise UsageError("give one of --stages, --interval or --full")
    now = clock()
    planned = parse_stages(stages, now=now) if stages is not None else None
    every = None
    if interval is not None:
        try:
            every = Interval(now, int(parse_duration(interval)))
        except ValueError as exc:
            raise UsageError(f"--interval: {exc}") from None
    return rollout(planned, every, notes)


@_lifecycle_verb("halt")
def halt_command(feed_dir: Path) -> Change:
    """Stop a release's rollout: offered to nobody who has not installed it."""
    return halt


@_lifecycle_verb("resume")
def resume_command(feed_dir: Path) -> Change:
    """Resume a halted rollout where its stages stand."""
    return resume


@_lifecycle_verb("withdraw")
def withdraw_command(
    feed_dir: Path,
    reason: Annotated[
        str, typer.Option("--reason", help="Why (300 characters), shown to every machine on it.")
    ],
    replacement: Annotated[
        str | None,
        typer.Option("--replacement", help="The release (vX.Y.Z) machines on it move to."),
    ] = None,
) -> Change:
    """Withdraw a release: never installed again, and machines on it move off it."""
    if replacement is not None and not (feed_dir / replacement / "manifest.json").is_file():
        raise UsageError(f"--replacement {replacement}: the feed has no such release")
    return withdraw(reason, replacement)


@_lifecycle_verb("critical")
def critical_command(
    feed_dir: Path,
    minimum_version: Annotated[
        str | None,
        typer.Option(
            "--minimum-version", help="Every older install needs this update (status, watch)."
        ),
    ] = None,
    notes: _NotesOption = None,
) -> Change:
    """Mark a release critical: offered at once, skipping stages and delays (not a pin)."""
    return critical(minimum_version, notes)


# --- keygen ------------------------------------------------------------------------------


@app.command()
def keygen(
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Where to write the key pair.")],
    password_env: Annotated[
        str, typer.Option("--password-env", help="Environment variable holding the password.")
    ] = DEFAULT_PASSWORD_ENV,
    no_password: Annotated[
        bool, typer.Option("--no-password", help="Store the secret key unencrypted.")
    ] = False,
) -> None:
    """Make a minisign key pair (minisign.key, minisign.pub) for signing releases."""
    password = None if no_password else _password_from_env(password_env)
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
    print(f"secret key: {secret_path} (keep it secret; `mux-release sign --key-file`)")
    print(f"public key: {public_path} (id {key.key_id})")
    print(key.to_base64())
    print("Put the public key line in:")
    print("  - the repository variable MUX_MINISIGN_PUBLIC_KEY (a new project), or")
    print("    MUX_MINISIGN_NEXT_PUBLIC_KEY (a rotation: builds and the published install.sh")
    print("    then trust both; swap them once every user has a build that trusts the new one)")
    print("  - the secret MUX_MINISIGN_SECRET_KEY (the secret key file's text) and")
    print("    MUX_MINISIGN_PASSWORD in the repository's `release` environment")
    print(f"  - locally: mux-release build --key {key.to_base64()}")


# --- packager-marker ---------------------------------------------------------------------


@app.command("packager-marker")
def packager_marker_command(
    folder: Annotated[
        Path, typer.Argument(help="The unpacked build folder: the one holding the mux executable.")
    ],
    manager: Annotated[
        str, typer.Option("--manager", help="Who manages this install, e.g. Homebrew, Nix, Debian.")
    ],
    update_command: Annotated[
        str, typer.Option("--update-command", help="What updates it, e.g. 'brew upgrade mux'.")
    ],
    announce_delay: Annotated[
        str,
        typer.Option(
            "--announce-delay",
            help="How long after a release `mux update --check` waits before announcing it "
            "(e.g. 24h: the time the package needs to catch up).",
        ),
    ] = "0",
) -> None:
    """Write the packager marker (mux-packager.json) next to a packaged build's executable:
    `mux update` then refuses with --update-command, and `mux update --check` names it."""
    if not (folder / "mux").is_file():
        raise UsageError(f"{folder} holds no mux executable; give the unpacked build folder")
    try:
        delay = parse_duration(announce_delay)
    except ValueError as exc:
        raise UsageError(f"--announce-delay: {exc}") from None
    document = marker_document(manager, update_command, round(delay))
    path = folder / MARKER_NAME
    atomic_write(path, (json.dumps(document, indent=2) + "\n").encode(), mode=0o644)
    print(path)


# -----------------------------------------------------------------------------------------


def main() -> None:
    try:
        app(prog_name="mux-release")
    except MuxError as exc:
        print(f"mux-release: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except ModuleNotFoundError as exc:
        if exc.name not in RELEASE_EXTRA_MODULES:
            raise
        print(
            f"mux-release: error: {exc.name} is missing: the release tooling is the optional "
            "extra of mux (pip install 'mux[release]'; in a checkout, uv sync)",
            file=sys.stderr,
        )
        sys.exit(EXIT_ERROR)
    except OSError as exc:  # disk full, permissions, a file where a folder should be
        detail = f"{exc.strerror}: {exc.filename}" if exc.filename else str(exc)
        print(f"mux-release: error: {detail}", file=sys.stderr)
        sys.exit(EXIT_ERROR)


# =========================================================================================
# repin, pins, notices, protocol: release/upkeep/repin.py, release/pins/pinfile.py,
# release/bill/third_party_notices.py, release/upkeep/protocol.py.
# Registered at import time like the commands above; main() runs after the module loaded.
# =========================================================================================

_PinsOption = Annotated[
    Path | None, typer.Option("--pins", help="pins.toml to use (default: release/pins.toml).")
]


def _pins_path(pins: Path | None) -> Path:
    return pins or DEFAULT_PINS_PATH


def _notices_path(notices: Path | None) -> Path:
    return notices or DEFAULT_NOTICES_PATH


@app.command("repin")
def repin_command(
    name: Annotated[str, typer.Argument(help="The artifact's name in pins.toml.")],
    tag: Annotated[str | None, typer.Option("--tag", help="Pin this release tag.")] = None,
    latest: Annotated[bool, typer.Option("--latest", help="Pin the newest release.")] = False,
    allow_downgrade: Annotated[
        bool, typer.Option("--allow-downgrade", help="Allow a tag older than the pinned one.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Verify and print the changes; write nothing.")
    ] = False,
    source: Annotated[
        str | None,
        typer.Option("--source", help="A mirror (feed URL or folder) instead of GitHub."),
    ] = None,
    trusted_root: Annotated[
        Path | None,
        typer.Option(
            "--trusted-root", help="Sigstore trusted_root.json (default: Sigstore's own)."
        ),
    ] = None,
    pins: _PinsOption = None,
    notices: Annotated[
        Path | None, typer.Option("--notices", help="Notices file (default: the repository's).")
    ] = None,
) -> None:
    """Move a pin to a verified release asset, and regenerate the notices."""
    from release.upkeep.repin import repin as run_repin  # httpx (docstring)

    result = run_repin(
        name,
        tag=tag,
        latest=latest,
        pins_path=_pins_path(pins),
        notices_path=_notices_path(notices),
        source=source,
        trusted_root=trusted_root,
        allow_downgrade=allow_downgrade,
        dry_run=dry_run,
        progress=lambda line: print(line, file=sys.stderr),
        settings=settings.load(os.environ),
    )
    for line in result.describe():
        print(line)


@app.command("pins")
def pins_command(
    check: Annotated[
        bool, typer.Option("--check", help="Check every pin and the notices; exit 1 on a problem.")
    ] = False,
    pins: _PinsOption = None,
    notices: Annotated[
        Path | None, typer.Option("--notices", help="Notices file (default: the repository's).")
    ] = None,
) -> None:
    """List the pinned artifacts, or (--check) check them offline for CI."""
    path = _pins_path(pins)
    if check:
        problems = check_pins(path, notices_path=_notices_path(notices))
        for problem in problems:
            print(f"mux-release: pins: {problem}", file=sys.stderr)
        if problems:
            raise typer.Exit(1)
        print(f"{path}: every pin is complete and the notices name it")
        return
    loaded = load_pins(path)
    for pin in loaded:
        for item in pin.files:
            where = f" [{item.target}]" if item.target else ""
            print(f"{pin.name}{where}  {pin.tag}  {item.sha256}  {pin.repository}/{item.asset}")
    if not loaded:
        print(f"{path}: no artifact is pinned")


@app.command("notices")
def notices_command(
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 with a diff when the file is stale.")
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option("--output", help="Notices file (default: THIRD_PARTY_NOTICES.md)."),
    ] = None,
    check_build: Annotated[
        Path | None,
        typer.Option(
            "--check-build",
            help="Map every file of this build folder to a notice entry (exit 1 naming any "
            "that maps to nothing) and check its THIRD_PARTY_NOTICES.md and SBOM.",
        ),
    ] = None,
    pins: _PinsOption = None,
) -> None:
    """Write THIRD_PARTY_NOTICES.md, or (--check) fail when it is stale."""
    from release.bill.bill import check_build as run_check_build  # importlib.metadata
    from release.bill.third_party_notices import (  # importlib.metadata
        check_notices,
        generate_notices,
    )

    if check_build is not None:
        if not check_build.is_dir():
            raise UsageError(f"{check_build} is not a build folder")
        bill = run_check_build(check_build, pins_path=_pins_path(pins))
        print(
            f"{check_build}: every one of its {bill.files} files maps to one of "
            f"{bill.components} components; its notices and SBOM are current"
        )
        return
    path = _notices_path(output)
    expected = generate_notices(_pins_path(pins))
    if check:
        diff = check_notices(path, expected)
        if diff is not None:
            sys.stdout.write(diff)
            print(f"mux-release: error: {path} is stale (run mux-release notices)", file=sys.stderr)
            raise typer.Exit(1)
        print(f"{path} is current")
        return
    write_text_atomically(path, expected)
    print(f"wrote {path}")


@app.command("protocol")
def protocol_command(
    record: Annotated[
        bool, typer.Option("--record", help="Record the fingerprint after a protocol bump.")
    ] = False,
    root: Annotated[
        Path | None, typer.Option("--root", help="Repository root (default: this checkout).")
    ] = None,
) -> None:
    """Show the protocol version; fail when protocol code changed without a bump."""
    if record:
        state = record_protocol(root or REPO_ROOT)
        print(
            f"recorded protocol version {state.protocol_version} "
            f"(fingerprint {state.fingerprint[:12]}) in {LOCK_PATH}"
        )
        return
    print(check_protocol(root or REPO_ROOT).summary())


# --- verify ------------------------------------------------------------------------------


@app.command("verify")
def verify_command(
    location: Annotated[str, typer.Argument(help="A release folder, or a tag (vX.Y.Z) on GitHub.")],
    keys: Annotated[
        list[str] | None,
        typer.Option(
            "--key",
            envvar="MUX_MINISIGN_PUBLIC_KEY",
            help="Trusted minisign public key (base64 line).",
        ),
    ] = None,
    repo: Annotated[
        str,
        typer.Option(
            "--repo",
            envvar=["MUX_REPO", "GITHUB_REPOSITORY"],
            help="owner/name whose release workflow must have built it.",
        ),
    ] = "",
    tag: Annotated[str | None, typer.Option("--tag", help="The tag of a release folder.")] = None,
    insecure_skip_attestation: Annotated[
        bool, typer.Option("--insecure-skip-attestation", help="INSECURE: skip layer 3.")
    ] = False,
    tuf_root: Annotated[
        Path | None,
        typer.Option(
            "--tuf-root",
            help="Also read the release through the TUF repository this root.json starts "
            "(the feed's metadata/ beside a release folder, or --tuf-metadata).",
        ),
    ] = None,
    tuf_metadata: Annotated[
        str | None, typer.Option("--tuf-metadata", help="The TUF repository's URL or folder.")
    ] = None,
) -> None:
    """Run exactly the verification `mux update` runs, and print each layer's result."""
    from release.publish.verify import verify_release  # httpx (docstring)

    try:
        result = verify_release(
            location,
            keys=keys or [],
            repo=repo,
            tag=tag,
            skip_attestation=insecure_skip_attestation,
            settings=settings.load(os.environ),
            tuf_root=_read_small(tuf_root, "--tuf-root") if tuf_root is not None else None,
            tuf_metadata=tuf_metadata,
        )
    except MuxError as exc:
        print(f"mux-release: {exc}", file=sys.stderr)
        raise typer.Exit(exc.exit_code) from None
    print(f"verified {result.location} ({result.tag})")
    for layer in result.log.layers:
        mark = "ok" if layer.status == "ok" else "SKIPPED"
        print(f"  {layer.layer}: {mark}: {layer.detail}")


# --- rehearse ----------------------------------------------------------------------------


@app.command("rehearse")
def rehearse_command(
    standin: Annotated[
        bool,
        typer.Option("--standin", help="Use fast stand-in builds instead of PyInstaller."),
    ] = False,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the work folder.")] = False,
    build: Annotated[
        Path | None,
        typer.Option(
            "--build",
            help="Rehearse with this standalone build (mux-release build) instead of making one.",
        ),
    ] = None,
) -> None:
    """Rehearse a whole release offline: build, sign, attest, serve, install, update, restart."""
    from release.rehearsal.rehearse import rehearse  # httpx, cryptography (docstring)

    try:
        rehearse(standin=standin, keep=keep, build=build)
    except MuxError as exc:
        print(f"mux-release: rehearsal failed: {exc}", file=sys.stderr)
        raise typer.Exit(exc.exit_code) from None


# --- tuf -----------------------------------------------------------------------------------

tuf_app = typer.Typer(
    help="The feed's TUF repository: make it, add releases, sign, rotate keys, re-sign the "
    'timestamp (docs/release.md, "The key ceremony").',
    no_args_is_help=True,
)
app.add_typer(tuf_app, name="tuf")

_SignOption = Annotated[
    list[str] | None,
    typer.Option(
        "--sign",
        help="A private key to sign with: file2:PATH (PEM), env:NAME, or KEYID=URI for a "
        "hardware or KMS key (repeatable).",
    ),
]
_RepoArgument = Annotated[
    Path, typer.Argument(help="The repository's folder (the feed: it holds metadata/).")
]


def _signers(folder: Path | None, uris: list[str] | None) -> list[Any]:
    from release.publish import tuf_keys, tuf_repo  # python-tuf (docstring)

    known: list[Any] = []
    if folder is not None and (folder / tuf_repo.METADATA_DIR).is_dir():
        known.append(tuf_repo.Repository(folder).keys_by_id())
    return tuf_keys.signers_for(uris or [], tuf_keys.key_index(*known))


def _say(lines: list[str]) -> None:
    for line in lines:
        print(line)


@tuf_app.command("keygen")
def tuf_keygen_command(
    names: Annotated[list[str], typer.Argument(help="Key names (NAME.pem, NAME.pub.json).")],
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Where to write the keys.")],
) -> None:
    """Make Ed25519 keys: NAME.pem (private, 0600: keep it offline) and NAME.pub.json."""
    from release.publish import tuf_keys  # securesystemslib (docstring)

    for name in names:
        private, public, key = tuf_keys.generate(out_dir, name)
        print(f"{name}: {private} (private), {public} (key id {key.keyid})")


@tuf_app.command("init")
def tuf_init_command(
    folder: _RepoArgument,
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
    sign_with: _SignOption = None,
) -> None:
    """Make the repository: root v1, targets v1 (delegating v*/* to the release workflow),
    snapshot and timestamp. Roles the --sign keys cannot sign yet wait in staged/."""
    from release.publish import tuf_keys, tuf_repo  # python-tuf (docstring)

    keys = tuf_repo.Keys(
        root=[tuf_keys.read_public_key(p) for p in root_keys],
        root_threshold=root_threshold,
        targets=[tuf_keys.read_public_key(p) for p in targets_keys],
        targets_threshold=targets_threshold,
        online=tuf_keys.read_public_key(online_key),
        release=[tuf_keys.read_public_key(p) for p in release_keys],
    )
    _say(tuf_repo.create(folder, keys, _signers(None, sign_with)))


@tuf_app.command("add-release")
def tuf_add_release_command(
    folder: _RepoArgument,
    release_dir: Annotated[Path, typer.Argument(help="A packaged, signed release folder.")],
    release_key: Annotated[list[str], typer.Option("--release-key", help="Its private key.")],
    online_key: Annotated[list[str], typer.Option("--online-key", help="Its private key.")],
) -> None:
    """List every file of a release as a target (length, sha256, custom version, protocol,
    target), then a new snapshot and timestamp."""
    from release.publish import tuf_repo  # python-tuf (docstring)

    _say(
        tuf_repo.add_release(
            folder, release_dir, _signers(folder, release_key), _signers(folder, online_key)
        )
    )


@tuf_app.command("timestamp")
def tuf_timestamp_command(
    folder: _RepoArgument,
    online_key: Annotated[list[str], typer.Option("--online-key", help="Its private key.")],
    expires_in: Annotated[
        str, typer.Option("--expires-in", help="At most 24h (a freeze is caught within it).")
    ] = "24h",
) -> None:
    """Re-sign the timestamp (and the snapshot when it is due): the feed workflow's schedule."""
    from release.publish import tuf_repo  # python-tuf (docstring)

    _say(
        tuf_repo.refresh(folder, _signers(folder, online_key), expires_in=parse_expiry(expires_in))
    )


@tuf_app.command("rotate")
def tuf_rotate_command(
    folder: _RepoArgument,
    role: Annotated[
        str, typer.Option("--role", help="root, targets, snapshot, timestamp or release-workflow.")
    ],
    add: Annotated[list[Path] | None, typer.Option("--add", help="A key's .pub.json.")] = None,
    remove: Annotated[
        list[str] | None, typer.Option("--remove", help="A key id (8+ hex digits) to revoke.")
    ] = None,
    threshold: Annotated[int | None, typer.Option("--threshold")] = None,
    sign_with: _SignOption = None,
) -> None:
    """A new root (or targets, for the release workflow's keys) with keys added, replaced or
    revoked; published once a threshold of the old and the new keys signed it."""
    from release.publish import tuf_keys, tuf_repo  # python-tuf (docstring)

    change = tuf_repo.KeyChange(
        role=role,
        add=[tuf_keys.read_public_key(p) for p in add or []],
        remove=list(remove or []),
        threshold=threshold,
    )
    _say(tuf_repo.rotate(folder, [change], _signers(folder, sign_with)))


@tuf_app.command("sign")
def tuf_sign_command(
    folder: _RepoArgument,
    role: Annotated[str, typer.Argument(help="root, targets or release-workflow.")],
    sign_with: _SignOption = None,
) -> None:
    """Add a keyholder's signature to the staged version of a role; published once it meets
    its threshold."""
    from release.publish import tuf_repo  # python-tuf (docstring)

    _say(tuf_repo.sign(folder, role, _signers(folder, sign_with)))


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
    from release.rehearsal.tuf_client import run  # python-tuf and httpx (docstring)

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


# --- install-sh --------------------------------------------------------------------------


@app.command("install-sh")
def install_sh_command(
    out: Annotated[Path, typer.Option("--out", help="Where to write the published copy.")],
    keys: Annotated[
        list[str] | None,
        typer.Option(
            "--key",
            envvar="MUX_MINISIGN_PUBLIC_KEY",
            help="Trusted minisign public key (base64 line); one or two.",
        ),
    ] = None,
    repo: Annotated[
        str | None,
        typer.Option("--repo", envvar="GITHUB_REPOSITORY", help="owner/name to install from."),
    ] = None,
    policy_file: Annotated[
        str | None,
        typer.Option(
            "--policy-file",
            help="Where it reads the machine policy (default /etc/mux/policy.toml).",
        ),
    ] = None,
) -> None:
    """Write the install.sh a release publishes: this one with the repo and keys filled in."""
    try:
        written = write_install_script(out, keys=keys or [], repo=repo, policy_file=policy_file)
    except MuxError as exc:
        print(f"mux-release: {exc}", file=sys.stderr)
        raise typer.Exit(exc.exit_code) from None
    print(f"wrote {written} (repo {repo or 'unchanged'}, {len(keys or [])} trusted key(s))")


# --- fetch-artifacts, glibc, compare-builds, publish-flags --------------------------------------


@app.command("fetch-artifacts")
def fetch_artifacts_command(
    target: Annotated[str, typer.Option("--target", help="The target whose build needs them.")],
    out: Annotated[Path, typer.Option("--out", help="Folder to download them into.")],
    pins: _PinsOption = None,
) -> None:
    """Download the pinned artifacts a build for TARGET ships (and nothing else), checked
    against their pins; then `mux-release build --artifacts DIR` ships them."""
    from release.pins.fetch import fetch_artifacts  # httpx (docstring)

    fetched = fetch_artifacts(
        _pins_path(pins), target, out, quiet=False, settings=settings.load(os.environ)
    )
    for item in fetched:
        state = "already there" if item.reused else "downloaded"
        print(f"{item.path}  {item.sha256}  ({item.pin}, {state})")
    if not fetched:
        print(f"no pinned artifact ships in a {target} build")


@app.command("glibc")
def glibc_command(
    folder: Annotated[Path, typer.Argument(help="A built mux-<target>/ folder (Linux, gnu).")],
    maximum: Annotated[
        str | None,
        typer.Option("--max", help="The newest glibc the build may need (default: the floor)."),
    ] = None,
) -> None:
    """Print the newest glibc a build needs (objdump -T); exit 1 naming every file that needs
    more than --max (default: the release's floor, release/build/glibc.py)."""
    floor = maximum or GLIBC_FLOOR
    requirement = check_glibc_floor(folder, floor)
    print(f"{folder} {requirement.describe()}; the floor is glibc {floor}")


@app.command("compare-builds")
def compare_builds_command(
    first: Annotated[Path, typer.Argument(help="A build folder.")],
    second: Annotated[Path, typer.Argument(help="Another build of the same version and target.")],
    environments: Annotated[
        tuple[Path, Path] | None,
        typer.Option(
            "--environments",
            help="The machines the two builds ran on (the build jobs' JSON files): a "
            "difference between builds from different machines is reported, not failed.",
        ),
    ] = None,
) -> None:
    """Fail (exit 1, naming the files) unless two builds package to identical archives; with
    --environments, builds from different machines that differ are "not comparable" (exit 0)."""
    recorded = None
    if environments is not None:
        recorded = (read_environment(environments[0]), read_environment(environments[1]))
    print(compare_builds(first, second, recorded).describe())


@app.command("publish-flags")
def publish_flags_command(
    tag: Annotated[str, typer.Option("--tag", help="The tag being published (vX.Y.Z).")],
    published: Annotated[
        Path,
        typer.Option(
            "--published",
            help="The published releases: `gh release list --json tagName` output ('-': stdin).",
        ),
    ],
) -> None:
    """Print the gh release flags for TAG: --latest=true only for the highest stable version
    among the published releases. An empty or unreadable list fails (a failed gh)."""
    try:
        if str(published) == "-":
            raw = sys.stdin.buffer.read(MAX_RELEASE_LIST_BYTES + 1)
        else:
            with open(published, "rb") as stream:
                raw = stream.read(MAX_RELEASE_LIST_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {published}: {exc.strerror}") from None
    plan = plan_publish(tag, parse_release_list(raw, what=str(published)))
    print(" ".join(plan.gh_flags()))


@app.command("completions")
def completions_command(
    shell: Annotated[Literal["bash", "zsh", "fish"], typer.Argument(help="bash, zsh or fish.")],
) -> None:
    """Print a completion script for mux-release (bash: eval "$(mux-release completions bash)")."""
    tree = command_tree(typer.main.get_command(app))
    print(completion_script(shell, "mux-release", tree), end="")
