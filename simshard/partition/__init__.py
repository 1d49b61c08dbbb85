"""Partitioning: a sharded Program becomes one SPMD Schedule per device.

* the instruction set, ``Schedule``, ``SpmdProgram`` (the contract with the runtime) are
  ``simshard.spmd``'s, re-exported here;
* ``reshard`` (a package): ``plan_reshard(src, dst, shape, dtype)`` -> ``ReshardPlan`` (``plan``:
  steps with bytes and analytic minimum; ``atoms`` / ``greedy`` / ``realize``: the structured
  path; ``exchange``: the point-to-point path that receives exactly what each device lacks);
* ``partition``: ``partition(program)`` -> ``SpmdProgram``, its jobs in ``copies`` (a value in a
  sharding), ``choose`` (pricing candidates; ``assign``: factor assignments to try; ``linear``:
  delayed reduction; ``halo``: windows on row blocks) and ``run_op`` (an op as chosen);
  ``regions``: shard_map bodies inlined; ``loops``: scans, while loops and switches partitioned
  once; ``builder``: SPMD instruction lists, buffer numbers and frees.
"""

from .partition import partition
from .reshard import ReshardPlan, Step, plan_reshard
from ..spmd import (
    AllGather, AllReduce, AllToAll, CollectivePermute, Compute, Free, Instr, Literal, Pad, ReduceScatter, Schedule,
    Slice, SpmdProgram,
)

__all__ = [
    "AllGather", "AllReduce", "AllToAll", "CollectivePermute", "Compute", "Free", "Instr", "Literal", "Pad",
    "ReduceScatter", "ReshardPlan", "Schedule", "Slice", "SpmdProgram", "Step", "partition", "plan_reshard",
]
