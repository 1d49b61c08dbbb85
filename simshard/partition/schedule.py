"""Moved to ``simshard.spmd`` (instructions, varying, resolve, ids, schedule, wire_format).

The SPMD program format is its own package now, below ``partition``: the runtime and the
estimate import it without the partitioner. This module re-exports its public names.
"""

from ..spmd.ids import CONTROL, WHILE_IDS, block_ids, ids_of, nested_ids, placed
from ..spmd.instructions import (
    INSTRUCTIONS, AllGather, AllReduce, AllToAll, CollectivePermute, Compute, Free, Group, Instr, Literal, Loop, Pad,
    ReduceScatter, Slice, Switch, While, participants, updates_in_place,
)
from ..spmd.resolve import Instructions, resolved, varies, varying_fields, varying_slots
from ..spmd.schedule import Checkpoint, Schedule, SpmdProgram
from ..spmd.varying import VARYING_FIELDS, Varying, field_of

__all__ = [
    "AllGather", "AllReduce", "AllToAll", "CONTROL", "Checkpoint", "CollectivePermute", "Compute", "Free", "Group",
    "INSTRUCTIONS", "Instr", "Instructions", "Literal", "Loop", "Pad", "ReduceScatter", "Schedule", "Slice",
    "SpmdProgram", "Switch", "VARYING_FIELDS", "Varying", "WHILE_IDS", "While", "block_ids", "field_of", "ids_of",
    "nested_ids", "participants", "placed", "resolved", "updates_in_place", "varies", "varying_fields", "varying_slots",
]
