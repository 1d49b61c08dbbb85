"""Numbering a schedule's step table: every instruction gets its final id as a new object.

Ids are placeholders while the partitioner builds the steps. ``numbered_positions`` gives each
instruction its position as id (a loop body's numbering); ``numbered`` also gives each control
instruction its range of ids after the table's own (``id_base``) and the control instructions
nested in its blocks theirs, relative to their block (``nested_ids``); a while's condition and
body are numbered as one block. Both return a new table of new instructions: no instruction
changes after it is built. An object that sits at several places of the table (a step shared by
classes of devices, a body shared by several loops) becomes one new object, numbered as its last
place says, so the new table shares what the old one shared.

A slot of the table is one instruction or a table of per-class instructions (the builder's
``PerDevice``: ``values`` and ``map``); a block is a tuple or an ``Instructions`` list read
from a table of its own.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from .ids import CONTROL, blocks_of, ids_of, nested_ids
from .instructions import Instr
from .resolve import Instructions


def numbered_positions(slots: Sequence) -> tuple:
    """``slots`` with every instruction numbered by its position (the devices of a per-class
    slot share its position)."""
    ids = _Renumbering()
    ids.number_positions(slots)
    return ids.rebuilt_slots(slots)


def numbered(slots: Sequence) -> tuple:
    """``slots`` numbered by position, each control step given its range of ids after the
    table's own and the control instructions nested in its blocks theirs."""
    ids = _Renumbering()
    ids.number_positions(slots)
    first_free = len(slots)
    for slot in slots:
        values = slot_values(slot)
        if values[0].kind not in CONTROL:
            continue
        # a control step's copies (one per class) have the same blocks' shapes and sizes: their
        # id ranges and nested control instructions' places are read off the first
        first = values[0]
        where = nested_ids(first)
        for ins in values:
            if ins.kind == "while":  # its body continues its condition's numbers
                for j, b in enumerate(ins.cond + ins.body):
                    ids.give(b, id=j)
            ids.give(ins, id_base=first_free)
            ids.number_nested(ins, where)
        first_free += ids_of(first)
    return ids.rebuilt_slots(slots)


def slot_values(slot) -> tuple[Instr, ...]:
    """The distinct instructions a slot runs over all devices."""
    return (slot,) if isinstance(slot, Instr) else slot.values


class _Renumbering:
    """The ids to give, by instruction object (the last given wins, as numbering in place
    would), then the table rebuilt with them (one new object per old one)."""

    def __init__(self):
        self.changes: dict[int, dict[str, int]] = {}
        self.keep: list[Any] = []  # the objects named by id in ``changes`` and ``made``, kept alive
        self.made: dict[int, Any] = {}

    def give(self, ins: Instr, **fields: int) -> None:
        self.changes.setdefault(id(ins), {}).update(fields)
        self.keep.append(ins)

    def number_positions(self, slots: Sequence) -> None:
        for i, slot in enumerate(slots):
            for ins in slot_values(slot):
                self.give(ins, id=i)

    def number_nested(self, ins: Instr, where) -> None:
        """Give the control instructions nested in ``ins`` their id ranges, relative to their
        block (``where``: ``nested_ids(ins)``, the same for every class's copy of one SPMD step)."""
        blocks = blocks_of(ins)
        for k, j, offset in where:
            b = blocks[k][j]
            self.give(b, id_base=offset)
            self.number_nested(b, nested_ids(b))

    # -- rebuilding ------------------------------------------------------------------------------
    def _memo(self, old, make):
        key = id(old)
        if key not in self.made:
            self.made[key] = make(old)
            self.keep.append(old)
        return self.made[key]

    def rebuilt_slots(self, slots: Sequence) -> tuple:
        return tuple(self._memo(slot, self._rebuilt_slot) for slot in slots)

    def _rebuilt_slot(self, slot):
        if isinstance(slot, Instr):
            return self.rebuilt(slot)
        values = tuple(self.rebuilt(v) for v in slot.values)
        if all(n is o for n, o in zip(values, slot.values)):
            return slot
        new = iter(values)
        return slot.map(lambda _: next(new))

    def rebuilt(self, ins: Instr) -> Instr:
        """``ins`` with its new ids and its blocks rebuilt (``ins`` itself where nothing changes)."""
        return self._memo(ins, self._rebuilt_instr)

    def _rebuilt_instr(self, ins: Instr) -> Instr:
        fields: dict[str, Any] = dict(self.changes.get(id(ins), {}))
        if ins.kind == "loop":
            fields.update(self._blocks(ins, body=ins.body))
        elif ins.kind == "while":
            fields.update(self._blocks(ins, cond=ins.cond, body=ins.body))
        elif ins.kind == "switch":
            branches = tuple(self._block(b) for b in ins.branches)
            if any(n is not o for n, o in zip(branches, ins.branches)):
                fields["branches"] = branches
        return replace(ins, **fields) if fields else ins

    def _blocks(self, ins: Instr, **blocks) -> dict[str, Any]:
        """The named blocks of ``ins`` that changed, rebuilt."""
        out = {}
        for name, block in blocks.items():
            new = self._block(block)
            if new is not block:
                out[name] = new
        return out

    def _block(self, block):
        return self._memo(block, self._rebuilt_block)

    def _rebuilt_block(self, block):
        if isinstance(block, Instructions):
            slots = self._memo(block.slots, self.rebuilt_slots)
            return block if all(n is o for n, o in zip(slots, block.slots)) else block.over(slots)
        new = tuple(self.rebuilt(b) for b in block)
        return block if all(n is o for n, o in zip(new, block)) else new
