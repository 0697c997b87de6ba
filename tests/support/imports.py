"""Which modules a real mux process imports: for the fast-path allow-lists and the build's
list of never-imported modules (release.build.standalone.NEVER_IMPORTED).

Two ways, both on real processes:

* :func:`imported_by` runs one command with ``-X importtime`` and reads the modules from its
  stderr, minus what the bare interpreter imports at start-up (``python -c pass`` with the
  same flags): what the command itself made Python import.
* :func:`recording_env` makes every Python process started with that environment (children
  too: the server daemon, the smoke test of a development build) write ``sys.modules`` at
  exit into a folder, through a ``sitecustomize`` module on ``PYTHONPATH``;
  :func:`recorded_modules` reads them back.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

_IMPORTTIME_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)\s*$")

_SITECUSTOMIZE = """\
# Written by tests/support/imports.py: record sys.modules at exit.
import atexit
import os
import sys

_folder = os.environ.get("MUX_TEST_RECORD_IMPORTS")
if _folder:
    _argv = list(sys.argv)

    def _record():
        import json

        with open(os.path.join(_folder, "%d.json" % os.getpid()), "w") as stream:
            json.dump({"argv": _argv, "modules": sorted(sys.modules)}, stream)

    atexit.register(_record)
"""


def modules_in_importtime(stderr: str) -> set[str]:
    return {m.group(1) for line in stderr.splitlines() if (m := _IMPORTTIME_LINE.match(line))}


def imported_by(
    command: Sequence[str], env: Mapping[str, str], *, python_flags: Sequence[str] = ()
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``python <python_flags> -X importtime <command...>``; the result and its imports.

    The imports are those of the command beyond what ``python <python_flags> -c pass`` imports
    at start-up in the same environment.
    """
    flags = [*python_flags, "-X", "importtime"]
    baseline = subprocess.run(
        [sys.executable, *flags, "-c", "pass"],
        env=dict(env),
        capture_output=True,
        text=True,
        check=True,
    )
    result = subprocess.run(
        [sys.executable, *flags, *command],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    imported = modules_in_importtime(result.stderr) - modules_in_importtime(baseline.stderr)
    return result, imported


def recording_env(env: Mapping[str, str], folder: Path) -> dict[str, str]:
    """``env`` plus what makes every Python process record its modules into ``folder``."""
    site = folder / "site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE, encoding="utf-8")
    records = folder / "records"
    records.mkdir(exist_ok=True)
    return {**env, "PYTHONPATH": str(site), "MUX_TEST_RECORD_IMPORTS": str(records)}


def recorded_modules(folder: Path) -> dict[str, set[str]]:
    """``{"<argv>": modules}`` of every process that recorded into ``folder``."""
    found: dict[str, set[str]] = {}
    for path in sorted((folder / "records").glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        found[f"{path.stem}: {' '.join(doc['argv'])}"] = set(doc["modules"])
    return found


def matching(modules: Iterable[str], names: Iterable[str]) -> set[str]:
    """The modules that are one of ``names`` or inside one of them (``a`` matches ``a.b``)."""
    wanted = tuple(names)
    return {m for m in modules if m in wanted or m.startswith(tuple(f"{n}." for n in wanted))}
