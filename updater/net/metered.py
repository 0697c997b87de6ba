"""Is the connection metered? What the system says, asked without a new dependency.

A server's background install (:mod:`updater.commands.autoinstall`) downloads nothing on a
connection the system reports as metered, unless ``download_on_metered`` allows it. The
question costs one short-lived program, asked only when an install is otherwise due:

* **Linux**: NetworkManager's ``Metered`` property of ``/org/freedesktop/NetworkManager``
  over the system D-Bus (an ``NMMetered``: 0 unknown, 1 yes, 2 no, 3 guess-yes, 4
  guess-no; yes and guess-yes count as metered), through ``busctl``, else ``gdbus``, else
  ``dbus-send``, whichever is installed;
* **macOS**: the flags behind ``NWPath.isExpensive`` / ``isConstrained`` (Low Data Mode):
  the default route's interface (``route -n get default``) and its ``EXPENSIVE`` extended
  flag or ``CONSTRAINED`` flag as ``ifconfig -v`` prints them.

Anything else (no NetworkManager, no system bus, a tool missing, an answer that does not
parse, more than :data:`TIMEOUT` seconds) is "unknown", which counts as not metered: mux
never refuses to work because it cannot tell. The parsers are pure functions of the tools'
output (``tests/test_metered.py`` feeds them recorded answers).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence

TIMEOUT = 2.0
_NM = ("org.freedesktop.NetworkManager", "/org/freedesktop/NetworkManager")
# NMMetered: NM_METERED_UNKNOWN 0, YES 1, NO 2, GUESS_YES 3, GUESS_NO 4.
_METERED_VALUES = {1: True, 3: True, 2: False, 4: False}

Run = Callable[[Sequence[str]], str | None]


def _run(command: Sequence[str]) -> str | None:
    """The program's output, or None when it is missing, fails or takes longer than
    :data:`TIMEOUT` (then it is killed with everything it started: its own session)."""
    if shutil.which(command[0]) is None:
        return None
    try:
        child = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        return None
    with child:
        try:
            out, _ = child.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
            return None
    if child.returncode != 0:
        return None
    return out[:65536].decode("utf-8", "replace")


def is_metered(*, run: Run = _run, platform: str = sys.platform) -> bool | None:
    """True or False when the system says; None when it does not (unknown)."""
    if platform.startswith("linux"):
        return network_manager_metered(run)
    if platform == "darwin":
        return macos_expensive(run)
    return None


# -- Linux: NetworkManager over D-Bus --------------------------------------------------------


def network_manager_metered(run: Run) -> bool | None:
    service, path = _NM
    asks: list[tuple[list[str], Callable[[str], int | None]]] = [
        (["busctl", "--system", "get-property", service, path, service, "Metered"], parse_busctl),
        (
            [
                *("gdbus", "call", "--system", "--dest", service, "--object-path", path),
                *("--method", "org.freedesktop.DBus.Properties.Get", service, "Metered"),
            ],
            parse_gdbus,
        ),
        (
            [
                *("dbus-send", "--system", "--print-reply", f"--dest={service}", path),
                "org.freedesktop.DBus.Properties.Get",
                f"string:{service}",
                "string:Metered",
            ],
            parse_dbus_send,
        ),
    ]
    for command, parse in asks:
        answer = run(command)
        if answer is None:
            continue  # not installed, or no answer: the next tool may have one
        value = parse(answer)
        return _METERED_VALUES.get(value) if value is not None else None
    return None


def parse_busctl(text: str) -> int | None:
    """``busctl get-property``: ``u 4``."""
    match = re.fullmatch(r"\s*u\s+(\d{1,10})\s*", text)
    return int(match[1]) if match else None


def parse_gdbus(text: str) -> int | None:
    """``gdbus call … Properties.Get``: ``(<uint32 4>,)``."""
    match = re.fullmatch(r"\s*\(\s*<\s*uint32\s+(\d{1,10})\s*>\s*,?\s*\)\s*", text)
    return int(match[1]) if match else None


def parse_dbus_send(text: str) -> int | None:
    """``dbus-send --print-reply … Properties.Get``: a ``method return`` line, then
    ``   variant       uint32 4``."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if len(lines) != 2 or not lines[0].startswith("method return"):
        return None
    match = re.fullmatch(r"variant\s+uint32\s+(\d{1,10})", lines[1])
    return int(match[1]) if match else None


# -- macOS: the default route's interface flags ----------------------------------------------


def macos_expensive(run: Run) -> bool | None:
    route = run(["route", "-n", "get", "default"])
    interface = parse_route_interface(route) if route is not None else None
    if interface is None:
        return None
    shown = run(["ifconfig", "-v", interface])
    return parse_ifconfig_flags(shown) if shown is not None else None


def parse_route_interface(text: str) -> str | None:
    """``route -n get default``: the ``interface: en0`` line."""
    match = re.search(r"^\s*interface:\s*([A-Za-z0-9._-]{1,15})\s*$", text, re.MULTILINE)
    return match[1] if match else None


def parse_ifconfig_flags(text: str) -> bool | None:
    """``ifconfig -v <if>``: True when its ``eflags`` name ``EXPENSIVE`` or its ``xflags``
    name ``CONSTRAINED`` (Low Data Mode); False when it shows its flags without them; None
    when it shows none (not an answer to the question)."""
    found: dict[str, set[str]] = {}
    for match in re.finditer(r"\b(eflags|xflags)=[0-9a-fA-F]+<([A-Z0-9_,]*)>", text):
        found.setdefault(match[1], set()).update(filter(None, match[2].split(",")))
    if "eflags" not in found:
        return None
    return "EXPENSIVE" in found["eflags"] or "CONSTRAINED" in found.get("xflags", set())
