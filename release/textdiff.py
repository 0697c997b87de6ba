"""Text short enough to print: the unified diffs `repin --dry-run` and `notices --check` show,
and the lists of names one-line errors carry."""

from __future__ import annotations

import difflib
from collections.abc import Sequence


def capped_unified_diff(
    before: str, after: str, *, fromfile: str, tofile: str, max_lines: int
) -> str:
    """``before`` -> ``after`` as a unified diff of at most ``max_lines`` lines (plus a count).

    Every line ends with a newline, also the last line of a text that had none, so the diff
    prints cleanly; an empty string means no difference.
    """
    lines = list(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=fromfile,
            tofile=tofile,
        )
    )
    if len(lines) > max_lines:
        lines = [*lines[:max_lines], f"... ({len(lines) - max_lines} more lines)\n"]
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def name_some(names: Sequence[str], limit: int, separator: str = ", ") -> str:
    """``a, b, c (and 4 more)``: the first ``limit`` names of a list for a one-line message."""
    shown = separator.join(names[:limit])
    return shown + (f" (and {len(names) - limit} more)" if len(names) > limit else "")
