"""A value computed once per live object, remembered by the object's identity and forgotten when
the object goes.

The planner asks the same questions of the same objects many times (an index array's span, a
layout's local shapes), and those objects do not hash by value cheaply: numpy arrays do not hash
at all, and a ``Layout`` compares by identity (``eq=False``) because a value hash would read every
device's index arrays. A dict keyed by ``id()`` would have to keep each object alive (else a new
object could reuse the id and hit a stale entry), so a module-level one grows for the life of the
process. ``IdentityCache`` holds a weak reference instead: its callback drops the entry when the
object is collected, so the cache holds nothing alive and never outgrows the live objects.
"""

from __future__ import annotations

import weakref
from functools import partial
from typing import Any, Callable, Generic, TypeVar

Value = TypeVar("Value")


class IdentityCache(Generic[Value]):
    """``cache(obj)``: ``make(obj)``, computed once per live object. An object that takes no weak
    reference is computed every time (never remembered by an id that could be reused). The value
    must not hold the object itself, or the object would never go."""

    def __init__(self, make: Callable[[Any], Value]):
        self.make = make
        self.entries: dict[int, tuple[weakref.ref, Value]] = {}  # id -> (weak ref to the object, its value)

    def __call__(self, obj: Any) -> Value:
        hit = self.entries.get(id(obj))
        if hit is not None and hit[0]() is obj:
            return hit[1]
        value = self.make(obj)
        try:
            ref = weakref.ref(obj, partial(self.forget, id(obj)))
        except TypeError:
            return value
        self.entries[id(obj)] = (ref, value)
        return value

    def forget(self, key: int, ref: weakref.ref) -> None:
        """The weak reference's callback: the object ``ref`` named is gone, so is its entry (unless
        the id already names a newer object's)."""
        hit = self.entries.get(key)
        if hit is not None and hit[0] is ref:
            del self.entries[key]

    def clear(self) -> None:
        """Forget every entry (tests that swap how layouts are made)."""
        self.entries.clear()

    def __len__(self) -> int:
        return len(self.entries)


class ByIdentity:
    """A dict key standing for its object by identity, holding the object: the id cannot name
    another object while the key lives (a bare ``id()`` in a long-lived key could, once the
    object went). For objects that do not hash (a Layout compares by content, an array not at all)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ByIdentity) and other.obj is self.obj

    def __repr__(self) -> str:
        return f"ByIdentity({type(self.obj).__name__} at {id(self.obj):#x})"
