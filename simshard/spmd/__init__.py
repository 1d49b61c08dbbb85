"""The SPMD program format: what partitioning produces and the runtime and the estimate run.

* ``instructions``: the instruction set (``Compute``, ``Slice``, collectives, ``Loop`` /
  ``While`` / ``Switch``), frozen plain data;
* ``varying``: ``Varying``, a field that differs per device (a collective's groups) held once
  for all devices; ``resolve``: each device's own instructions, and ``Instructions``, a class of
  devices' list read from the step table;
* ``ids``: the ids control instructions' runs use (``ids_of``, ``block_ids``, ``placed``, ``collective_run_as``);
  ``numbering``: a step table numbered, as new instructions with their final ids;
* ``schedule``: ``Schedule`` (one device's program), ``Schedules`` (a program's, held per class
  of devices), ``SpmdProgram``, ``Checkpoint`` (with ``HeldOperand``: how an op's operands were held);
  ``wire_format``: their exact msgpack round-trip.
"""

from .ids import CONTROL, WHILE_IDS, NestedPlace, block_ids, blocks_of, collective_run_as, ids_of, nested_ids, placed
from .instructions import (
    INSTRUCTIONS, AllGather, AllReduce, AllToAll, CollectivePermute, Compute, Free, Group, Instr, Literal, Loop, Pad,
    ReduceScatter, Slice, Switch, While, pair_members, participants, updates_in_place,
)
from .numbering import numbered, numbered_positions, slot_values
from .resolve import Instructions, block_varies, resolved, resolved_block, varies, varying_fields, varying_slots
from .schedule import Checkpoint, HeldOperand, Schedule, ScheduleClass, Schedules, SpmdProgram, shown
from .varying import VARYING_FIELDS, Varying, field_of
from .wire_format import decode, encode, packed, unpacked

__all__ = [
    "AllGather", "AllReduce", "AllToAll", "CONTROL", "Checkpoint", "CollectivePermute", "Compute", "Free", "Group",
    "HeldOperand", "INSTRUCTIONS", "Instr", "Instructions", "Literal", "Loop", "NestedPlace", "Pad", "ReduceScatter", "Schedule",
    "ScheduleClass", "Schedules", "Slice", "SpmdProgram", "Switch", "VARYING_FIELDS", "Varying", "WHILE_IDS", "While", "block_ids", "block_varies",
    "blocks_of", "collective_run_as", "decode", "encode", "field_of", "ids_of", "nested_ids", "numbered", "numbered_positions", "packed",
    "pair_members", "participants", "placed", "resolved", "resolved_block", "shown", "slot_values", "unpacked",
    "varies", "varying_fields", "varying_slots", "updates_in_place",
]
