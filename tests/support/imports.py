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


# The stdlib modules `json` brings (re, enum, functools, collections...), which any path that
# reads the build info needs.
JSON_MODULES = {
    "__future__",
    "_collections",
    "_functools",
    "_json",
    "_operator",
    "_sre",
    "collections",
    "copyreg",
    "enum",
    "functools",
    "itertools",
    "json",
    "keyword",
    "operator",
    "re",
    "reprlib",
    "types",
}


VERSION_ALLOWED = {
    *JSON_MODULES,
    "gc",  # built in: freezing what is alive spares the interpreter's last collection
    "updater",
    "updater.__main__",
    "updater.config.buildinfo",
    "updater.config.buildfolder",
    "updater.cli.version",
    "updater.errors",
    "updater.text",
    "updater.cli.render",
    # Every mux holds a shared lock on its installed version for its whole life (issue 11):
    # first thing, fast paths included; fcntl only in an installed build.
    "updater.install.inuse",
    "updater.locks",
    "fcntl",
}


# The cached check reads the settings and the cache, decides, and asks every live server for
# its status line: mux's own modules and nothing else. Its directories are platformdirs'
# answers computed without it (updater.config.dirs); its records are NamedTuples without typing
# (updater._records). The HTTP stack, the CLI framework and the verification libraries belong
# to the uncached check and to `mux update`.
CACHED_CHECK_ALLOWED = {
    *VERSION_ALLOWED,
    "updater.config.dirs",
    "updater._records",
    "updater.config.targets",
    "updater.commands.cache",
    "updater.commands.check",
    "updater.cli.check",  # the one assembly of the check, shared with typer's `mux update`
    # The pure core: the request and its decision, the offer, the servers' verdicts, the
    # report, and the install record's rules (which the kept versions are read by).
    "updater.core.request",
    "updater.core.offer",
    "updater.core.verdicts",
    "updater.core.report",
    "updater.core.retention",
    # The status query and its parts, one job each (updater.servers.status): all of them
    # standard library only, socket and the protocol only with a server to ask.
    "updater.servers.status",
    "updater.servers.addresses",
    "updater.servers.runtime",
    "updater.servers.peer",
    "updater.servers.proof",
    "updater.servers.wire",
    "updater.config.settings",
    "updater.config.settings_record",  # its records, apart so the policy can name them
    # Issue 38: the source the install remembers (one small read of install.json), and the
    # one validation of mux update's flags.
    "updater.config.remembered",
    "updater.core.update_flags",
    "updater.core.nextstep",  # the printed next steps, with the user's options
    "updater.config.trustkeys",  # --trust-key: a key line or a .pub file's path
    "updater.timestamps",
    # The versions the install keeps, and why (issue 11: a released build's check reports
    # them), read by the layout's rules on path strings: no pathlib (whose import, with
    # urllib.parse and ipaddress, was 12% of the check in the build; docs/build.md).
    "updater.install.layout",
    "updater.files",  # its reads; what it writes imports pathlib and tempfile when it writes
    "updater.urls",  # a server address may be a loopback URL (urllib only when one is)
    # (updater.config.marker only for a packaged build: buildinfo.packager_marker_file)
    # Issue 22: the user's skips, hold and failed starts withhold an offer (one small JSON
    # file read with os.path; its writer's fcntl and pathlib only when it writes), and
    # their rules. The user's config.toml is read (tomllib) only when there is one.
    "updater.commands.userstate",
    "updater.core.userstate",
}


def outside(imported: set[str], allowed: set[str]) -> list[str]:
    """What ``imported`` holds beyond ``allowed``. A listed package allows its submodules
    (``email`` allows ``email.utils``), except mux's own: each ``updater`` module is named,
    and a subpackage of ``updater`` is allowed with the modules named inside it (its
    ``__init__`` is empty: test_every_subpackage_init_is_empty)."""

    def is_allowed(module: str) -> bool:
        if module == "updater" or module.startswith("updater."):
            return module in allowed or any(a.startswith(module + ".") for a in allowed)
        return bool(matching([module], allowed))

    return sorted(m for m in imported if not is_allowed(m))


def run_released(
    entry: Path, args: list[str], env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    # -E -B: as the stand-in launcher runs it (no PYTHON* variables, no bytecode written).
    return imported_by([str(entry), *args], env, python_flags=["-E", "-B"])
