"""How a download reports as it goes: the interface :mod:`updater.cli.render` draws, and the
silence of a run nobody watches. Its own module, so that the client and the download (which
each name the other) both read it from below."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """What a download reports as it goes (rendered by :mod:`updater.cli.render`)."""

    def start(self, total: int | None) -> None: ...

    def advance(self, done: int) -> None: ...

    def finish(self, completed: bool = True) -> None: ...


class NoProgress:
    def start(self, total: int | None) -> None:
        pass

    def advance(self, done: int) -> None:
        pass

    def finish(self, completed: bool = True) -> None:
        pass
