"""Partitioning: a sharded Program becomes one SPMD Schedule per device."""

from .schedule import (
    AllGather, AllReduce, AllToAll, CollectivePermute, Compute, Free, Instr, Literal, Pad, ReduceScatter, Schedule,
    Slice, SpmdProgram,
)

__all__ = [
    "AllGather", "AllReduce", "AllToAll", "CollectivePermute", "Compute", "Free", "Instr", "Literal", "Pad",
    "ReduceScatter", "Schedule", "Slice", "SpmdProgram",
]
