"""Which release target this machine runs: OS, architecture and C library."""

from __future__ import annotations

import os

from updater.errors import MuxError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the fast path
if TYPE_CHECKING:
    from typing import Protocol

    class BuiltFor(Protocol):
        """What :func:`release_target` reads of a build: a
        :class:`~updater.config.buildinfo.BuildInfo`, whose module reaches this one through
        :mod:`updater.config.devbuild` (naming it here would close a circle)."""

        @property
        def development(self) -> bool: ...

        @property
        def target(self) -> str: ...


TARGETS = (
    "x86_64-unknown-linux-gnu",
    "aarch64-unknown-linux-gnu",
    "x86_64-unknown-linux-musl",
    "aarch64-unknown-linux-musl",
    "x86_64-apple-darwin",
    "aarch64-apple-darwin",
)

_ARCH_ALIASES = {
    "x86_64": "x86_64",
    "amd64": "x86_64",
    "x64": "x86_64",
    "aarch64": "aarch64",
    "arm64": "aarch64",
    "armv8l": "aarch64",
}


class UnsupportedPlatform(MuxError):
    pass


def target_for(system: str, machine: str, *, musl: bool = False, rosetta: bool = False) -> str:
    """The release target for a platform description (pure)."""
    arch = _ARCH_ALIASES.get(machine.lower())
    os_name = system.lower()
    if os_name == "darwin" and rosetta:
        arch = "aarch64"
    if arch is None or os_name not in ("linux", "darwin"):
        raise UnsupportedPlatform(
            f"no mux build for {system} {machine}",
            hint="published targets: " + ", ".join(TARGETS),
        )
    if os_name == "darwin":
        return f"{arch}-apple-darwin"
    return f"{arch}-unknown-linux-{'musl' if musl else 'gnu'}"


def _running_on_musl() -> bool:
    # glibc answers CS_GNU_LIBC_VERSION; musl has no such confstr. This asks the C library
    # the interpreter is linked against, not whether some loader file happens to exist.
    try:
        return not os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        # deferred: this module is on a fast path (docs/build.md)
        import platform

        libc, _ = platform.libc_ver()
        return libc != "glibc"


def _running_under_rosetta() -> bool:
    # deferred: this module is on a fast path (docs/build.md)
    import subprocess

    try:
        out = subprocess.run(
            ["sysctl", "-in", "sysctl.proc_translated"],
            capture_output=True,
            text=True,
            timeout=2,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out == "1"


def detect_target(override: str | None = None) -> str:
    """``override`` (``MUX_TARGET``) when given and published, else the running system's."""
    if override:
        if override not in TARGETS:
            raise UnsupportedPlatform(
                f"MUX_TARGET={override} is not a published target",
                hint="published targets: " + ", ".join(TARGETS),
            )
        return override
    uname = os.uname()
    system, machine = uname.sysname, uname.machine
    if system == "Linux":
        return target_for(system, machine, musl=_running_on_musl())
    if system == "Darwin":
        return target_for(system, machine, rosetta=machine == "x86_64" and _running_under_rosetta())
    return target_for(system, machine)


def detect_target_or_empty() -> str:
    try:
        return detect_target()
    except UnsupportedPlatform:
        return ""


def release_target(override: str | None, build: BuiltFor, *, recorded: object = None) -> str:
    """The build ``mux update`` installs and ``--check`` looks for: ``MUX_TARGET`` (checked),
    else the target this release build was made for, else the one on record (a development
    checkout updating an install), else this machine's."""
    if override:
        return detect_target(override)
    if not build.development and build.target:
        return build.target
    if isinstance(recorded, str) and recorded:
        return recorded
    return build.target or detect_target()  # a development build's is this machine's
