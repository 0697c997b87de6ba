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


@pytest.mark.parametrize("checked_at", ["NaN", "Infinity", "-Infinity"])
def test_a_time_that_is_not_a_number_never_answers(
    tmp_path: Path, monkeypatch, checked_at: str
) -> None:
    # Python's JSON reader takes NaN and Infinity; an answer of no age must not be forever fresh.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    key = {"k": 1}
    cache.store(key, {"ok": True}, now=1000.0)
    text = cache.check_cache_path().read_text()
    cache.check_cache_path().write_text(
        text.replace('"checked_at": 1000.0', f'"checked_at": {checked_at}')
    )
    assert checked_at in cache.check_cache_path().read_text()
    assert cache.load(key, 3600, now=1000.0) is None
    assert cache.load(key, float("inf"), now=1000.0) is None
