"""Tensor parallelism as a PyTorch user writes it (issue 27, seed 002): ``parallelize_module`` with
Colwise / Rowwise / Sequence parallel styles over ``simshard.nn`` modules, ``distribute_module``,
and ``CommDebugMode``'s per-module table. Exact inputs: small integers, sums reorder exactly."""

import numpy as np
import pytest

from simshard import nn
from simshard.dtensor import (
    ColwiseParallel, CommDebugMode, DTensor, Replicate, RowwiseParallel, SequenceParallel, Shard, distribute_module,
    distribute_tensor, init_device_mesh, parallelize_module,
)
from simshard.errors import ShardingError


class MLP(nn.Module):
    def __init__(self, d=8, h=16):
        super().__init__()
        self.up = nn.Linear(d, h, rng=np.random.default_rng(1))
        self.down = nn.Linear(h, d, rng=np.random.default_rng(2))

    def forward(self, x):
        return self.down(np.maximum(self.up(x), 0))


def ints(shape, seed=0):
    return np.random.default_rng(seed).integers(-2, 3, size=shape).astype(np.float32)


def tp_mesh():
    return init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))["tp"]


def test_colwise_then_rowwise_mlp_all_reduces_once_as_torch():
    model, reference = MLP(), MLP()
    x = ints((4, 8))
    parallelize_module(model, tp_mesh(), {"up": ColwiseParallel(), "down": RowwiseParallel()})
    assert model.up.weight.placements == (Replicate(), Shard(0)) and model.up.bias.placements == (Replicate(), Shard(0))
    assert model.down.weight.placements == (Replicate(), Shard(1))
    assert model.down.bias.placements == (Replicate(), Replicate())
    with CommDebugMode() as comm:
        y = model(x)
    assert isinstance(y, DTensor) and y.placements == (Replicate(), Replicate())
    np.testing.assert_array_equal(y.full_tensor(), reference(x))
    assert comm.get_comm_counts() == {"all_reduce": 1}
    table = comm.generate_comm_debug_tracing_table(noise_level=0)
    assert table.splitlines()[:3] == ["Global", "  FORWARD PASS", "    *c10d_functional.all_reduce: 1"]
    assert "    MLP.down" in table and "MLP.up" not in table  # the up projection moved nothing


def test_plan_patterns_and_unknown_paths():
    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.Sequential(MLP(), MLP())

        def forward(self, x):
            return self.layers(x)

    model, reference = Stack(), Stack()
    parallelize_module(model, tp_mesh(), {"layers.*.up": ColwiseParallel(), "layers.*.down": RowwiseParallel()})
    x = ints((2, 8), seed=3)
    np.testing.assert_array_equal(model(x).full_tensor(), reference(x))
    with pytest.raises(ShardingError, match="no sub-module matches 'nope'"):
        parallelize_module(model, tp_mesh(), {"nope": ColwiseParallel()})


def test_styles_take_a_one_dim_mesh():
    with pytest.raises(ShardingError, match="1-D mesh"):
        parallelize_module(MLP(), init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp")), {"up": ColwiseParallel()})


def test_sequence_parallel_layer_norm_keeps_the_sequence_sharded():
    norm, reference = nn.LayerNorm(8), nn.LayerNorm(8)
    mesh = init_device_mesh("cpu", (4,), mesh_dim_names=("sp",))
    parallelize_module(norm, mesh, SequenceParallel(sequence_dim=1))
    x = ints((2, 8, 8)) * 2  # rows of 0, +-2, +-4: mean and variance exact
    with CommDebugMode() as comm:
        y = norm(x)
    assert y.placements == (Shard(1),) and norm.weight.placements == (Replicate(),)
    assert comm.get_total_counts() == 0
    np.testing.assert_array_equal(y.full_tensor(), reference(x))


def test_colwise_embedding():
    emb, reference = nn.Embedding(16, 8), nn.Embedding(16, 8)
    parallelize_module(emb, tp_mesh(), ColwiseParallel(output_layouts=Replicate()))
    assert emb.weight.placements == (Replicate(), Shard(1))
    ids = np.array([[1, 5, 7], [0, 15, 3]])
    np.testing.assert_array_equal(emb(ids).full_tensor(), reference(ids))


def test_distribute_module_replicates_and_runs_the_hooks():
    model, reference = MLP(), MLP()
    mesh = init_device_mesh("cpu", (8,), mesh_dim_names=("x",))
    seen = []

    def input_fn(module, inputs, device_mesh):
        seen.append("in")
        return tuple(distribute_tensor(a, device_mesh, [Shard(0)]) for a in inputs)

    def output_fn(module, outputs, device_mesh):
        seen.append("out")
        return outputs.redistribute(device_mesh, [Replicate()])

    distribute_module(model, mesh, input_fn=input_fn, output_fn=output_fn)
    assert all(p.placements == (Replicate(),) for p in model.parameters())
    x = ints((8, 8), seed=4)
    with CommDebugMode() as comm:
        y = model(x)
    assert seen == ["in", "out"] and y.placements == (Replicate(),)
    assert comm.get_comm_counts() == {"all_gather": 1}  # the batch-sharded MLP runs locally
    np.testing.assert_array_equal(y.full_tensor(), reference(x))


def test_distribute_module_with_a_partition_fn():
    model = MLP()
    mesh = init_device_mesh("cpu", (4,), mesh_dim_names=("x",))

    def shard_up(name, module, device_mesh):
        if name == "up":
            module.weight = distribute_tensor(module.weight, device_mesh, [Shard(0)])

    distribute_module(model, mesh, partition_fn=shard_up)
    assert isinstance(model.up.weight, DTensor) and not isinstance(model.down.weight, DTensor)
