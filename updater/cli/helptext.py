"""What each ``mux`` command's ``--help`` ends with: examples, exit codes, the environment.

One builder (:func:`epilog`) lays them out the same way for every command, as lines click
keeps as written (a paragraph that starts with ``\\b``), so that a table stays a table at any
terminal width; the notes after them are wrapped as prose. tests/test_help.py holds every
command to it: its exit codes, two or three examples that parse, metavars that say what to
type, and ``-h``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

# The tables' width (click indents the epilog by two more), and the gap after a name.
WIDTH = 76
_GAP = 2

# What ``-h`` and ``--help`` both show (click's context setting, inherited by subcommands).
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}

# Metavars: what to type, not its Python type.
VERSION = "<X.Y.Z>"
SOURCE = "<github|URL|DIR>"
DURATION = "<DURATION>"
DIR = "<DIR>"
KEY = "<KEY|FILE.pub>"
NAME = "<NAME>"
SOCKET = "<PATH>"
SERVER_URL = "<URL>"


def _table(title: str, rows: Sequence[tuple[str, str]]) -> str:
    """``title:`` then one row per (name, what): the names in a column as wide as the
    longest, each ``what`` wrapped to fit beside it within :data:`WIDTH`."""
    width = max(len(name) for name, _ in rows) + _GAP
    lines = [f"{title}:"]
    for name, what in rows:
        wrapped = textwrap.wrap(what, WIDTH - 2 - width) or [""]
        lines.append(f"  {name.ljust(width)}{wrapped[0]}".rstrip())
        lines += [" " * (2 + width) + more for more in wrapped[1:]]
    return "\b\n" + "\n".join(lines)


def _examples(rows: Sequence[tuple[str, str]]) -> str:
    """Each example's command on its own line, what it does below it."""
    lines = ["Examples:"]
    for command, what in rows:
        lines += [
            f"  {command}",
            *textwrap.wrap(what, WIDTH, initial_indent="      ", subsequent_indent="      "),
        ]
    return "\b\n" + "\n".join(lines)


def epilog(
    *,
    examples: Sequence[tuple[str, str]],
    exit_codes: Sequence[tuple[str, str]],
    environment: Sequence[tuple[str, str]] = (),
    notes: str = "",
) -> str:
    """Examples (command, what it does), exit codes (code, meaning), the environment
    variables (name, meaning) and notes (prose), in that order."""
    parts = [_examples(examples), _table("Exit codes", exit_codes)]
    if environment:
        parts.append(_table("Environment", environment))
    if notes:
        parts.append(notes)
    return "\n\n".join(parts)


USAGE_ERROR = ("2", "usage error (one line saying which option, nothing changed)")

MUX = epilog(
    examples=[
        ("mux update", "install the newest release (verified; servers keep running)"),
        ("mux update --check", "only say whether one is available"),
        ("mux server status", "every server: version, protocol, where it runs from"),
    ],
    exit_codes=[("0", "done"), ("1", "error"), USAGE_ERROR],
    notes="Each command's -h lists its own exit codes and examples.",
)

VERSION_HELP = epilog(
    examples=[
        ("mux version", "what this mux was built as"),
        ("mux version --json", "the same as one JSON object"),
        ("mux version --notices", "where the third-party notices are"),
    ],
    exit_codes=[("0", "printed"), ("1", "this mux ships no notices (--notices)"), USAGE_ERROR],
)

UPDATE = epilog(
    examples=[
        ("mux update", "install the newest release; says which servers need a restart"),
        ("mux update --check --json", "is one available? (exit 10), for scripts"),
        ("mux update --version 1.2.3 --allow-downgrade", "install exactly 1.2.3, even older"),
    ],
    exit_codes=[
        (
            "0",
            "up to date, or updated (also when a server will need a restart: it says so;"
            " --exit-code makes that 20), or the release on offer is skipped, held, or failed"
            ' to start here (--check --json says why in "withheld")',
        ),
        ("10", "update available (--check)"),
        (
            "11",
            "the installed release was withdrawn by its publisher (--check; mux "
            "update when nothing may replace it)",
        ),
        ("20", "a live server needs a restart (--check, or --exit-code)"),
        ("1", "error"),
        USAGE_ERROR,
        (
            "3",
            "verification failed (a signed index or release did not verify, expired "
            "or went back; nothing was installed)",
        ),
        ("4", "the machine policy (/etc/mux/policy.toml) does not allow it"),
    ],
    environment=[
        ("MUX_UPDATE_SOURCE", "same as --source (MUX_DOWNLOAD_URL, install.sh's older name)"),
        ("MUX_HOME", "same as --home"),
        ("MUX_INSTALL_DIR", "where the mux link goes (default: $XDG_BIN_HOME or ~/.local/bin)"),
        ("MUX_REPO", "the GitHub repository owner/name to update from"),
        ("MUX_GITHUB_URL", "GitHub Enterprise's web address (MUX_GITHUB_API_URL: its API)"),
        ("MUX_GITHUB_DOWNLOAD_HOSTS", "GitHub Enterprise's storage hosts"),
        ("MUX_GITHUB_TOKEN", "a token sent to the GitHub hosts only (GITHUB_TOKEN works too)"),
        ("MUX_ALLOW_EXPIRED_FEED=1", "same as --allow-expired-feed"),
        ("MUX_NO_DELTA=1", "same as --no-delta"),
        ("MUX_TARGET", "the build to install (default: detected)"),
        ("MUX_LOCK_TIMEOUT", "seconds to wait for another install or update (default 10)"),
        ("MUX_HTTP_DEADLINE", "seconds for each small document (default 30)"),
        ("MUX_HTTP_MIN_SPEED", "an archive download gives up below this many bytes/s (1024)"),
        ("MUX_HTTP_SPEED_WINDOW", "... averaged over this many seconds (default 30)"),
        ("MUX_SERVER_URL", "the server to ask (else every socket in the runtime dir)"),
        ("HTTPS_PROXY, NO_PROXY", "proxies; SSL_CERT_FILE: the CA bundle to trust"),
    ],
)

COMPLETIONS = epilog(
    examples=[
        ('eval "$(mux completions bash)"', "in ~/.bashrc"),
        ("mux completions zsh > ~/.zfunc/_mux", "zsh, with ~/.zfunc on fpath"),
        ("mux completions fish > ~/.config/fish/completions/mux.fish", "fish"),
    ],
    exit_codes=[("0", "printed"), USAGE_ERROR],
)

SERVER = epilog(
    examples=[
        ("mux server start", "start the default server"),
        ("mux server status", "every server this mux knows"),
        ("mux server restart --name work", "the server 'work' on this mux's build"),
    ],
    exit_codes=[("0", "done"), ("1", "error"), USAGE_ERROR],
    notes="Each command's -h lists its own exit codes and examples.",
)

NOT_YOURS = ("6", "the address is not your server's: another user's, or no mux server's")

SERVER_START = epilog(
    examples=[
        ("mux server start", "the default server, in the runtime dir"),
        ("mux server start --name work", "another one, runtime_dir/work.sock"),
        ("mux server start --url http://127.0.0.1:7070", "on a loopback port"),
    ],
    exit_codes=[
        ("0", "started, or a mux server already runs there (it says so)"),
        ("1", "error: it did not come up (its log is kept as <name>.log.failed)"),
        USAGE_ERROR,
        NOT_YOURS,
    ],
)

SERVER_STOP = epilog(
    examples=[
        ("mux server stop", "the default server"),
        ("mux server stop --name work", "the server 'work'"),
    ],
    exit_codes=[
        ("0", "stopped, or no mux server ran there (it says so)"),
        ("1", "error: it refused, or did not answer the shutdown request"),
        USAGE_ERROR,
        NOT_YOURS,
    ],
)

SERVER_RESTART = epilog(
    examples=[
        ("mux server restart", "the default server, on this mux's build"),
        ("mux server restart --socket /run/user/1000/mux/work.sock", "by its socket"),
    ],
    exit_codes=[
        ("0", "restarted (or started, when none ran there)"),
        (
            "5",
            "the new build did not come up (it exited, died, hung, or answered as "
            "another version or protocol); the server runs the build it ran before "
            "again, on the same socket",
        ),
        (
            "1",
            "error (nothing answers there any more when the old build could not be "
            "started again either)",
        ),
        USAGE_ERROR,
        NOT_YOURS,
    ],
    environment=[("MUX_RESTART_TIMEOUT", "seconds to wait for the new build (default 7)")],
    notes="A version that failed to start is not offered again until a newer release or mux "
    "update --version X; after two failed starts of the active version the mux link goes "
    "back to the previous version.",
)

SERVER_STATUS = epilog(
    examples=[
        ("mux server status", "every server, one line each"),
        ("mux server status --json", "the same as one JSON object"),
        ("mux server status --name work", "only the server 'work'"),
    ],
    exit_codes=[
        ("0", "listed (none found included)"),
        ("1", "error: no usable runtime dir"),
        ("2", "usage error (a malformed MUX_SERVER_URL included)"),
    ],
    environment=[("MUX_SERVER_URL", "a server listed besides the runtime dir's sockets")],
)

SERVER_WATCH = epilog(
    examples=[
        ("mux server watch", "the default server's status line, then its events"),
        ("mux server watch --name work | jq -c .", "the server 'work', through jq"),
    ],
    exit_codes=[
        ("0", "the server stopped"),
        ("1", "it went away, dropped this watcher or sent nothing for 45s (one line on stderr)"),
        USAGE_ERROR,
        ("130", "interrupted"),
    ],
)

STATUS = epilog(
    examples=[
        ("mux status", "the install at a glance"),
        ("mux status --json", "the same as one JSON object (its schema in docs/contracts.md)"),
    ],
    exit_codes=[
        ("0", "shown (a file that cannot be read is said in the view)"),
        ("1", "error"),
        ("2", "usage error (a malformed MUX_SERVER_URL included)"),
    ],
    environment=[
        ("MUX_HOME", "the install to show (default: this mux's)"),
        ("MUX_SERVER_URL", "a server listed besides the runtime dir's sockets"),
    ],
)
