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

from updater.cli import helptext
from updater.cli.completions import command_tree, script
from updater.cli.render import (
    error_line,
    notices_document,
    report_click_error,
    report_error,
    to_json_line,
)
from updater.cli.server import server_app
from updater.cli.status import status_command
from updater.cli.update import UpdateFlags, route
from updater.cli.version import print_version
from updater.config.buildinfo import notices_file
from updater.errors import EXIT_USAGE, MuxError

app = typer.Typer(
    name="mux",
    help="mux: terminal multiplexer distribution and protocol-version manager.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings=helptext.CONTEXT_SETTINGS,
    epilog=helptext.MUX,
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


app.command(
    "status", epilog=helptext.STATUS, short_help="Show this install: versions, source, settings."
)(status_command)


def _mount_server_commands() -> None:
    app.add_typer(
        server_app,
        name="server",
        help="Run, inspect and watch mux servers (a server outlives any number of updates).",
        short_help="Run, inspect and watch mux servers.",
    )


@app.command(epilog=helptext.VERSION_HELP)
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


@app.command(epilog=helptext.UPDATE, short_help="Check for, verify and install the newest mux.")
def update(
    check: Annotated[
        bool, typer.Option("--check", help="Only say whether an update is available.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    source: Annotated[
        str | None,
        typer.Option(
            "--source",
            metavar=helptext.SOURCE,
            help="'github' (default), a feed URL or a feed directory. Env: MUX_UPDATE_SOURCE.",
        ),
    ] = None,
    pre: Annotated[bool, typer.Option("--pre", help="Consider pre-releases.")] = False,
    version: Annotated[
        str | None,
        typer.Option(
            "--version",
            metavar=helptext.VERSION,
            help="Ask for this release: 1.2.3, v1.2.3 or a pre-release (1.2.3-rc1).",
        ),
    ] = None,
    max_age: Annotated[
        str | None,
        typer.Option(
            "--max-age",
            metavar=helptext.DURATION,
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
        typer.Option(
            "--home",
            metavar=helptext.DIR,
            help="The install to update (default: MUX_HOME or this mux's).",
        ),
    ] = None,
    trust_key: Annotated[
        list[str] | None,
        typer.Option(
            "--trust-key",
            metavar=helptext.KEY,
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
            metavar=helptext.VERSION,
            help="Never offer (or install on its own) this version; --unskip X undoes it.",
        ),
    ] = None,
    unskip: Annotated[
        str | None,
        typer.Option(
            "--unskip", metavar=helptext.VERSION, help="Offer a version skipped with --skip again."
        ),
    ] = None,
    hold: Annotated[
        str | None,
        typer.Option(
            "--hold",
            metavar=helptext.DURATION,
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
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet", "-q", help="Print nothing but errors and warnings (the exit code tells)."
        ),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="Also print each verification layer, the download and the link.",
        ),
    ] = False,
    stage: Annotated[
        bool,
        typer.Option(
            "--stage",
            help="Download and verify the release into this install without switching to it;"
            " the next mux update applies it at once (its files re-checked).",
        ),
    ] = False,
    unstage: Annotated[
        bool, typer.Option("--unstage", help="Remove the staged release (see --stage).")
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
            quiet=quiet,
            verbose=verbose,
            stage=stage,
            unstage=unstage,
        )
    )
    raise typer.Exit(code)


@app.command(epilog=helptext.COMPLETIONS, short_help="Print a completion script for mux.")
def completions(
    shell: Annotated[
        Literal["bash", "zsh", "fish"],
        typer.Argument(metavar="bash|zsh|fish", help="bash, zsh or fish."),
    ],
) -> None:
    """Print a completion script for mux (bash: eval "$(mux completions bash)")."""
    print(script(shell, "mux", command_tree(typer.main.get_command(app))), end="")


_mount_server_commands()


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; every MuxError becomes one line on stderr."""
    args = sys.argv[1:] if argv is None else argv
    try:
        # Not standalone: click's own errors (usage) come here, to be said in JSON too.
        code = app(args=args, prog_name="mux", standalone_mode=False)
    except SystemExit as exc:  # a command's sys.exit
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else EXIT_USAGE)
    except typer.TyperException as exc:  # click's usage errors (its ClickException)
        return report_click_error(exc, as_json="--json" in args)
    except MuxError as exc:
        return report_error(exc, as_json="--json" in args)
    except (KeyboardInterrupt, typer.Abort):
        print(error_line("interrupted"), file=sys.stderr)
        return 130
    return code if isinstance(code, int) else 0
