"""Partitioning: a sharded Program becomes one SPMD Schedule per device."""

from .partition import partition
from .plan import ReshardPlan, Step
from .reshard import plan_reshard
from .schedule import (
    AllGather, AllReduce, AllToAll, CollectivePermute, Compute, Free, Instr, Literal, Pad, ReduceScatter, Schedule,
    Slice, SpmdProgram,
)

__all__ = [
    "AllGather", "AllReduce", "AllToAll", "CollectivePermute", "Compute", "Free", "Instr", "Literal", "Pad",
    "ReduceScatter", "ReshardPlan", "Schedule", "Slice", "SpmdProgram", "Step", "partition", "plan_reshard",
]
