"""Each device's own instructions: ``Varying`` fields resolved, and the lazily made lists.

``resolved`` gives a device its copy of an instruction (in the blocks of a control instruction
too); ``varies`` / ``varying_slots`` find where anything varies so that only those positions are
resolved. ``Instructions`` is one class of devices' list, read from a schedule's step table where
it is read, made (and resolved for its device) only when walked whole.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterator, Sequence

from .ids import CONTROL, blocks_of
from .instructions import Instr
from .varying import VARYING_FIELDS, Varying


def varying_fields(ins: Instr) -> tuple[tuple[str, Varying], ...]:
    """``ins``'s own ``Varying`` fields, as (name, table) pairs (not its blocks')."""
    return tuple((n, v) for n in VARYING_FIELDS if isinstance(v := getattr(ins, n, None), Varying))


def varies(ins: Instr, seen: dict | None = None) -> bool:
    """Whether ``ins`` (or an instruction of its blocks) has a ``Varying`` field. ``seen`` (id of
    an instruction -> the answer) spares a body shared by several control instructions a second look;
    keyed by identity (an instruction's value hash would walk its blocks), it is made for one walk
    over a table that holds the instructions alive."""
    if ins.kind not in CONTROL:
        return bool(varying_fields(ins))
    if seen is None:
        seen = {}
    hit = seen.get(id(ins))
    if hit is None:
        hit = seen[id(ins)] = any(block_varies(block, seen) for block in blocks_of(ins))
    return hit


def block_varies(block, seen: dict) -> bool:
    """``varies`` over a block; a class's list of a table (a loop body) reads the table's slots
    once for all its classes."""
    if not isinstance(block, Instructions):
        return any(varies(b, seen) for b in block)
    key = ("slots", id(block.slots))
    hits = seen.get(key)
    if hits is None:  # per slot with a Varying somewhere: which of its values vary
        hits = seen[key] = varying_slots(block.slots, seen)
    return bool(block.varying_positions(hits))


def varying_slots(slots: Sequence, seen: dict) -> dict[int, tuple[Any, set[int]]]:
    """Position -> (slot, indices of its values that vary) of each step table slot holding a
    ``Varying`` (a slot is one instruction, its index 0, or a builder's per-device table)."""
    hits = {}
    for i, slot in enumerate(slots):
        values = (slot,) if isinstance(slot, Instr) else slot.values
        vary = {k for k, ins in enumerate(values) if varies(ins, seen)}
        if vary:
            hits[i] = (slot, vary)
    return hits


def resolved(ins: Instr, device: int) -> Instr:
    """``device``'s own copy of ``ins``: each ``Varying`` field its value for the device, in the
    blocks of a control instruction too (``ins`` itself where nothing varies)."""
    if ins.kind == "loop":
        return replace(ins, body=resolved_block(ins.body, device))
    if ins.kind == "while":
        return replace(ins, cond=resolved_block(ins.cond, device), body=resolved_block(ins.body, device))
    if ins.kind == "switch":
        return replace(ins, branches=tuple(resolved_block(b, device) for b in ins.branches))
    changes = {n: v.of(device) for n, v in varying_fields(ins)}
    return replace(ins, **changes) if changes else ins


def resolved_block(block, device: int) -> tuple[Instr, ...]:
    """A block with each instruction that varies resolved for ``device``."""
    return tuple(resolved(b, device) if varies(b) else b for b in block)


class Instructions(Sequence):
    """One device's (or one class of devices') instruction list, read from the schedule's step
    table where it is read: position ``i`` is the step's one instruction, or the class's value of
    a per-device step. Partitioning writes the table once for the whole mesh; a device's own list
    is made only when something walks it whole (an executor, serialisation), its ``Varying``
    fields resolved for ``device`` (positions ``varying``); the estimate reads a class's list
    position by position (``shared``) without making it. Compares, hashes and pickles as the
    tuple it stands for."""

    __slots__ = ("_slots", "_row", "_made", "device", "varying")

    def __init__(self, slots: tuple, row: int, device: int | None = None, varying: frozenset = frozenset()):
        self._slots, self._row, self._made = slots, row, None  # slots: Instr | PerDevice (builder)
        self.device, self.varying = device, varying

    @property
    def device_class(self) -> tuple[int, int]:
        """Which class's list this is: devices with equal ``device_class`` run the same table row.
        The table by identity (its value hash would walk every instruction): compare the classes
        of lists alive together (one program's schedules), not keep them past the table."""
        return id(self._slots), self._row

    def own(self, device: int, varying: frozenset) -> "Instructions":
        """``device``'s list of this class's, its ``Varying`` fields (at positions ``varying``) resolved."""
        return Instructions(self._slots, self._row, device, varying)

    @property
    def slots(self) -> tuple:
        """The step table this list is read from (shared by every class's list of it)."""
        return self._slots

    def over(self, slots: tuple) -> "Instructions":
        """This class's list (row, device, varying positions) read from another table of the
        same shape (the table with its instructions numbered)."""
        return Instructions(slots, self._row, self.device, self.varying)

    def varying_positions(self, hits: dict) -> frozenset:
        """The positions where this class's instruction varies, of a table's ``varying_slots``."""
        row = self._row
        return frozenset(i for i, (slot, vary) in hits.items()
                         if (0 if isinstance(slot, Instr) else int(slot.codes[row])) in vary)

    def __len__(self) -> int:
        return len(self._slots)

    def shared(self, i: int) -> Instr:
        """Position ``i`` as the class holds it (``Varying`` fields unresolved)."""
        slot = self._slots[i]
        return slot if isinstance(slot, Instr) else slot.values[slot.codes[self._row]]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.made()[i]
        if self.varying:
            return self.made()[i]
        return self.shared(i)

    def made(self) -> tuple[Instr, ...]:
        """The list as a tuple (made once)."""
        if self._made is None:
            row = self._row
            made = tuple(s if isinstance(s, Instr) else s.values[s.codes[row]] for s in self._slots)
            if self.varying:
                made = tuple(resolved(ins, self.device) if i in self.varying else ins for i, ins in enumerate(made))
            self._made = made
        return self._made

    def __iter__(self) -> Iterator[Instr]:
        return iter(self.made())

    def __eq__(self, other) -> bool:
        if isinstance(other, (tuple, Instructions)):
            return self.made() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.made())

    def __reduce__(self):
        return (tuple, (self.made(),))

    def __repr__(self) -> str:
        return f"Instructions({len(self)} steps)"
