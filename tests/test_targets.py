"""updater.config.targets: the target a machine is, from its system, machine, libc and
Rosetta; an unsupported platform named with the targets there are; MUX_TARGET."""

from __future__ import annotations

import os
import sys

import pytest

from updater.config import settings as mux_settings
from updater.config.targets import TARGETS, UnsupportedPlatform, detect_target, target_for


@pytest.mark.parametrize(
    ("system", "machine", "musl", "rosetta", "expected"),
    [
        ("Linux", "x86_64", False, False, "x86_64-unknown-linux-gnu"),
        ("Linux", "amd64", True, False, "x86_64-unknown-linux-musl"),
        ("Linux", "aarch64", False, False, "aarch64-unknown-linux-gnu"),
        ("Linux", "arm64", True, False, "aarch64-unknown-linux-musl"),
        ("Darwin", "arm64", False, False, "aarch64-apple-darwin"),
        ("Darwin", "x86_64", False, False, "x86_64-apple-darwin"),
        ("Darwin", "x86_64", False, True, "aarch64-apple-darwin"),  # Rosetta 2
    ],
)
def test_target_for(system: str, machine: str, musl: bool, rosetta: bool, expected: str) -> None:
    assert target_for(system, machine, musl=musl, rosetta=rosetta) == expected


@pytest.mark.parametrize(("system", "machine"), [("Linux", "riscv64"), ("FreeBSD", "x86_64")])
def test_unsupported_platform_lists_the_targets(system: str, machine: str) -> None:
    with pytest.raises(UnsupportedPlatform) as caught:
        target_for(system, machine)
    assert all(target in str(caught.value) for target in TARGETS)


def test_mux_target_overrides_and_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    # MUX_TARGET is read once, into the settings, and checked where the target is chosen.
    monkeypatch.setenv("MUX_TARGET", "aarch64-unknown-linux-musl")
    assert detect_target(mux_settings.load().target) == "aarch64-unknown-linux-musl"
    monkeypatch.setenv("MUX_TARGET", "sparc-sun-solaris")
    with pytest.raises(UnsupportedPlatform, match="not a published target"):
        detect_target(mux_settings.load().target)


def test_the_running_libc_is_asked_not_a_file() -> None:

    monkey_free = detect_target.__module__
    assert monkey_free == "updater.config.targets"
    if sys.platform.startswith("linux"):
        glibc = bool(os.confstr("CS_GNU_LIBC_VERSION"))
        assert detect_target().endswith("-gnu" if glibc else "-musl")
