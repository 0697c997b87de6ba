"""updater.commands.cache and the status line it keeps: hostile contents are garbage, never a
crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from updater.commands import cache
from updater.protocol import StatusLineError, parse_status_line


def test_deeply_nested_json_is_garbage_not_a_crash(tmp_path: Path, monkeypatch) -> None:
    deep = b"[" * 100_000
    with pytest.raises(StatusLineError) as caught:
        parse_status_line(deep)
    assert caught.value.kind == "garbage"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache.check_cache_path().parent.mkdir(parents=True)
    cache.check_cache_path().write_bytes(deep)
    assert cache.load({"k": 1}, 3600) is None
