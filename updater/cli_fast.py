"""The stdlib-only answers of :mod:`updater.__main__`'s fast paths."""

from __future__ import annotations

import json

from . import buildinfo
from .errors import MuxError


def print_version(*, as_json: bool) -> int:
    info = buildinfo.current()
    if as_json:
        print(json.dumps(info.to_json(), sort_keys=True))
        return 0
    from .cli_text import version_text

    print(version_text(info))
    return 0


def answer_check(flags: dict[str, object]) -> int | None:
    """``mux update --check``: the cache when fresh enough, else the source; None = full CLI."""
    from .cache import parse_duration
    from .check import CheckOptions, check

    max_age = None
    if "--max-age" in flags:
        try:
            max_age = parse_duration(str(flags["--max-age"]))
        except ValueError:
            return None  # the full CLI reports the usage error
    version = flags.get("--version")
    options = CheckOptions(
        source=str(flags["--source"]) if "--source" in flags else None,
        include_pre=bool(flags.get("--pre")),
        version=str(version) if version is not None else None,
        max_age=max_age,
    )
    as_json = bool(flags.get("--json"))
    try:
        report = check(options)
    except MuxError as exc:
        from .cli_text import report_error

        return report_error(exc, as_json=as_json)
    except KeyboardInterrupt:
        return 130
    from .report import render_check, to_json_line

    print(to_json_line(report.to_json()) if as_json else render_check(report))
    return report.exit_code
