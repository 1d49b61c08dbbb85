"""How a communication report holds its records: one ``CommRecord`` per device and collective as
an executed run makes them, or compactly, as the estimate makes them on large meshes:

* a ``ClassRecord`` is one collective step as a class of devices ran it: devices that sent and
  received the same bytes and messages and must have received the same minimum share one record
  (its ``record``, the first member's figures), with each member's group beside it; a member's
  per-peer rows are worked out only when its record is listed (``expand``). A collective over
  every device of an 8,192-device mesh is then one item, not 8,192;
* a ``Repeat`` is records run again under shifted instruction ids (a scan's later iterations).

Totals, summaries and the time estimate weigh each distinct record by its copies (``weighted``);
``expanded`` lists every device's record when asked, device by device in the order they ran,
equal field for field to the records the estimate would make one device at a time
(``tests/report/test_estimate_classes.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from .comm import CommRecord


class GroupsByNumber(Sequence):
    """Each member's group, held as a number per member and the groups by number (an object
    array of tuples, each group's one tuple shared by its members): the per-member sequence is
    made only when read (a class record of 8,192 members, 128 groups, makes none)."""

    __slots__ = ("groups", "numbers")

    def __init__(self, groups: np.ndarray, numbers: np.ndarray):
        self.groups, self.numbers = groups, numbers

    def __len__(self) -> int:
        return len(self.numbers)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self.groups[self.numbers[i]].tolist())
        return self.groups[self.numbers[i]]

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        return iter(self.groups[self.numbers].tolist())

    def __eq__(self, other) -> bool:
        return isinstance(other, (tuple, GroupsByNumber)) and tuple(self) == tuple(other)

    __hash__ = None  # compared by value, not a key

    def __repr__(self) -> str:
        return f"GroupsByNumber({len(self.numbers)} members, {len(self.groups)} groups)"


@dataclass(frozen=True, eq=False)
class ClassRecord:
    """One collective step as the class ``devices`` (ascending) ran it: every member's record is
    ``record`` with its own device, group (``groups[k]`` for ``devices[k]``) and per-peer rows
    (``peers(device, group)``, made when asked; None: ``record.peers`` for every member)."""

    record: "CommRecord"
    devices: tuple[int, ...]
    groups: Sequence[tuple[int, ...]]  # a tuple, or ``GroupsByNumber``
    peers: Callable[[int, tuple[int, ...]], tuple] | None = None

    def expand(self, offset: int = 0) -> Iterator["CommRecord"]:
        """Each member's own record, its instruction id shifted by ``offset``."""
        base = self.record
        for d, group in zip(self.devices, self.groups):
            out = object.__new__(type(base))  # a copy with its own fields, without the constructor
            out.__dict__.update(base.__dict__)
            fields = out.__dict__
            fields["device"], fields["group"] = d, group
            fields["instr"] = base.instr + offset
            if self.peers is not None:
                fields["peers"] = self.peers(d, group)
            yield out

    def distinct_groups(self) -> list[tuple[int, tuple[int, ...]]]:
        """Each distinct group of the members (by identity: members of one group share its tuple)
        with its first member."""
        seen: dict[int, tuple[int, tuple[int, ...]]] = {}
        for d, group in zip(self.devices, self.groups):
            if id(group) not in seen:
                seen[id(group)] = (d, group)
        return list(seen.values())


@dataclass(frozen=True, eq=False)
class Repeat:
    """Records run again under shifted instruction ids: a scan's later iterations, which move
    what its first one moved (each ``shift`` added to every id of ``items``, which may hold
    repeats of an inner scan and class records). A report keeps them so rather than as copies:
    a 7B step on 8,192 devices has 1.5 million records, 50 thousand of them distinct."""

    items: tuple  # CommRecord | ClassRecord | Repeat
    shifts: tuple[int, ...]

    def expand(self, offset: int = 0) -> Iterator["CommRecord"]:
        for s in self.shifts:
            yield from expanded(self.items, offset + s)


class Weighted(NamedTuple):
    """A distinct record, the instruction-id offsets of its copies (``(0,)`` for a record run
    once) and the devices that ran it (its class's members, ascending, or its own device)."""

    record: "CommRecord"
    offsets: tuple[int, ...]
    devices: tuple[int, ...]
    klass: ClassRecord | None = None  # the class record it comes from (its members' groups), if any

    @property
    def copies(self) -> int:
        return len(self.offsets) * len(self.devices)


def expanded(items: Iterable, offset: int = 0) -> Iterator["CommRecord"]:
    """The records ``items`` stand for, in the order they were made, every id shifted by ``offset``."""
    for it in items:
        if isinstance(it, (Repeat, ClassRecord)):
            yield from it.expand(offset)
        elif offset:
            out = object.__new__(type(it))  # a copy with one field changed, without the constructor
            out.__dict__.update(it.__dict__)
            out.__dict__["instr"] = it.instr + offset
            yield out
        else:
            yield it


def device_major(items: Iterable) -> tuple["CommRecord", ...]:
    """Every record of ``items``, device by device, each device's in the order they ran (class
    records list a step's members together: a stable sort by device puts them back)."""
    records = list(expanded(items))
    if has_classes(items):
        records.sort(key=lambda r: r.device)
    return tuple(records)


def has_classes(items: Iterable) -> bool:
    return any(isinstance(it, ClassRecord) or (isinstance(it, Repeat) and has_classes(it.items)) for it in items)


def weighted(items: Iterable, offsets: tuple[int, ...] = (0,)) -> Iterator[Weighted]:
    """Each distinct record of ``items`` with the id offsets it is run under and its devices."""
    for it in items:
        if isinstance(it, Repeat):
            yield from weighted(it.items, tuple(o + s for o in offsets for s in it.shifts))
        elif isinstance(it, ClassRecord):
            yield Weighted(it.record, offsets, it.devices, it)
        else:
            yield Weighted(it, offsets, (it.device,))


__all__ = ["ClassRecord", "GroupsByNumber", "Repeat", "Weighted", "device_major", "expanded", "has_classes", "weighted"]
