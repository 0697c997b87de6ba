"""The ``mux`` command: a thin typer shell over the library API.

Each command reads its settings (:mod:`updater.config.settings`) and flags once, calls one library
function and renders its result (:mod:`updater.cli.render`); the work lives in
:mod:`updater.commands.check`, :mod:`updater.commands.update` and :mod:`updater.daemon.server`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Literal

import typer

from updater.cli.completions import command_tree, script
from updater.cli.render import notices_document, report_error, to_json_line
from updater.cli.server import server_app
from updater.cli.update import UpdateFlags, route
from updater.cli.version import print_version
from updater.config.buildinfo import notices_file
from updater.errors import EXIT_USAGE, MuxError

EXIT_CODES_HELP = """\
Exit codes: 0 up to date, or updated (also when a server will need a restart: it says so;
--exit-code makes that 20), or the release on offer is skipped, held, or failed to start
here (--check --json says why in "withheld"); 10 update available; 11 this release was
withdrawn (--check); 20 (--check, or --exit-code) a live server needs a restart;
1 error; 2 usage error; 3 verification failed (a signed index or release did not verify,
expired or went back; nothing was installed);
4 the machine policy (/etc/mux/policy.toml) does not allow it.
Limits: MUX_HTTP_DEADLINE (seconds per small document, default 30), MUX_HTTP_MIN_SPEED
(bytes/s an archive download must keep up, default 1024) over MUX_HTTP_SPEED_WINDOW (s, 30).
"""

app = typer.Typer(
    name="mux",
    help="mux: terminal multiplexer distribution and protocol-version manager.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        print_version(as_json=False)
        raise typer.Exit(0)


@app.callback()
def _main(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            callback=_print_version,
            is_eager=True,
            help="Print what this mux was built as (mux version) and exit.",
        ),
    ] = False,
) -> None:
    """mux: terminal multiplexer distribution and protocol-version manager."""


def _mount_server_commands() -> None:
    app.add_typer(
        server_app,
        name="server",
        help="Run, inspect and watch mux servers (a server outlives any number of updates).",
    )


@app.command()
def version(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    notices: Annotated[
        bool, typer.Option("--notices", help="Print the path of the third-party notices.")
    ] = False,
) -> None:
    """Print what this mux was built as."""
    if notices:
        path = notices_file()
        if path is None:
            raise MuxError("this mux ships no THIRD_PARTY_NOTICES.md")
        print(to_json_line(notices_document(path)) if as_json else path)
        return
    print_version(as_json=as_json)  # the same code answers the fast path


@app.command(epilog=EXIT_CODES_HELP)
def update(
    check: Annotated[
        bool, typer.Option("--check", help="Only say whether an update is available.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    source: Annotated[
        str | None,
        typer.Option(
            "--source",
            help="'github' (default), a feed URL or a feed directory. Env: MUX_UPDATE_SOURCE.",
        ),
    ] = None,
    pre: Annotated[bool, typer.Option("--pre", help="Consider pre-releases.")] = False,
    version: Annotated[
        str | None, typer.Option("--version", help="Ask for this release (X.Y.Z).")
    ] = None,
    max_age: Annotated[
        str | None,
        typer.Option(
            "--max-age",
            help="With --check: answer from the last check if younger than this (e.g. 15m,"
            " 1h; a bare number is seconds).",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan; change nothing.")
    ] = False,
    rollback: Annotated[
        bool, typer.Option("--rollback", help="Switch back to the previous installed version.")
    ] = False,
    prune: Annotated[
        bool,
        typer.Option(
            "--prune",
            help=(
                "Remove installed versions nothing needs: keeps the active and previous ones "
                "and every version a live server runs from, and says why."
            ),
        ),
    ] = False,
    home: Annotated[
        Path | None,
        typer.Option("--home", help="The install to update (default: MUX_HOME or this mux's)."),
    ] = None,
    trust_key: Annotated[
        list[str] | None,
        typer.Option(
            "--trust-key",
            help="Also trust this minisign public key (a mirror's, or a development build's):"
            " its base64 line or the path of its .pub file.",
        ),
    ] = None,
    allow_expired_feed: Annotated[
        bool,
        typer.Option(
            "--allow-expired-feed",
            help="Accept a feed whose signed index expired (an air-gapped mirror synced rarely),"
            " with a loud warning. Env: MUX_ALLOW_EXPIRED_FEED=1. The machine policy may"
            " accept or refuse it.",
        ),
    ] = False,
    allow_downgrade: Annotated[
        bool,
        typer.Option(
            "--allow-downgrade",
            help="Allow --version to install an older release (by version or signed time).",
        ),
    ] = False,
    allow_withdrawn: Annotated[
        bool,
        typer.Option(
            "--allow-withdrawn",
            help="Allow --version to install a release its publisher withdrew or halted.",
        ),
    ] = False,
    insecure_skip_attestation: Annotated[
        bool,
        typer.Option(
            "--insecure-skip-attestation",
            help="INSECURE: do not check that our release workflow built the release.",
        ),
    ] = False,
    skip: Annotated[
        str | None,
        typer.Option(
            "--skip",
            help="Never offer (or install on its own) this version; --unskip X undoes it.",
        ),
    ] = None,
    unskip: Annotated[
        str | None, typer.Option("--unskip", help="Offer a version skipped with --skip again.")
    ] = None,
    hold: Annotated[
        str | None,
        typer.Option(
            "--hold",
            help="No update offers and no automatic installs for this long, with a unit"
            " (e.g. 7d, 12h; a bare number is refused); --version X still installs X.",
        ),
    ] = None,
    unhold: Annotated[bool, typer.Option("--unhold", help="End a --hold now.")] = False,
    no_delta: Annotated[
        bool,
        typer.Option(
            "--no-delta",
            help="Download the full archive even when the release has a delta from a version"
            " this install keeps. Env: MUX_NO_DELTA=1.",
        ),
    ] = False,
    exit_code: Annotated[
        bool,
        typer.Option(
            "--exit-code",
            help="Exit 20 (not 0) after an update or rollback when a live server will need a"
            " restart, as --check does.",
        ),
    ] = False,
) -> None:
    """Check for, verify and install the newest mux; never stops a server.

    The machine policy (/etc/mux/policy.toml, written by an administrator) may allow only
    --check, turn updates off, or fix the source: then this exits 4 and says which setting.
    A mux a package manager installed names that manager's command instead (exit 1).
    GitHub Enterprise: MUX_GITHUB_URL, MUX_GITHUB_API_URL, MUX_GITHUB_DOWNLOAD_HOSTS (its
    storage hosts) and MUX_GITHUB_TOKEN.
    """
    code = route(
        UpdateFlags(
            check=check,
            as_json=as_json,
            source=source,
            pre=pre,
            version=version,
            max_age=max_age,
            dry_run=dry_run,
            rollback=rollback,
            prune=prune,
            home=home,
            trust_key=tuple(trust_key or ()),
            allow_expired_feed=allow_expired_feed,
            allow_downgrade=allow_downgrade,
            allow_withdrawn=allow_withdrawn,
            insecure_skip_attestation=insecure_skip_attestation,
            skip=skip,
            unskip=unskip,
            hold=hold,
            unhold=unhold,
            no_delta=no_delta,
            exit_code=exit_code,
        )
    )
    raise typer.Exit(code)


@app.command()
def completions(
    shell: Annotated[Literal["bash", "zsh", "fish"], typer.Argument(help="bash, zsh or fish.")],
) -> None:
    """Print a completion script for mux (bash: eval "$(mux completions bash)")."""
    print(script(shell, "mux", command_tree(typer.main.get_command(app))), end="")


_mount_server_commands()


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; every MuxError becomes one line on stderr."""
    args = sys.argv[1:] if argv is None else argv
    try:
        app(args=args, prog_name="mux")
    except SystemExit as exc:  # typer's standalone mode: usage errors, --help, typer.Exit
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else EXIT_USAGE)
    except MuxError as exc:
        return report_error(exc, as_json="--json" in args)
    except KeyboardInterrupt:
        print("mux: interrupted", file=sys.stderr)
        return 130
    return 0
