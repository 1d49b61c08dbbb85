"""A two-layer ReLU MLP, ``relu(x @ w1) @ w2``, and the classic ways to shard it.

* ``dp``: data parallel: the batch split over every device, weights replicated; no communication
  in the forward pass.
* ``megatron``: tensor parallel, column then row (Megatron-LM): ``w1`` split by columns and ``w2``
  by rows over ``y``, the batch over ``x``; the second matmul leaves partial sums over ``y``, so
  exactly one all-reduce of ``batch/x × d`` per device over ``y``.
"""

from __future__ import annotations

import numpy as np

import simshard as ss
from simshard import P
from simshard.programs import ProgramDef, Strategy

BATCH, D, D_FF = 16, 32, 64


def mlp(x, w1, w2):
    return np.maximum(x @ w1, 0) @ w2  # ReLU keeps integer-valued inputs exact: sums check bitwise


def inputs():
    return tuple(ss.exact_inputs([(BATCH, D), (D, D_FF), (D_FF, D)], seed=0))


PROGRAM = ProgramDef(
    name="mlp",
    about="two-layer ReLU MLP relu(x @ w1) @ w2",
    fn=mlp,
    inputs=inputs,
    mesh={"x": 2, "y": 4},
    strategies=(
        Strategy("dp", "data parallel: batch over x and y, weights replicated",
                 in_shardings=(P(("x", "y"), None), P(), P())),
        Strategy("megatron", "tensor parallel: w1 by columns, w2 by rows over y; batch over x",
                 in_shardings=(P("x", None), P(None, "y"), P("y", None))),
    ),
)
