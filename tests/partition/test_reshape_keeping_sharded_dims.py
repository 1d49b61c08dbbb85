"""A reshape that keeps every sharded dim whole (it splits or merges only unsharded dims) is
stated by a Sharding, so the partitioner holds its result as one even where propagation dropped
an axis from it: only a merge of a sharded dim makes the strided layout no Sharding states
(seed 002, ``test_strided_flatten``). Held as an exact layout instead, every op after it ran on
per-device index maps and every reshard from it took the generic exchange planner, whose cost
grows with the device pairs (a GPT-2 stage on 32 x 32 devices: minutes instead of seconds to
estimate, docs/autoshard.md)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

import simshard as ss
from simshard.partition.run_op import merges_sharded_dim
from simshard.sharding.axes import AxisRef
from simshard.sharding.dims import DimSharding, Sharding

MESH = ss.Mesh({"x": 2, "y": 2})
B, S, H, K = 4, 8, 3, 4


def heads(a):
    """(B, S, H*K) -> (B, S, H, K), then elementwise ops."""
    return a.reshape(B, S, H, K) * 2.0 + 1.0


def test_the_head_split_is_held_as_a_sharding_and_runs_bitwise():
    """The reshape's result annotated without the sequence's axis (as an ``ss.autoshard``
    strategy annotates an attention block's): its operand keeps ``y`` on the sequence."""
    a = np.random.default_rng(0).integers(-4, 5, size=(B, S, H * K)).astype(np.float32)
    program = ss.trace(heads, a, mesh=MESH, in_shardings=(ss.P("x", "y", None),))
    split = Sharding(MESH, (DimSharding((AxisRef("x"),)),) + (DimSharding(()),) * 3)
    eqns = tuple(replace(e, shardings=(split,)) if e.op == "reshape" else e for e in program.eqns)
    spmd = ss.partition(ss.propagate(replace(program, eqns=eqns)))
    assert all(isinstance(c.sharding, Sharding) for c in spmd.checkpoints)  # no exact Layout
    res = ss.run(heads, a, mesh=MESH, in_shardings=(ss.P("x", "y", None),), backend="local")
    assert res.verify.bitwise


def test_only_a_merge_or_split_of_a_sharded_dim_counts():
    x, y = (AxisRef("x"),), (AxisRef("y"),)
    seq = Sharding(MESH, (DimSharding(x), DimSharding(y), DimSharding(())))  # (B, S, H*K) on x, y
    assert not merges_sharded_dim(seq, (B, S, H * K), (B, S, H, K))  # the heads split off
    assert merges_sharded_dim(seq, (B, S, H * K), (B * S, H * K))  # the sequence merged (seed 002)
    assert merges_sharded_dim(seq, (B, S, H * K), (B, 2, S // 2, H * K))  # the sequence split
    one = Sharding(ss.Mesh({"x": 1, "y": 2}), (DimSharding(x), DimSharding(()), DimSharding(())))
    assert not merges_sharded_dim(one, (B, S, H * K), (B * S, H * K))  # a size-1 axis splits nothing
