"""Everything mux shows: check, update, version, server status, errors and progress.

For people (plain lines) and programs (one JSON object with stable fields, docs/updating.md). The
library returns typed results (:class:`~updater.core.report.CheckReport`,
:class:`~updater.commands.update.UpdateResult`, ...); only this module turns them into text.

Much of what is shown came from the network or from a server (versions, tags, dates, URLs,
server fields, error messages that quote them): every human line goes through
:func:`safe_text`, so no control character (an ``ESC`` that rewrites the line or sets the
clipboard) reaches the terminal. JSON stays JSON: the encoder escapes them.

Stdlib only, so the cached check and ``mux version`` render without importing rich (the
progress bar imports it when it is drawn).
"""

from __future__ import annotations

import json
import os
import sys

from updater.errors import printable
from updater.text import safe_text

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: mux version's fast path
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, TextIO

    from updater.commands.update import UpdateResult
    from updater.commands.userstate import StateChange
    from updater.config.buildinfo import BuildInfo
    from updater.core.release_notes import ReleaseNotes
    from updater.core.report import CheckReport
    from updater.core.retention import KeptVersion
    from updater.core.verdicts import ServerReport, ServerVerdict
    from updater.errors import MuxError
    from updater.net.progress import Progress

# The schema of every JSON document mux prints (docs/contracts.md, "JSON documents"). 2: errors
# as objects with a kind and a layer, `schema` in every document, one name per idea (the
# names schema 1 used are kept beside the new ones for this schema version).
REPORT_SCHEMA = 2


def to_json_line(doc: dict[str, Any]) -> str:
    return json.dumps(doc, sort_keys=True)  # ASCII: every control character \u-escaped


def safe_lines(lines: Sequence[str]) -> str:
    """Lines for a person, each made safe (:func:`safe_text`), joined."""
    return "\n".join(safe_text(line) for line in lines)


# -- errors ----------------------------------------------------------------------------------


def report_error(exc: MuxError, *, as_json: bool) -> int:
    """One line on stderr; with ``--json`` also one JSON object on stdout. Returns the code.

    The line is escaped as a whole: a message may carry text from a server or a file."""

    print(error_line(str(exc)), file=sys.stderr)
    if as_json:
        print(to_json_line(error_document(exc)))
    return exc.exit_code


def report_click_error(exc: Any, *, as_json: bool) -> int:
    """A usage error click found (an unknown option, a missing value, a bad choice): one
    line on stderr as every error (``mux: error: <click's words> (see <command> --help)``);
    with ``--json`` also the error document (kind ``usage``) on stdout. ``exc`` is click's
    ClickException (typer's TyperException). Returns its exit code (2 for a usage error)."""
    # A bare `mux` or `mux server` (click's NoArgsIsHelpError, by name: typer keeps its click
    # private): the help is the answer, as before.
    if type(exc).__name__ == "NoArgsIsHelpError" and not as_json:
        exc.show()
        return int(exc.exit_code)
    ctx = getattr(exc, "ctx", None)
    hint = f"see {ctx.command_path} --help" if ctx is not None else None
    message = exc.format_message()
    print(error_line(f"{message} ({hint})" if hint else message), file=sys.stderr)
    if as_json:
        kind = "usage" if exc.exit_code == 2 else "error"
        document = error_fields(
            kind=kind, layer=None, message=message, hint=hint, exit_code=exc.exit_code
        )
        print(to_json_line(document))
    return int(exc.exit_code)


def error_line(message: str, stream: TextIO | None = None) -> str:
    """``mux: error: …`` for ``stream`` (stderr), escaped as a whole; ``error:`` in red on a
    terminal (:func:`painted`)."""
    return "mux: " + painted("error:", _RED, stream) + " " + printable(message)


def warning_line(message: str, stream: TextIO | None = None) -> str:
    """``mux: warning: …`` for ``stream`` (stderr), escaped as a whole; ``warning:`` in
    yellow on a terminal (:func:`painted`)."""
    return "mux: " + painted("warning:", _YELLOW, stream) + " " + printable(message)


_RED, _YELLOW = "1;31", "33"  # SGR parameters


def painted(text: str, sgr: str, stream: TextIO | None = None) -> str:
    """``text`` in colour when ``stream`` (default stderr) is a terminal, unless NO_COLOR is
    set (https://no-color.org) or TERM is dumb; as it is in a pipe or a file. ``text`` is
    mux's own words: never anything from outside, which is escaped before it gets here."""
    shown_on = sys.stderr if stream is None else stream
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return text
    if not shown_on.isatty():
        return text
    return f"\x1b[{sgr}m{text}\x1b[0m"


def error_document(exc: MuxError) -> dict[str, Any]:
    return error_fields(
        kind=exc.error_kind,
        layer=exc.layer,
        message=exc.message,
        hint=exc.hint,
        exit_code=exc.exit_code,
    )


def error_fields(
    *, kind: str, layer: str | None, message: str, hint: str | None, exit_code: int
) -> dict[str, Any]:
    """What ``--json`` prints on an error: ``error`` (``kind``, ``layer``, ``message``,
    ``hint``) and the exit code; schema 1's top-level ``hint`` is kept for this schema."""
    return {
        "schema": REPORT_SCHEMA,
        "error": {"kind": kind, "layer": layer, "message": message, "hint": hint},
        "exit_code": exit_code,
        "hint": hint,
    }


# -- mux version -----------------------------------------------------------------------------


def version_text(info: BuildInfo) -> str:
    kind = " (development build)" if info.development else ""
    return safe_lines(
        [
            f"mux {info.version}{kind}",
            f"protocol: {info.protocol_version}",
            f"target: {info.target or 'unknown'}",
            f"repo: {info.repo or '(none)'}",
            f"trusted minisign keys: {len(info.trust.minisign_keys)}",
        ]
    )


def version_document(info: BuildInfo) -> dict[str, Any]:
    return {"schema": REPORT_SCHEMA, **info.to_json()}  # the build info (docs/contracts.md)


# -- servers ---------------------------------------------------------------------------------


def verdict_document(verdict: ServerVerdict) -> dict[str, Any]:
    """One server as ``mux server status --json``, the check, the update and the first line
    of ``mux server watch`` show it."""
    return {
        **verdict.report.to_json(),
        "restart_needed": verdict.restart_needed,
        "restart_needed_after_update": verdict.restart_needed_after_update,
        "restart_command": verdict.restart_command,
        # One meaning, as in the watch's update-installed: it speaks this mux's protocol.
        "compatible": verdict.same_protocol,
        # Another version at the same protocol: restart_command moves it when convenient
        # (what schema 1's `compatible` said).
        "move_when_convenient": verdict.compatible,
        "build_deleted": verdict.build_deleted,
        "build_known": verdict.build_known,
    }


def servers_document(verdicts: Sequence[ServerVerdict]) -> dict[str, Any]:
    """``mux server status --json``."""
    return {"schema": REPORT_SCHEMA, "servers": [verdict_document(v) for v in verdicts]}


def server_line(text: str) -> str:
    """One line of ``mux server`` output (it quotes what a server said)."""
    return safe_text(text)


def describe_live(report: ServerReport) -> str:
    status = report.status
    assert status is not None
    return (
        f"mux {status.version}, protocol {status.protocol_version}, pid {status.pid}, "
        f"started {status.started_at or 'unknown'}"
    )


def _build_deleted_text(verdict: ServerVerdict) -> str:
    return (
        f"its build {verdict.report.executable} was deleted: it may fail "
        f"at its next code path; restart it with: {verdict.restart_command}"
    )


def server_status_lines(
    verdicts: Sequence[ServerVerdict], protocol_version: int, version: str
) -> list[str]:
    """``mux server status``: one line per server; stale sockets are reported and skipped."""
    lines = []
    for verdict in verdicts:
        report = verdict.report
        if report.state == "live" and report.status is not None:
            line = f"{report.address}: live, {describe_live(report)}, from {report.executable or 'unknown'}"
            if verdict.build_known is False:
                line += " (not a build of this install: a restart starts this mux's own)"
            if verdict.build_deleted:
                line += f"; {_build_deleted_text(verdict)}"
            elif report.status.protocol_version != protocol_version:
                line += (
                    f"; this mux speaks protocol {protocol_version},"
                    f" restart it with: {verdict.restart_command}"
                )
            elif verdict.compatible:
                line += (
                    f"; compatible with this mux ({version}, same protocol), to move it to "
                    f"{version} when convenient: {verdict.restart_command}"
                )
        elif report.state == "stale":
            line = f"{report.address}: stale ({report.detail}; skipped)"
        else:
            line = f"{report.address}: {report.state} ({report.detail})"
            if report.executable:
                line += f", pid {report.pid}, from {report.executable} (the OS says)"
        lines.append(safe_text(line))
    return lines


def _server_line(verdict: ServerVerdict, *, new_protocol: int | None = None) -> list[str]:
    report = verdict.report
    status = report.status
    if status is None:
        return [f"  {report.address}: {report.state} ({report.detail})"]
    who = f"{report.address} (pid {status.pid}, mux {status.version}, protocol {status.protocol_version})"
    if new_protocol is None:
        return [f"  {who}"]
    return [f"  {who} → protocol {new_protocol}", f"    restart it with: {verdict.restart_command}"]


def _restart_group(verdicts: list[ServerVerdict], header: str, protocol: int) -> list[str]:
    lines = [header] if verdicts else []
    for verdict in verdicts:
        lines.extend(_server_line(verdict, new_protocol=protocol))
    return lines


# -- mux update --check ----------------------------------------------------------------------


def check_document(report: CheckReport) -> dict[str, Any]:
    offer = report.offer
    lifecycle = offer.lifecycle
    return {
        "schema": REPORT_SCHEMA,
        "status": report.status,
        "exit_code": report.exit_code,
        "update_available": report.update_available,
        "restart_needed": report.restart_needed,
        "restart_needed_after_update": any(v.restart_needed_after_update for v in report.servers),
        "current": {
            "version": report.build.version,
            "protocol_version": report.build.protocol_version,
            "target": report.build.target,
            "development": report.build.development,
        },
        "latest": offer.to_cache()["latest"],
        "source": {
            "kind": offer.source_kind,
            "location": offer.source_location,
            "set_by": report.source_set_by,
        },
        "servers": [verdict_document(v) for v in report.servers],
        "kept_versions": [kept_document(k) for k in report.kept_versions],
        "checked_at": report.checked_at,
        "cached": report.cached,
        "notes": list(report.notes),
        "install_command": report.install_command,
        "managed_by": report.manager.to_json() if report.manager else None,
        # A packager's announce delay (beside the user's own hold_until below); schema 1
        # called it held_until, kept for schema 2.
        "packager_delay_until": report.held_until,
        "held_until": report.held_until,
        # The user's own word (mux update --skip/--hold, config.toml) and what mux learnt
        # here (failed starts): why nothing is offered, when that is why.
        "withheld": report.withheld.to_json() if report.withheld else None,
        # The staged copy of the release on offer (mux update applies it without a download).
        "staged": report.staged.to_json() if report.staged else None,
        "skipped": list(report.state.skipped),
        "hold_until": report.state.hold_until_text,
        "failed_versions": [f.to_json() for f in report.state.failed],
        "auto_install": report.preferences.to_json(),
        # This machine's rollout bucket (0-9999): kept in the user's state dir, never sent.
        "rollout_bucket": lifecycle.rollout_bucket if lifecycle is not None else None,
        "lifecycle": lifecycle.to_json() if lifecycle is not None else None,
    }


def state_change_document(done: StateChange) -> dict[str, Any]:
    """``mux update --skip X | --unskip X | --hold D | --unhold --json``."""
    return {"schema": REPORT_SCHEMA, **done.to_json()}


def kept_document(kept: KeptVersion) -> dict[str, Any]:
    return {
        "version": kept.version,
        "kind": kept.kind,
        "reason": kept.reason,
        "size_bytes": kept.size_bytes,
    }


def human_size(size: int) -> str:
    """The one way mux shows a size to a person: IEC units, one decimal above bytes
    (``812 B``, ``3.4 KiB``, ``12.0 MiB``, ``1.5 GiB``); ``--json`` gives exact bytes."""
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


def _size(size: int | None) -> str:
    return "unknown size" if size is None else human_size(size)


def _kept_lines(kept_versions: Sequence[KeptVersion], *, indent: str = "  ") -> list[str]:
    """The versions kept because a running mux uses them (the usual two need no words)."""
    return [
        f"{indent}kept {k.version} ({_size(k.size_bytes)}): {k.reason}"
        for k in kept_versions
        if k.kind in ("server", "in-use", "running")
    ]


# Removal rests on what could be found: locks, servers, processes (docs/contracts.md).
_REMOVED_REASON = "no running mux found using it, and it is not needed"


def check_text(report: CheckReport) -> str:
    build, offer = report.build, report.offer
    lines: list[str] = []
    current = f"mux {build.version}" + (" (development build)" if build.development else "")
    if report.withdrawn:
        lines.append(f"{current} was withdrawn by its publisher")
        if report.install_command is not None:
            lines.append(f"  move off it with: {report.install_command}")
    elif report.update_available:
        released = f", released {offer.released_at}" if offer.released_at else ""
        verb = "was requested" if offer.requested else "is available"
        lines.append(f"{current} → {offer.version} {verb}{released}")
        lines.append(f"  release: {offer.release_url}")
        manager = report.manager
        if report.staged is not None:
            copy = report.staged
            lines.append(
                f"  staged {copy.staged_at_text} ({_size(copy.size_bytes)}): "
                f"ready to install: {report.update_command()} applies it"
            )
        if report.install_command is not None:
            managed = f" ({manager.name} manages this mux)" if manager else ""
            lines.append(f"  install it with: {report.install_command}{managed}")
        elif manager is not None:
            lines.append(
                f"  {manager.name} ({manager.origin}) lets only its administrator install it"
            )
    elif report.held_until is not None:
        lines.append(f"{current} is up to date (mux {offer.version} is not announced yet)")
    elif report.withheld is not None:
        lines.append(f"{current}: mux {offer.version} is not offered ({report.withheld.reason})")
    else:
        lines.append(f"{current} is up to date (latest release {offer.tag})")
    for note in report.notes:
        lines.append(f"  note: {note}")

    live = [v for v in report.servers if v.live]
    others = [v for v in report.servers if not v.live]
    deleted = [v for v in live if v.build_deleted]
    for verdict in deleted:
        lines.append(f"server {verdict.report.address}: {_build_deleted_text(verdict)}")
    now = [v for v in live if v.restart_needed and not v.build_deleted]
    after = [v for v in live if v.restart_needed_after_update and not v.restart_needed]
    lines += _restart_group(
        now,
        f"{len(now)} live server(s) speak another protocol than this mux "
        f"(protocol {build.protocol_version}); restart when convenient, it ends the programs in it:",
        build.protocol_version,
    )
    lines += _restart_group(
        after,
        f"after the update, {len(after)} live server(s) will need a restart "
        f"(mux {offer.version} speaks protocol {offer.protocol_version}):",
        offer.protocol_version,
    )
    compatible = [v for v in live if v.compatible and v not in now and v not in after]
    for verdict in compatible:
        status = verdict.report.status
        assert status is not None
        lines.append(
            f"server {verdict.report.address} (pid {status.pid}) runs mux {status.version}: "
            f"compatible (protocol {status.protocol_version}); to move it to {build.version} "
            f"when convenient: {verdict.restart_command}"
        )
    quiet = [v for v in live if v not in now and v not in after and v not in compatible]
    if quiet:
        lines.append(f"{len(quiet)} live server(s) speak this mux's protocol: nothing to do")
    server_kept = _kept_lines(report.kept_versions, indent="")
    if server_kept:
        lines += ["kept on disk:", *("  " + line for line in server_kept)]
    if others:
        lines.append("skipped:")
        for verdict in others:
            lines.extend(_server_line(verdict))
    if report.source_set_by is not None:
        lines.append(f"source: {offer.source_location} (from {report.source_set_by})")
    if report.cached:
        lines.append(f"(from the check at {report.checked_at})")
    return safe_lines(lines)


# -- mux update ------------------------------------------------------------------------------


def update_document(result: UpdateResult) -> dict[str, Any]:
    plan = result.plan
    return {
        "schema": REPORT_SCHEMA,
        "action": result.action.value,
        "exit_code": result.exit_code,
        # The check's names: current (the version before), latest (the one moved to).
        "current": {"version": result.from_version},
        "latest": {"version": result.to_version, "protocol_version": result.protocol_version},
        "from_version": result.from_version,  # schema 1's names, kept for schema 2
        "to_version": result.to_version,
        "protocol_version": result.protocol_version,
        "target": result.target,
        "home": str(result.layout.home),
        "link": str(result.layout.link),
        "verification": [
            {"layer": layer.layer, "status": layer.status, "detail": layer.detail}
            for layer in result.verification
        ],
        "servers": [verdict_document(v) for v in result.servers],
        "restart_needed": result.restart_needed,
        "notes": list(result.notes),
        "removed_versions": list(result.removed_versions),
        "kept_versions": [kept_document(k) for k in result.kept_versions],
        "withheld": result.withheld.to_json() if result.withheld else None,
        "staged": result.staged.to_json() if result.staged else None,
        "transfer": _transfer_document(result),
        "whats_new": [notes.to_json() for notes in result.release_notes],
        "plan": (
            {
                "tag": plan.tag,
                "release_url": plan.release_url,
                "asset": plan.asset,
                "asset_url": plan.asset_url,
                "size_bytes": plan.size,
                "size": plan.size,  # schema 1's name, kept for schema 2
                "sha256": plan.sha256,
                "checks": list(plan.checks),
                "version_dir": plan.version_dir,
                "link": plan.link,
            }
            if plan
            else {}
        ),
    }


def _transfer_document(result: UpdateResult) -> dict[str, Any] | None:
    transfer = result.transfer
    if transfer is None:
        return None
    return {
        "method": transfer.method,
        "delta_from": transfer.delta_from,
        "bytes": transfer.bytes,
        "archive_size_bytes": transfer.archive_size,
        "archive_size": transfer.archive_size,  # schema 1's name, kept for schema 2
        "fallback_reason": transfer.fallback,
    }


def _staged_lines(result: UpdateResult, apply_command: str) -> list[str]:
    """``--stage`` and ``--unstage``: what is staged now, and what applies it."""
    copy = result.staged
    if result.action == "unstaged":
        if copy is None:
            return [f"nothing was staged in {result.layout.home}"]
        return [f"removed the staged mux {copy.version} ({_size(copy.size_bytes)})"]
    assert copy is not None
    lines = [
        f"staged mux {copy.version} beside mux {result.from_version or '(none)'} "
        f"({_size(copy.size_bytes)}, verified {copy.staged_at_text}); nothing switched",
        f"  to switch to it: {apply_command}",
    ]
    transfer_line = _transfer_line(result)
    return lines + ([transfer_line] if transfer_line else [])


def _transfer_line(result: UpdateResult) -> str | None:
    transfer = result.transfer
    if transfer is None:
        return None
    share = f"{100 * transfer.bytes / transfer.archive_size:.1f}%" if transfer.archive_size else ""
    if transfer.method == "delta":
        return (
            f"  download: a delta from {transfer.delta_from}, {human_size(transfer.bytes)} "
            f"({share} of the {human_size(transfer.archive_size)} archive)"
        )
    why = f" (no delta: {safe_text(transfer.fallback)})" if transfer.fallback else ""
    return f"  download: the full archive, {human_size(transfer.bytes)}{why}"


# How much `mux update` says: QUIET (-q) nothing but errors, DEFAULT about three lines (what
# changed, what was kept, what to restart), VERBOSE (-v) every layer, the download, the link.
QUIET, DEFAULT, VERBOSE = -1, 0, 1


def update_text(
    result: UpdateResult, carried: Sequence[str] = (), *, verbosity: int = DEFAULT
) -> str:
    """``carried``: the user's options (Settings.carried) each printed command repeats."""
    # deferred (+0.5 ms, 2 modules): mux version renders through this module and imports
    # nothing of the core (tests/test_imports.py); an update's output needs the next steps
    from updater.core.nextstep import for_install_only, mux_update

    # result.action is an UpdateAction (a StrEnum), compared by value: its module imports
    # the update machinery, which mux version and the cached check, rendered here, do without.
    if verbosity <= QUIET:
        return ""
    if result.action == "dry-run" and result.plan is not None:
        return safe_lines(_dry_run_lines(result))
    if result.action == "pruned":
        return safe_lines(_prune_lines(result))
    if result.action in ("staged", "unstaged"):
        return safe_lines(_staged_lines(result, mux_update(carried=carried)))
    if result.action == "withheld" and result.withheld is not None:
        anyway = mux_update("--version", result.withheld.version, carried=carried)
        return safe_lines(_withheld_lines(result, anyway))
    lines = [_headline(result), *(f"  note: {note}" for note in result.notes)]
    if verbosity >= VERBOSE:
        lines += _detail_lines(result)
    rollback = mux_update("--rollback", carried=for_install_only(carried))
    lines += _kept_after_update(result, rollback, verbose=verbosity >= VERBOSE)
    lines += _servers_after_update(result, verbose=verbosity >= VERBOSE)
    lines += release_notes_lines(result.release_notes)
    return safe_lines(lines)


def _headline(result: UpdateResult) -> str:
    """What changed, in one line."""
    if result.action == "up-to-date":
        return f"mux {result.to_version} is already installed in {result.layout.home}"
    if result.action == "rolled-back":
        # The version active before, older or newer: said so, not as "back" to an older one.
        return (
            f"switched back to mux {result.to_version}, the version active before "
            f"{result.from_version}"
        )
    if result.action == "dry-run":
        return f"would move mux {result.from_version} → {result.to_version}"
    if not result.from_version:
        return f"installed mux {result.to_version}"
    return f"updated mux {result.from_version} → {result.to_version}"


def _detail_lines(result: UpdateResult) -> list[str]:
    """``-v``: the build's target, each verification layer, how the files came, where the
    link points."""
    lines = [f"  target: {result.target}"] if result.action == "updated" else []
    lines += [
        f"  {layer.layer}: {'ok' if layer.status == 'ok' else 'SKIPPED'}: {layer.detail}"
        for layer in result.verification
    ]
    transfer_line = _transfer_line(result)
    if transfer_line is not None:
        lines.append(transfer_line)
    if result.action in ("updated", "rolled-back"):
        lines.append(
            f"  {result.layout.link} → {result.layout.version_dir(str(result.to_version))}"
        )
    return lines


def _kept_after_update(result: UpdateResult, rollback: str, *, verbose: bool) -> list[str]:
    """What was kept (the previous version, for ``rollback``, the command that goes back to
    it; those a running mux uses) and removed: one line for the removed ones, one each with
    ``-v``."""
    lines = []
    if result.action == "updated" and result.from_version:
        lines.append(f"  previous version {result.from_version} kept: {rollback}")
    lines += _kept_lines(result.kept_versions)
    removed = result.removed_versions
    if verbose:
        lines += [f"  removed {version}: {_REMOVED_REASON}" for version in removed]
    elif removed:
        lines.append(f"  removed {', '.join(removed)} (no running mux found using them)")
    return lines


def _servers_after_update(result: UpdateResult, *, verbose: bool) -> list[str]:
    """What to restart: each live server that needs it, or may move when convenient (a
    server with nothing to do is said with ``-v`` only)."""
    lines = []
    live = [v for v in result.servers if v.report.state == "live" and v.report.status]
    for verdict in live:
        status = verdict.report.status
        assert status is not None
        who = f"server {verdict.report.address} (pid {status.pid}, mux {status.version})"
        if verdict.build_deleted:
            lines.append(f"{who}: {_build_deleted_text(verdict)}")
        elif verdict.restart_needed:
            lines.append(
                f"{who} speaks protocol {status.protocol_version}; mux {result.to_version} speaks "
                f"{result.protocol_version}. It keeps running; restart it when convenient "
                "(this ends the programs in it):"
            )
            lines.append(f"  {verdict.restart_command}")
        elif verdict.compatible:
            lines.append(
                f"{who} speaks protocol {status.protocol_version} like mux {result.to_version}: "
                f"compatible, it keeps running; to move it to {result.to_version} when "
                "convenient (this ends the programs in it):"
            )
            lines.append(f"  {verdict.restart_command}")
        elif verbose:
            lines.append(
                f"server {verdict.report.address} speaks protocol {result.protocol_version}: "
                "nothing to do, it keeps running"
            )
    return lines


def _dry_run_lines(result: UpdateResult) -> list[str]:
    plan = result.plan
    assert plan is not None
    lines = [
        f"would update mux {result.from_version or '(not installed)'} → {result.to_version} "
        f"({result.target})",
        f"  release: {plan.release_url}",
        f"  asset:   {plan.asset_url} ({human_size(plan.size)}, sha256 {plan.sha256})",
        f"  checks:  {', '.join(plan.checks)}",
        *(
            f"  checked now: {layer.layer}: {'ok' if layer.status == 'ok' else 'SKIPPED'}:"
            f" {layer.detail}"
            for layer in result.verification
        ),
        f"  into:    {plan.version_dir}",
        f"  link:    {plan.link}",
    ]
    after = [v for v in result.servers if v.restart_needed]
    if after:
        lines.append(
            f"after it, {len(after)} live server(s) will need a restart "
            f"(mux {result.to_version} speaks protocol {result.protocol_version}):"
        )
        lines += [f"  {v.restart_command}" for v in after]
    lines.append("nothing was changed (--dry-run)")
    return lines


def _withheld_lines(result: UpdateResult, anyway: str) -> list[str]:
    """``anyway``: the command that installs the withheld release all the same."""
    kept_back = result.withheld
    assert kept_back is not None
    lines = [
        f"mux {result.from_version} stays: {kept_back.detail}",
        f"  to have it offered again: {kept_back.undo}",
    ]
    if kept_back.reason != "failed":
        lines.append(f"  to install it anyway: {anyway}")
    return lines


# What `mux update` shows of the notes of the releases it moved past: about five lines.
NOTES_LINES = 5
NOTES_WIDTH = 100  # characters of one line of notes; a longer one is cut


def release_notes_lines(notes: Sequence[ReleaseNotes]) -> list[str]:
    """What's new: the notes' lines, newest release first, at most :data:`NOTES_LINES` of
    them, each under the version it belongs to, then the release page where the rest is.
    Nothing when no release had notes. The lines are raw: the caller escapes them
    (:func:`safe_lines`), as every line it shows."""
    shown: list[str] = []
    rest = None
    for release in notes:
        body, cut = _note_lines(release.text)
        room = NOTES_LINES - len(shown)
        label = f"  mux {release.version}: "
        for number, line in enumerate(body[:room]):
            shown.append((label if number == 0 else " " * len(label)) + line)
        if rest is None and (cut or len(body) > room or not release.read):
            rest = release.release_url
    if not shown:
        return []
    return ["what's new:", *shown, *([f"  more: {rest}"] if rest else [])]


def _note_lines(text: str) -> tuple[list[str], bool]:
    """Markdown's non-blank lines, stripped, each cut to :data:`NOTES_WIDTH` characters, and
    whether one was cut."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    cut = [line if len(line) <= NOTES_WIDTH else line[: NOTES_WIDTH - 1] + "…" for line in lines]
    return cut, cut != lines


def _prune_lines(result: UpdateResult) -> list[str]:
    lines = [f"pruned {result.layout.versions}"]
    for kept in result.kept_versions:
        lines.append(f"  kept {kept.version} ({_size(kept.size_bytes)}): {kept.reason}")
    for version in result.removed_versions:
        lines.append(f"  removed {version}: {_REMOVED_REASON}")
    if not result.removed_versions:
        lines.append("  nothing to remove")
    return lines


# -- while an update runs --------------------------------------------------------------------


class PlainProgress:
    """Plain lines for logs and pipes: one when a download starts, one when it ends."""

    def __init__(self, label: str, write: Callable[[str], None]) -> None:
        self.label = label
        self.write = write

    def start(self, total: int | None) -> None:
        size = f" ({human_size(total)})" if total is not None else ""
        self.write(safe_text(f"downloading {self.label}{size}"))

    def advance(self, done: int) -> None:
        pass

    def finish(self, completed: bool = True) -> None:
        if completed:  # a failed download is told by its error line, never as "downloaded"
            self.write(safe_text(f"downloaded {self.label}"))


class BarProgress:
    """A progress bar on a terminal (rich, imported only here)."""

    def __init__(self, label: str) -> None:
        # deferred: this module is on a fast path (docs/build.md)
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            TransferSpeedColumn,
        )
        from rich.progress import (
            Progress as RichProgress,
        )

        self._progress = RichProgress(
            "[progress.description]{task.description}",
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            console=Console(stderr=True),  # stdout stays for the report (and --json)
            transient=True,
        )
        self._label = safe_text(label).replace("[", "\\[")  # rich markup: shown as written
        self._task: Any = None

    def start(self, total: int | None) -> None:
        self._progress.start()
        self._task = self._progress.add_task(self._label, total=total)

    def advance(self, done: int) -> None:
        if self._task is not None:
            self._progress.update(self._task, completed=done)

    def finish(self, completed: bool = True) -> None:
        self._progress.stop()


def make_progress(label: str, *, quiet: bool = False, bar: bool = True) -> Progress:
    """A bar on a terminal (unless ``bar`` is off: NO_COLOR, TERM=dumb), else plain lines."""
    if quiet:
        return PlainProgress(label, lambda _line: None)
    if bar and sys.stderr.isatty():
        return BarProgress(label)
    return PlainProgress(label, lambda line: print(line, file=sys.stderr))


def notices_document(path: object) -> dict[str, Any]:
    """``mux version --notices --json``: where the third-party notices this mux ships are."""
    return {"schema": REPORT_SCHEMA, "notices": str(path)}


class ProgressGroup:
    """One progress display for parallel downloads (``mux-release repin``'s assets): a rich bar
    per download on a terminal (unless ``bar`` is off: NO_COLOR, TERM=dumb), else one line when
    each starts and ends (:func:`make_progress`)."""

    def __init__(self, *, quiet: bool, bar: bool) -> None:
        self._quiet = quiet
        self._rich: Any = None
        if not quiet and bar and sys.stderr.isatty():
            # deferred: this module is on a fast path (docs/build.md)
            from rich.console import (
                Console,
            )
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                TransferSpeedColumn,
            )
            from rich.progress import (
                Progress as RichProgress,
            )

            self._rich = RichProgress(
                "[progress.description]{task.description}",
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                console=Console(stderr=True),
                transient=True,
            )

    def __enter__(self) -> ProgressGroup:
        if self._rich is not None:
            self._rich.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._rich is not None:
            self._rich.stop()

    def task(self, label: str) -> Progress:
        if self._rich is None:
            return make_progress(label, quiet=self._quiet, bar=False)
        return _GroupTask(self._rich, label)


class _GroupTask:
    """One download's bar in a shared rich display."""

    def __init__(self, rich: Any, label: str) -> None:
        self._rich = rich
        self._label = label
        self._id: Any = None

    def start(self, total: int | None) -> None:
        self._id = self._rich.add_task(self._label, total=total)

    def advance(self, done: int) -> None:
        if self._id is not None:
            self._rich.update(self._id, completed=done)

    def finish(self, completed: bool = True) -> None:
        if self._id is not None:
            self._rich.update(self._id, visible=False)


class ConsoleEvents:
    """What ``mux update`` shows on stderr while it runs (:class:`updater.commands.update.UpdateEvents`)."""

    def __init__(self, *, progress_bar: bool, quiet: bool = False) -> None:
        self._bar = progress_bar
        self._quiet = quiet  # -q: no progress (warnings still say what went wrong)

    def warning(self, message: str) -> None:
        print(warning_line(message), file=sys.stderr)

    def progress(self, label: str) -> Progress:
        return make_progress(label, quiet=self._quiet, bar=self._bar)
