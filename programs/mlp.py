"""A two-layer ReLU MLP, ``relu(x @ w1) @ w2``, and the classic ways to shard it.

The function takes a parameter pytree and a batch, ``mlp(params, x)`` with
``params = {"w1": [d, d_ff], "w2": [d_ff, d]}``, so that pytree rules (scalax) apply to it.

* ``dp``: data parallel: the batch split over every device, weights replicated; no communication
  in the forward pass.
* ``megatron``: tensor parallel over every device (Megatron-LM): ``w1`` split by columns and
  ``w2`` by rows, the batch replicated; the second matmul leaves partial sums, so exactly one
  all-reduce of ``batch × d`` over all devices.
* ``fsdp``: fully sharded data parallel (scalax ``FSDPShardingRule`` over every device): each
  weight stored split along its larger dim, the batch split over every device; each weight is
  all-gathered whole before use (``args_sharding_constraint``), nothing else moves.
* ``2d``: data × tensor parallel: the batch over ``x``, Megatron over ``y``; one all-reduce of
  ``batch/x × d`` per ``y`` group.
"""

from __future__ import annotations

import numpy as np

import simshard as ss
from simshard import P
from simshard.programs import ProgramDef, Strategy

BATCH, D, D_FF = 16, 32, 64


def mlp(params, x):
    return np.maximum(x @ params["w1"], 0) @ params["w2"]  # ReLU keeps integer inputs exact: sums check bitwise


def inputs():
    x, w1, w2 = ss.exact_inputs([(BATCH, D), (D, D_FF), (D_FF, D)], seed=0)
    return {"w1": w1, "w2": w2}, x


def _fsdp(mesh):
    """scalax FSDP over every mesh axis: weights split by the rule, gathered at the start."""
    axes = tuple(mesh.axis_names)
    helper = ss.MeshShardingHelper(mesh.axis_sizes, mesh.axis_names, name=mesh.name)
    rule = ss.FSDPShardingRule(axes, fsdp_axis_size=mesh.size, min_fsdp_size=1)
    return helper.sjit(mlp, in_shardings=(rule, P(axes)), out_shardings=P(axes),
                       args_sharding_constraint=(P(), P(axes)))


PROGRAM = ProgramDef(
    name="mlp",
    about="two-layer ReLU MLP relu(x @ w1) @ w2 over params {w1, w2} and a batch x",
    fn=mlp,
    inputs=inputs,
    mesh={"x": 2, "y": 4},
    strategies=(
        Strategy("dp", "data parallel: batch over x and y, weights replicated; no communication",
                 in_shardings=({"w1": P(), "w2": P()}, P(("x", "y"), None))),
        Strategy("megatron", "tensor parallel over x and y: w1 by columns, w2 by rows, batch replicated; "
                 "one all-reduce of batch x d",
                 in_shardings=({"w1": P(None, ("x", "y")), "w2": P(("x", "y"), None)}, P())),
        Strategy("fsdp", "fully sharded data parallel over x and y (scalax FSDPShardingRule): weights stored "
                 "split, all-gathered before use; batch over x and y", build=_fsdp),
        Strategy("2d", "data x tensor parallel: batch over x, Megatron over y (w1 by columns, w2 by rows); "
                 "one all-reduce of batch/x x d per y group",
                 in_shardings=({"w1": P(None, "y"), "w2": P("y", None)}, P("x", None))),
    ),
)
