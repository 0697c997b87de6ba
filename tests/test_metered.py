"""Is the connection metered? The parsers of what the system's tools answer, and the question
asked of real programs (this machine has no NetworkManager: fakes of the tools on PATH)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from updater.net import metered

# What the tools print, as they print it (busctl and gdbus from systemd and GLib; dbus-send
# from dbus; route and ifconfig -v from macOS, whose eflags/xflags are the bits behind
# NWPath.isExpensive / isConstrained).
BUSCTL = {"u 1\n": 1, "u 4\n": 4, "u 0\n": 0, 's "yes"\n': None, "": None}
GDBUS = {"(<uint32 3>,)\n": 3, "(<uint32 2>,)\n": 2, "(<'yes'>,)\n": None}
DBUS_SEND = {
    "method return time=1700000000.123456 sender=:1.5 -> destination=:1.99 serial=1234 "
    "reply_serial=2\n   variant       uint32 1\n": 1,
    "method return time=1700000000.1 sender=:1.5 -> destination=:1.9 serial=3 "
    'reply_serial=2\n   variant       string "yes"\n': None,
    "Error org.freedesktop.DBus.Error.ServiceUnknown: The name is not activatable\n": None,
}
ROUTE = """\
   route to: default
destination: default
       mask: default
    gateway: 172.20.10.1
  interface: en0
      flags: <UP,GATEWAY,DONE,STATIC,PRCLONING,GLOBAL>
"""
IFCONFIG_HOTSPOT = """\
en0: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500 index 11
\teflags=4080<TXSTART,NOAUTOIPV6LL,EXPENSIVE>
\txflags=4<NOAUTONX>
\tether 3c:22:fb:00:00:01
\tinet 172.20.10.2 netmask 0xfffffff0 broadcast 172.20.10.15
\tstatus: active
"""
IFCONFIG_LOW_DATA = IFCONFIG_HOTSPOT.replace(",EXPENSIVE>", ">").replace(
    "<NOAUTONX>", "<NOAUTONX,CONSTRAINED>"
)
IFCONFIG_FREE = IFCONFIG_HOTSPOT.replace(",EXPENSIVE>", ">")


@pytest.mark.parametrize(("text", "value"), list(BUSCTL.items()))
def test_busctl(text: str, value: int | None) -> None:
    assert metered.parse_busctl(text) == value


@pytest.mark.parametrize(("text", "value"), list(GDBUS.items()))
def test_gdbus(text: str, value: int | None) -> None:
    assert metered.parse_gdbus(text) == value


@pytest.mark.parametrize(("text", "value"), list(DBUS_SEND.items()))
def test_dbus_send(text: str, value: int | None) -> None:
    assert metered.parse_dbus_send(text) == value


def test_macos_route_and_flags() -> None:
    assert metered.parse_route_interface(ROUTE) == "en0"
    assert metered.parse_route_interface("route: writing to routing socket: not in table\n") is None
    assert metered.parse_ifconfig_flags(IFCONFIG_HOTSPOT) is True
    assert metered.parse_ifconfig_flags(IFCONFIG_LOW_DATA) is True
    assert metered.parse_ifconfig_flags(IFCONFIG_FREE) is False
    assert metered.parse_ifconfig_flags("en0: flags=8863<UP> mtu 1500\n") is None


def answers(table: dict[str, str | None]):
    """A fake ``run``: each tool's answer (None: not installed or it failed)."""
    asked: list[str] = []

    def run(command: Sequence[str]) -> str | None:
        asked.append(command[0])
        return table.get(command[0])

    return run, asked


@pytest.mark.parametrize(
    ("table", "expected", "asked"),
    [
        ({"busctl": "u 1\n"}, True, ["busctl"]),
        ({"busctl": "u 3\n"}, True, ["busctl"]),  # guess-yes
        ({"busctl": "u 4\n"}, False, ["busctl"]),
        ({"busctl": "u 0\n"}, None, ["busctl"]),  # NetworkManager does not know
        ({"gdbus": "(<uint32 1>,)\n"}, True, ["busctl", "gdbus"]),
        ({"dbus-send": next(iter(DBUS_SEND))}, True, ["busctl", "gdbus", "dbus-send"]),
        ({}, None, ["busctl", "gdbus", "dbus-send"]),  # no tool, or no NetworkManager
        ({"busctl": "garbage"}, None, ["busctl"]),
    ],
)
def test_linux_asks_network_manager_and_unknown_is_none(table, expected, asked) -> None:
    run, seen = answers(table)
    assert metered.is_metered(run=run, platform="linux") is expected
    assert seen == asked


def test_macos_asks_the_default_route_s_interface() -> None:
    run, seen = answers({"route": ROUTE, "ifconfig": IFCONFIG_HOTSPOT})
    assert metered.is_metered(run=run, platform="darwin") is True
    assert seen == ["route", "ifconfig"]
    run, _ = answers({"route": ROUTE, "ifconfig": IFCONFIG_FREE})
    assert metered.is_metered(run=run, platform="darwin") is False
    run, _ = answers({})
    assert metered.is_metered(run=run, platform="darwin") is None
    assert metered.is_metered(run=run, platform="freebsd") is None


def tool(folder: Path, name: str, script: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)


def test_real_programs_are_asked_with_a_deadline_and_failures_are_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    sleep = shutil.which("sleep")
    monkeypatch.setenv("PATH", str(tools))
    assert metered.is_metered(platform="linux") is None  # none installed
    tool(tools, "busctl", "echo 'Failed to connect to bus: No such file or directory' >&2; exit 1")
    tool(tools, "gdbus", "printf '(<uint32 1>,)\\n'")
    assert metered.is_metered(platform="linux") is True  # busctl failed; gdbus answered
    tool(tools, "busctl", f"{sleep} 30; echo 'u 4'")  # a child of its own holds the pipe
    monkeypatch.setattr(metered, "TIMEOUT", 0.5)
    began = time.monotonic()
    assert metered.is_metered(platform="linux") is True  # a hung busctl is given up on
    assert time.monotonic() - began < 5
    os.remove(tools / "gdbus")
    assert metered.is_metered(platform="linux") is None
