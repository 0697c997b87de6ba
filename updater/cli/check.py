"""``mux update --check``, assembled once: its flags, and the answer both entry points print.

A sidebar calls ``mux update --check --max-age 15m`` every few minutes, so :mod:`updater.__main__`
answers it without typer: :func:`parse_check` reads the flags of :data:`CHECK_FLAGS` and
:func:`answer_check` runs the check and prints it. The typer command (``mux update --check``
with anything else on the line) calls the same :func:`answer_check`, and
``tests/test_cli.py`` holds :data:`CHECK_FLAGS` against typer's declaration of ``mux update``,
so the two entry points take the same flags and give the same answer.

Stdlib only (with what the cached check imports): this is the fast path of a cached check.
"""

from __future__ import annotations

from updater._records import NamedTuple
from updater.cli.render import check_document, check_text, report_error, to_json_line
from updater.commands.check import check
from updater.config import buildinfo
from updater.config.settings import load_for
from updater.core.request import ReleaseRequest
from updater.core.update_flags import MODES, TAKES, given_flags, refusal
from updater.errors import MuxError, UsageError
from updater.timestamps import parse_duration

BARE, VALUE, LIST = "bare", "value", "list"  # a switch, a flag with a value, one given repeatedly
# Every flag of `mux update` that a check takes, and how it is given.
CHECK_FLAGS = {
    "--check": BARE,
    "--json": BARE,
    "--pre": BARE,
    "--allow-expired-feed": BARE,
    "--allow-downgrade": BARE,
    "--allow-withdrawn": BARE,
    "--insecure-skip-attestation": BARE,
    "--max-age": VALUE,
    "--source": VALUE,
    "--version": VALUE,
    "--home": VALUE,
    "--trust-key": LIST,
    "--quiet": BARE,
    "-q": BARE,
    "--verbose": BARE,
    "-v": BARE,
}
# The flags of `mux update` that are not part of a check (what it does instead of checking),
# from the one table of which flags go with which.
NOT_CHECK_FLAGS = tuple(
    flag for flag in (*MODES, *sorted(set().union(*TAKES.values()))) if flag not in CHECK_FLAGS
)


class CheckFlags(NamedTuple):
    """What ``mux update --check …`` was asked, as typer and :func:`parse_check` read it."""

    as_json: bool = False
    pre: bool = False
    allow_expired_feed: bool = False
    allow_downgrade: bool = False
    allow_withdrawn: bool = False
    skip_attestation: bool = False
    max_age: str | None = None
    source: str | None = None
    version: str | None = None
    home: str | None = None
    trust_keys: tuple[str, ...] = ()
    quiet: bool = False  # -q: nothing on stdout (the exit code answers); errors still said
    verbose: bool = False  # -v: the check says all it has by default


_FIELDS = {
    "--json": "as_json",
    "--pre": "pre",
    "--allow-expired-feed": "allow_expired_feed",
    "--allow-downgrade": "allow_downgrade",
    "--allow-withdrawn": "allow_withdrawn",
    "--insecure-skip-attestation": "skip_attestation",
    "--max-age": "max_age",
    "--source": "source",
    "--version": "version",
    "--home": "home",
    "--trust-key": "trust_keys",
    "-q": "quiet",
    "--quiet": "quiet",
    "-v": "verbose",
    "--verbose": "verbose",
}

_FLAG_OF = {"as_json": "--json", **{field: flag for flag, field in _FIELDS.items()}}


def parse_check(args: list[str]) -> CheckFlags | None:
    """The flags of an ``update --check`` call (the arguments after ``update``), or None if
    it is anything else (then typer reads it, usage errors and help included)."""
    values: dict[str, object] = {}
    checking = False
    position = 0
    while position < len(args):
        name, eq, value = args[position].partition("=")
        kind = CHECK_FLAGS.get(name)
        if kind is None or (kind == BARE and eq):
            return None
        if kind != BARE and not eq:
            position += 1
            if position >= len(args):
                return None
            value = args[position]
        if name == "--check":
            checking = True
        elif kind == LIST:
            values[_FIELDS[name]] = (*values.get(_FIELDS[name], ()), value)  # type: ignore[misc]
        else:
            values[_FIELDS[name]] = True if kind == BARE else value
        position += 1
    return CheckFlags(**values) if checking else None  # type: ignore[arg-type]


def answer_check(flags: CheckFlags) -> int:
    """Run ``mux update --check`` as ``flags`` ask and print its answer (one JSON object with
    ``--json``); returns the exit code. Every failure is one line (:func:`report_error`)."""
    try:
        refused = refusal(
            given_flags({"--check": True, **{_FLAG_OF[f]: v for f, v in flags._asdict().items()}})
        )
        if refused is not None:
            raise refused
        build = buildinfo.current()
        settings = load_for(
            build,
            source=flags.source,
            home=flags.home,
            trust_keys=flags.trust_keys,
            skip_attestation=flags.skip_attestation,
            allow_expired_feed=flags.allow_expired_feed,
        )
        request = ReleaseRequest.from_flags(
            version=flags.version,
            pre=flags.pre,
            allow_downgrade=flags.allow_downgrade,
            allow_withdrawn=flags.allow_withdrawn,
        )
        max_age = None
        if flags.max_age is not None:
            try:
                max_age = parse_duration(flags.max_age)
            except ValueError as exc:
                raise UsageError(f"--max-age: {exc}") from None
        report = check(request, settings, build=build, max_age=max_age)
    except MuxError as exc:
        return report_error(exc, as_json=flags.as_json)
    except KeyboardInterrupt:
        return 130
    if flags.as_json:
        print(to_json_line(check_document(report)))
    elif not flags.quiet:
        print(check_text(report))
    return report.exit_code
