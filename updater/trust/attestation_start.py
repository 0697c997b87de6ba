"""Starting layer 3's child (:mod:`updater.trust.attestation_worker`), with as little imported
as possible first.

The child's import of sigstore is the longest single step of a delta update: the update waits
for its answer, so every millisecond before the child starts is one on that path. This module
is what ``mux update`` imports before it starts the child: the standard library's
``subprocess`` and the build's info and settings, none of what talking to the child needs
(base64, dataclasses, pathlib, typing, the bounded read of its answer: the child started 24 ms
later, median of 15 runs of the build, when all of that came first).
"""

from __future__ import annotations

import atexit
import os
import subprocess

from updater.config import buildinfo
from updater.config.settings import Settings, load_for
from updater.core.retention import StagedCopy
from updater.errors import MuxError
from updater.install.layout import read_record, resolve_layout

WORKER_ARG = "__verify-attestation"  # argv[1] of the child; not a command users type

# Flags of `mux update` with which no attestation is verified: nothing to start early for
# (a --dry-run verifies the release's attestation for its signed digest, as the run would).
_NO_ARCHIVE_FLAGS = frozenset(
    {"--check", "--rollback", "--prune", "--unstage", "--insecure-skip-attestation", "--help"}
)
_prestarted: list[subprocess.Popen[bytes]] = []  # at most one: the child prestart() started


def spawn() -> subprocess.Popen[bytes] | str:
    """A child of this same mux importing sigstore from now on, or why it could not start."""
    command = [*buildinfo.current_mux_command(), WORKER_ARG]
    try:
        return subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            close_fds=True,
        )
    except OSError as exc:
        return f"{command[0]}: {exc.strerror or exc}"


def prestart(update_args: list[str]) -> None:
    """Start the child at once when ``mux update <update_args>`` may verify an archive and a
    spare core can run it; :func:`take_prestarted` hands it to the update. A child nobody
    asked is stopped when this process exits.

    ``mux update`` runs this before importing its CLI, which saves that import's time (about
    0.1 s of the build's) on the attestation's path; the arguments are only looked at, the
    CLI still parses them. Guessing wrong costs a child that is stopped unused.

    Not for a build that knows no repository (a development checkout, a test build): no
    attestation can name whose workflow built a release for it, so the layer can only fail
    or be skipped, and a child would cost a second of CPU for nothing.
    """
    if any(arg.partition("=")[0] in _NO_ARCHIVE_FLAGS for arg in update_args):
        return
    if _prestarted or not spare_core():
        return
    try:
        build = buildinfo.current()
        settings = load_for(build)
        if not settings.github.repo:
            return
        if "--stage" not in update_args and has_staged_release(settings, build):
            return  # it is applied without its archive; a failed apply starts the layer's own
    except MuxError:
        return  # the CLI says what is wrong with the settings; nothing to start early
    process = spawn()
    if isinstance(process, str):
        return  # the layer starts its own when it gets there, and reports why that fails
    _prestarted.append(process)
    atexit.register(_stop_unasked, process)


def has_staged_release(settings: Settings, build: buildinfo.BuildInfo) -> bool:
    """The install holds a staged release (``mux update --stage``), which an update applies
    without verifying an attestation again."""
    if build.development and settings.home is None:
        return False
    layout = resolve_layout(settings.home, settings.bin_dir, development=build.development)
    copy = StagedCopy.of(read_record(layout))
    return copy is not None and copy.version in layout.installed_versions()


def take_prestarted() -> subprocess.Popen[bytes] | None:
    """The child :func:`prestart` started, for the update to ask; None when there is none."""
    return _prestarted.pop() if _prestarted else None


def _stop_unasked(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()


def spare_core(cgroup_root: str = "/sys/fs/cgroup", proc_self: str = "/proc/self") -> bool:
    """Whether a second CPU can run the child beside this process: two cores this process
    may run on, and a CPU quota (a container's cgroup v2 ``cpu.max``) of at least two."""
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    quota = _cgroup_cpus(cgroup_root, proc_self)
    return cores >= 2 and (quota is None or quota >= 2)


def _cgroup_cpus(cgroup_root: str, proc_self: str) -> float | None:
    """The CPUs this process's cgroup v2 quota allows; None when unlimited or unknown."""
    try:
        with open(os.path.join(proc_self, "cgroup"), encoding="utf-8") as membership:
            lines = membership.read(64 * 1024).splitlines()
        group = next(line[3:] for line in lines if line.startswith("0::"))
        limits = os.path.join(cgroup_root, group.lstrip("/"), "cpu.max")
        with open(limits, encoding="ascii") as cpu_max:
            quota, period = cpu_max.read(256).split()
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, StopIteration, ValueError, ZeroDivisionError):
        return None
