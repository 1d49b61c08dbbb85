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

As a training step (``mode="sgd"`` / ``"adam"``, the default of ``simshard compare``) the backward
pass adds what each strategy really costs: ``dp`` all-reduces both weight gradients, ``fsdp``
reduce-scatters them (and all-gathers the weights again for the backward matmuls), ``megatron``
all-reduces the input gradient of its row-parallel layer.
"""

from __future__ import annotations

import numpy as np

import simshard as ss
from simshard import P
from simshard.programs import ProgramDef, Strategy, Training

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


TRAIN_BATCH = 64


def train_inputs():
    """``(params, x, y)`` for a training step: weights and inputs in {-1, 0, 1}, labels in
    [-2, 2], a batch of 64 (as JAX's recorded training steps, tests/data/jax_train.json): the
    forward values, the loss (a power-of-two mean) and every gradient stay exact in float32."""
    rng = np.random.default_rng(0)
    x = rng.integers(-1, 2, (TRAIN_BATCH, D)).astype(np.float32)
    y = rng.integers(-2, 3, (TRAIN_BATCH, D)).astype(np.float32)
    w1 = rng.integers(-1, 2, (D, D_FF)).astype(np.float32)
    w2 = rng.integers(-1, 2, (D_FF, D)).astype(np.float32)
    return {"w1": w1, "w2": w2}, x, y


def _fsdp_specs(mesh):
    helper = ss.MeshShardingHelper(mesh.axis_sizes, mesh.axis_names, name=mesh.name)
    rule = ss.FSDPShardingRule(tuple(mesh.axis_names), fsdp_axis_size=mesh.size, min_fsdp_size=1)
    return {k: s.spec for k, s in helper.match_sharding_rule(rule, inputs()[0]).items()}


def train_layout(strategy, mesh):
    """``(param_specs, x_spec, y_spec)`` of a strategy: the labels are laid out like the batch."""
    if strategy.name == "fsdp":
        axes = tuple(mesh.axis_names)
        return _fsdp_specs(mesh), P(axes), P(axes)
    params, x = strategy.in_shardings
    return params, x, x


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
    training=Training("the squared error of the MLP's output against integer labels", train_inputs, train_layout),
)
