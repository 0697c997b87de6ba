"""updater._records.NamedTuple behaves as typing.NamedTuple does, without importing typing."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

import pytest

from updater import _records


def define(base: type) -> type:
    class Offer(base):  # type: ignore[misc, valid-type]
        """An offer."""

        tag: str
        size: int = 0
        notes: tuple[str, ...] = ()

        @property
        def big(self) -> bool:
            return self.size > 10

        def describe(self) -> str:
            return f"{self.tag} ({self.size})"

        @classmethod
        def empty(cls) -> typing.Any:
            return cls("v0")

    return Offer


@pytest.mark.parametrize("base", [_records.NamedTuple, typing.NamedTuple], ids=["light", "typing"])
def test_the_record_behaves_like_a_typing_named_tuple(base: type) -> None:
    offer_type = define(base)
    offer = offer_type("v1", 20)
    assert offer_type._fields == ("tag", "size", "notes")
    assert offer_type._field_defaults == {"size": 0, "notes": ()}
    assert offer == offer_type("v1", 20, ()) == ("v1", 20, ())
    assert hash(offer) == hash(("v1", 20, ()))
    assert repr(offer) == "Offer(tag='v1', size=20, notes=())"
    assert offer._replace(size=1) == offer_type("v1", 1)
    assert type(offer._replace(size=1)) is offer_type
    assert offer.big and not offer_type.empty().big
    assert offer.describe() == "v1 (20)"
    assert offer._asdict() == {"tag": "v1", "size": 20, "notes": ()}
    assert offer_type.__doc__ == "An offer."
    assert offer_type.__name__ == "Offer" and offer_type.__module__ == __name__
    assert offer_type.__qualname__.endswith("define.<locals>.Offer")
    with pytest.raises(AttributeError):
        offer.tag = "v2"  # type: ignore[misc]
    with pytest.raises(TypeError):
        offer_type()


@pytest.mark.parametrize("base", [_records.NamedTuple, typing.NamedTuple], ids=["light", "typing"])
def test_a_field_without_a_default_after_one_with_is_refused(base: type) -> None:
    with pytest.raises(TypeError):

        class Bad(base):  # type: ignore[misc, valid-type, unused-ignore]
            first: int = 0
            second: int


def test_defining_records_imports_no_typing() -> None:
    code = (
        "import sys\n"
        "from updater._records import NamedTuple\n"
        "class Point(NamedTuple):\n"
        "    x: int\n"
        "    y: 'list[Undefined]' = 0\n"  # never evaluated
        "assert Point(1) == (1, 0)\n"
        "print(sorted(m for m in ('typing', 'dataclasses', 'inspect') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert result.stdout.strip() == "[]"
