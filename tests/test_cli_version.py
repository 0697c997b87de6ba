"""updater.cli.version: ``mux version`` as text and as one JSON line, from the build info
(updater.config.devbuild says what a development checkout is)."""

from __future__ import annotations

import json

import pytest

from updater import __version__
from updater.cli.version import print_version
from updater.config.buildinfo import current
from updater.config.devbuild import development_facts
from updater.config.targets import detect_target_or_empty
from updater.protocol import PROTOCOL_VERSION


def test_a_checkout_is_its_package_version_protocol_and_this_machine_s_target() -> None:
    assert development_facts() == (__version__, PROTOCOL_VERSION, detect_target_or_empty())
    info = current()
    assert info.development and (info.version, info.protocol_version) == (
        __version__,
        PROTOCOL_VERSION,
    )


def test_mux_version_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert print_version(as_json=False) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"mux {__version__} (development build)"
    assert f"protocol: {PROTOCOL_VERSION}" in lines
    assert any(line.startswith("trusted minisign keys: ") for line in lines)


def test_mux_version_as_one_json_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert print_version(as_json=True) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    doc = json.loads(out)
    assert doc["version"] == __version__ and doc["protocol_version"] == PROTOCOL_VERSION
    assert doc["development"] is True and "schema" in doc
