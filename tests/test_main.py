"""updater.__main__, in this process: the fast paths answer before the CLI framework is
needed, and every other command goes to it. Its real-process side (start-up, what each path
imports) is in test_imports.py."""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import Iterator

import pytest

from updater import __main__ as entry
from updater import __version__


@pytest.fixture
def run_main(monkeypatch: pytest.MonkeyPatch) -> Iterator:
    def run(*args: str) -> int:
        monkeypatch.setattr(sys, "argv", ["mux", *args])
        with pytest.raises(SystemExit) as exited:
            entry.main()
        return int(exited.value.code or 0)

    yield run
    gc.unfreeze()  # main() freezes what is alive before the process exits; this one goes on


@pytest.mark.parametrize("args", [["version", "--json"], ["--version"], ["-V"]])
def test_the_version_is_answered_on_the_fast_path(run_main, capsys, args: list[str]) -> None:
    assert run_main(*args) == 0
    out = capsys.readouterr().out
    if args == ["version", "--json"]:
        assert json.loads(out)["version"] == __version__
    else:
        assert out.startswith(f"mux {__version__}")


def test_a_usage_error_goes_through_the_cli(run_main, capsys) -> None:
    assert run_main("no-such-command") == 2
    assert "no-such-command" in capsys.readouterr().err
