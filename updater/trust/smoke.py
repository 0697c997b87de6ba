"""Layer 5: the new build runs here and says it is what the manifest says.

Its ``mux version --json`` must report the manifest's version, protocol and this target:
this catches a wrong-architecture build that passes its checksum.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import NamedTuple

from updater.trust.layers import (
    LAYER_SMOKE_TEST,
    layer_failure,
)


class Expected(NamedTuple):
    version: str
    protocol_version: int
    target: str


def reported_build(folder: Path, *, timeout: float) -> Expected:
    """What ``<folder>/mux version --json`` says it is (run once, with a timeout)."""

    command = [str(folder / "mux"), "version", "--json"]
    try:
        result = subprocess.run(
            command, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False
        )
    except subprocess.TimeoutExpired:
        raise layer_failure(
            LAYER_SMOKE_TEST, f"{folder / 'mux'} did not answer `mux version --json`"
        ) from None
    except OSError as exc:
        raise layer_failure(
            LAYER_SMOKE_TEST,
            f"{folder / 'mux'} does not run here ({exc.strerror}); wrong architecture?",
        ) from None
    try:
        doc = json.loads(result.stdout)
        return Expected(str(doc["version"]), int(doc["protocol_version"]), str(doc["target"]))
    except (ValueError, KeyError, TypeError, RecursionError):
        raise layer_failure(
            LAYER_SMOKE_TEST,
            f"{folder / 'mux'} exited {result.returncode} without a valid `version --json` "
            "(wrong architecture or a broken build?)",
        ) from None


def check_build(reported: Expected, expected: Expected) -> None:
    if reported != expected:
        raise layer_failure(
            LAYER_SMOKE_TEST,
            "the new mux reports "
            f"{reported.version} / protocol {reported.protocol_version} / {reported.target}, "
            f"expected {expected.version} / protocol {expected.protocol_version} / "
            f"{expected.target}",
        )


def smoke_test(folder: Path, expected: Expected, *, timeout: float) -> None:
    """``<folder>/mux version --json`` must report the release's version, protocol, target."""
    check_build(reported_build(folder, timeout=timeout), expected)


def run_kept_build(folder: Path, version: str, target: str, *, timeout: float) -> int:
    """A kept build, run once before ``--rollback`` switches to it: it must report
    ``version`` for ``target``; returns the protocol it speaks (from the same answer)."""
    reported = reported_build(folder, timeout=timeout)
    check_build(reported, Expected(version, reported.protocol_version, target))
    return reported.protocol_version
