"""Text shared by the full CLI and its fast paths (stdlib only)."""

from __future__ import annotations

import json
import sys

from .buildinfo import BuildInfo
from .errors import MuxError


def version_text(info: BuildInfo) -> str:
    kind = " (development build)" if info.development else ""
    return "\n".join(
        [
            f"mux {info.version}{kind}",
            f"protocol: {info.protocol_version}",
            f"target: {info.target or 'unknown'}",
            f"repo: {info.repo or '(none)'}",
            f"trusted minisign keys: {len(info.trust.minisign_keys)}",
        ]
    )


def report_error(exc: MuxError, *, as_json: bool) -> int:
    """One line on stderr; with ``--json`` also one JSON object on stdout."""
    print(f"mux: {exc}", file=sys.stderr)
    if as_json:
        doc = {"error": exc.message, "hint": exc.hint, "exit_code": exc.exit_code}
        print(json.dumps(doc, sort_keys=True))
    return exc.exit_code
