"""The stdlib-only answers of :mod:`updater.__main__`'s fast paths.

``mux version`` and ``mux update --check`` (what a sidebar calls every few minutes, usually
with ``--max-age``) are answered here without typer; the cached check without the HTTP stack.
"""

from __future__ import annotations

import os

from updater.config import buildinfo
from updater.errors import MuxError


def print_version(*, as_json: bool) -> int:
    from updater.cli.render import to_json_line, version_document, version_text

    info = buildinfo.current()
    print(to_json_line(version_document(info)) if as_json else version_text(info))
    return 0


def answer_check(flags: dict[str, object]) -> int | None:
    """``mux update --check``: the cache when fresh enough, else the source; None = full CLI."""
    from updater.cli.render import check_document, check_text, report_error, to_json_line
    from updater.commands.check import check
    from updater.config import settings
    from updater.core.request import ReleaseRequest
    from updater.timestamps import parse_duration

    max_age = None
    if "--max-age" in flags:
        try:
            max_age = parse_duration(str(flags["--max-age"]))
        except ValueError:
            return None  # the full CLI reports the usage error
    version = flags.get("--version")
    as_json = bool(flags.get("--json"))
    try:
        build = buildinfo.current()
        report = check(
            ReleaseRequest.from_flags(
                version=str(version) if version is not None else None,
                pre=bool(flags.get("--pre")),
                allow_downgrade=False,
            ),
            settings.load(
                os.environ,
                build_repo=build.repo,
                source=str(flags["--source"]) if "--source" in flags else None,
                trust_keys=[str(key) for key in flags.get("--trust-key") or ()],  # type: ignore[attr-defined]
                allow_expired_feed=bool(flags.get("--allow-expired-feed")),
                policy_file=build.policy_file,
                development=build.development,
            ),
            build=build,
            max_age=max_age,
        )
    except MuxError as exc:
        return report_error(exc, as_json=as_json)
    except KeyboardInterrupt:
        return 130
    print(to_json_line(check_document(report)) if as_json else check_text(report))
    return report.exit_code
