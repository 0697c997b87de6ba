"""Typed records for the fast paths, without importing :mod:`typing` at run time.

``mux version`` and a cached ``mux update --check`` (what a sidebar runs every few minutes)
must start fast, and ``typing`` alone costs them more than their own code: its import, and
``typing.NamedTuple`` evaluating every annotation of every record it defines. The records on
those paths therefore derive from this module's :class:`NamedTuple`. For a type checker it *is*
``typing.NamedTuple``; at run time it builds the same class from the same class body with
:func:`collections.namedtuple` (tuple semantics, ``_replace``, ``_fields``, defaults, methods
and properties alike) and never looks at the annotations. Records elsewhere use dataclasses.
"""

from __future__ import annotations

import collections

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import NamedTuple as NamedTuple
else:
    # What typing.NamedTuple leaves out of the class it makes, besides the fields.
    _NOT_COPIED = frozenset({"__module__", "__qualname__", "__annotations__", "__orig_bases__"})

    class _NamedTupleMeta(type):
        def __new__(mcls, name, bases, namespace):
            if not bases:  # NamedTuple itself
                return super().__new__(mcls, name, bases, namespace)
            fields = tuple(namespace.get("__annotations__", ()))
            with_default = [field for field in fields if field in namespace]
            if fields[len(fields) - len(with_default) :] != tuple(with_default):
                raise TypeError(f"{name}: a field without a default follows one with a default")
            record = collections.namedtuple(
                name,
                fields,
                defaults=[namespace[field] for field in with_default],
                module=namespace["__module__"],
            )
            record.__qualname__ = namespace.get("__qualname__", name)
            for key, value in namespace.items():
                if key not in fields and key not in _NOT_COPIED:
                    setattr(record, key, value)
            return record

    class NamedTuple(metaclass=_NamedTupleMeta):
        """Subclass it as ``typing.NamedTuple`` (see the module docstring)."""
