"""DTensor arithmetic (issue 27, seed 002): ops on DTensors run on the devices by the eager call,
their output placements by DTensor's rules; checked against dtensor_ops.json, one id per case.

Each case's op is written as a PyTorch user writes it (``a @ b``, ``a.sum(0)``, ``a.t()``,
``a.view(4, 8)``, ``a.softmax(0)``) on DTensors distributed with the case's placements. The
values are numpy's bit for bit (exact inputs); the output placements are DTensor's, except where
the placements here are a different layout that moves no more data, each named below with why.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from casedata import load_cases

import simshard as ss
from simshard.dtensor import CommDebugMode, DTensor, Partial, Replicate, Shard, distribute_tensor, init_device_mesh
from simshard.errors import ShardingError

OPS = load_cases("dtensor_ops.json")


def _layer_norm(a):
    mu = a.mean(-1, keepdim=True)
    var = ((a - mu) ** 2).mean(-1, keepdim=True)
    return (a - mu) / np.sqrt(var + 1e-5)


TORCH = {  # the op as a DTensor user writes it
    "a @ b": lambda a, b: a @ b, "bmm(a, b)": lambda a, b: a @ b, "a + b": lambda a, b: a + b,
    "a + b (broadcast)": lambda a, b: a + b, "a * b": lambda a, b: a * b, "a * 2.0": lambda a: a * 2.0,
    "a.sum(0)": lambda a: a.sum(0), "a.sum()": lambda a: a.sum(), "a.mean(0)": lambda a: a.mean(0),
    "a.amax(0)": lambda a: a.amax(0), "a.max(0).values": lambda a: a.max(0).values,
    "a.view(32)": lambda a: a.view(32), "a.reshape(24)": lambda a: a.reshape(24),
    "a.view(4, 8)": lambda a: a.view(4, 8), "a.view(8, 2, 4)": lambda a: a.view(8, 2, 4),
    "a.view(4, 16)": lambda a: a.view(4, 16), "a.view(2, 4, 6)": lambda a: a.view(2, 4, 6),
    "a.reshape(64)": lambda a: a.reshape(64), "a.transpose(0, 1)": lambda a: a.transpose(0, 1),
    "a.t()": lambda a: a.t(), "a.permute(2, 0, 1)": lambda a: a.permute(2, 0, 1),
    "a.unsqueeze(0)": lambda a: a.unsqueeze(0), "cat([a,b],0)": lambda a, b: np.concatenate([a, b], 0),
    "a.softmax(0)": lambda a: a.softmax(0), "a.softmax(1)": lambda a: a.softmax(1),
    "F.layer_norm(a, (16,))": _layer_norm, "a.reshape(64) + b": lambda a, b: a.reshape(64) + b,
    "a.t().reshape(32)": lambda a: a.t().reshape(32), "a.cumsum(0)": lambda a: a.cumsum(0),
}
NUMPY = {"a.amax(0)": lambda a: a.max(0), "a.max(0).values": lambda a: a.max(0),
         "a.transpose(0, 1)": lambda a: a.T, "a.t()": lambda a: a.T, "a.permute(2, 0, 1)": lambda a: np.transpose(a, (2, 0, 1)),
         "a.unsqueeze(0)": lambda a: a[None], "a.softmax(0)": lambda a: _np_softmax(a, 0), "a.softmax(1)": lambda a: _np_softmax(a, 1),
         "a.cumsum(0)": lambda a: np.cumsum(a, 0), "a.t().reshape(32)": lambda a: a.T.reshape(32),
         "a.view(32)": lambda a: a.reshape(32), "a.view(4, 8)": lambda a: a.reshape(4, 8),
         "a.view(8, 2, 4)": lambda a: a.reshape(8, 2, 4), "a.view(4, 16)": lambda a: a.reshape(4, 16),
         "a.view(2, 4, 6)": lambda a: a.reshape(2, 4, 6), "F.layer_norm(a, (16,))": lambda a: _np_layer_norm(a)}
# where the placements here differ from DTensor's, and why that layout is as good or better
DIFFERENT = {
    "mean_dim_sharded": "mean is sum then divide: Partial(sum) of the quotient, DTensor's Partial(avg) of the sum",
    "mean_dim_sharded_uneven": "Partial(sum) is exact for uneven blocks too; DTensor all-gathers to Replicate",
    "max_dim_sharded": "values as amax: Partial(max), no all-gather",
    "softmax_sharded_dim": "the max and the sum over the sharded dim are all-reduced (a row each); DTensor all-gathers the tensor",
    "softmax_S1S1_2x2": "as softmax_sharded_dim",
    "layernorm_S1": "the mean and variance over the sharded dim are all-reduced; DTensor all-gathers the tensor",
    "add_S0R_RS0_2d": "both inputs are cut locally to [S(0), S(0)]; DTensor all-gathers one to [R, S(0)]",
}


def _np_softmax(a, axis):
    e = np.exp(a - a.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _np_layer_norm(a):
    mu = a.mean(-1, keepdims=True)
    var = ((a - mu) ** 2).mean(-1, keepdims=True)
    return (a - mu) / np.sqrt(var + 1e-5)


def inputs_of(case, rng):
    out = []
    for inp in case["inputs"]:
        shape = tuple(inp["global_shape"])
        if "softmax" in case["op"]:
            a = np.where(rng.random(shape) < 0.5, 0.0, -200.0)  # exps are exactly 0 or 1
        elif "layer_norm" in case["op"]:
            a = rng.integers(0, 2, size=shape) * 2.0  # mean 0..2, variance a power of 2 fraction: exact
        else:
            a = rng.integers(1, 6, size=shape) * rng.choice([-1, 1], size=shape)
        out.append(np.asarray(a, dtype=np.float32))
    return out


@pytest.mark.parametrize("case", OPS, ids=[c["id"] for c in OPS])
def test_dtensor_op_case(case):
    mesh = init_device_mesh("cpu", case["mesh_shape"], mesh_dim_names=case["mesh_dim_names"])
    args = inputs_of(case, np.random.default_rng(0))
    ds = [distribute_tensor(a, mesh, [ss.parse_placement(p) for p in inp["placements"]])
          for a, inp in zip(args, case["inputs"])]
    with CommDebugMode() as comm:
        out = TORCH[case["op"]](*ds)
    assert isinstance(out, DTensor)
    expected = NUMPY.get(case["op"], TORCH[case["op"]])(*args)
    np.testing.assert_array_equal(out.full_tensor(), expected)
    if case["out_placements"] is None:
        return  # DTensor refused (uneven views, an empty shard's amax): computed here, values checked
    want = tuple(ss.parse_placement(p) for p in case["out_placements"])
    if case["id"] in DIFFERENT:
        assert out.placements != want, "DTensor's placements now: drop the entry from DIFFERENT"
    else:
        assert out.placements == want
        if not case["comm_counts"]:
            assert comm.get_total_counts() == 0, comm.render()


def test_matmul_with_sharded_contraction_is_partial_and_moves_nothing():
    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    x = np.arange(64, dtype=np.float32).reshape(8, 8) % 5
    w = np.arange(64, dtype=np.float32).reshape(8, 8) % 3
    d = distribute_tensor(x, mesh, [Replicate(), Shard(1)])
    e = distribute_tensor(w, mesh, [Replicate(), Shard(0)])
    with CommDebugMode() as comm:
        y = d @ e
    assert y.placements == (Replicate(), Partial())
    assert comm.get_total_counts() == 0
    np.testing.assert_array_equal(y.full_tensor(), x @ w)
    z = y.redistribute(placements=[Replicate(), Replicate()])
    assert comm.get_total_counts() == 0  # the mode was left: nothing more recorded there
    np.testing.assert_array_equal(z.to_local(5), x @ w)


def test_scalar_ops_and_reductions_keep_placements():
    mesh = init_device_mesh("cpu", (8,), mesh_dim_names=("x",))
    x = np.arange(32, dtype=np.float32).reshape(16, 2) - 8
    d = distribute_tensor(x, mesh, [Shard(0)])
    assert (d * 2.0 + 1.0).placements == (Shard(0),)
    assert (d.sum(1)).placements == (Shard(0),)
    assert (d.sum()).placements == (Partial(),)
    assert d.T.placements == (Shard(1),)
    np.testing.assert_array_equal((2.0 - d).full_tensor(), 2.0 - x)
    np.testing.assert_array_equal(np.exp(d).full_tensor(), np.exp(x))
    assert d.max().full_tensor() == x.max()


def test_mixing_a_dtensor_with_an_array_is_named():
    mesh = init_device_mesh("cpu", (8,), mesh_dim_names=("x",))
    d = distribute_tensor(np.ones((8, 2), np.float32), mesh, [Shard(0)])
    with pytest.raises(ShardingError, match="a DTensor and a ndarray"):
        d + np.ones((8, 2), np.float32)


def test_dtensors_on_different_meshes_are_refused():
    d = distribute_tensor(np.ones((8, 2), np.float32), init_device_mesh("cpu", (8,), mesh_dim_names=("x",)), [Shard(0)])
    e = distribute_tensor(np.ones((8, 2), np.float32), init_device_mesh("cpu", (8,), mesh_dim_names=("y",)), [Shard(0)])
    with pytest.raises(ValueError, match="different devices"):
        d + e


PLACEMENTS = [Replicate(), Shard(0), Shard(1), Partial()]
BINARY = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "matmul": lambda a, b: a @ b,
          "sub": lambda a, b: a - b}
UNARY = {"sum0": lambda a: a.sum(0), "sum1": lambda a: a.sum(1), "T": lambda a: a.T, "scale": lambda a: a * 3.0,
         "view": lambda a: a.reshape(64), "amax": lambda a: a.amax(1)}


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(PLACEMENTS), st.sampled_from(PLACEMENTS), st.sampled_from(PLACEMENTS),
       st.sampled_from(PLACEMENTS), st.sampled_from(sorted(BINARY)), st.sampled_from(sorted(UNARY)), st.integers(0, 99))
def test_any_placements_give_numpys_values(p0, p1, q0, q1, binary, unary, seed):
    """Whatever the inputs' placements (Partial ones included), an op and the next give numpy's
    bits, the result laid out as its placements say (``full_tensor`` assembles it through them)."""
    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    rng = np.random.default_rng(seed)
    x, y = (rng.integers(-3, 4, size=(8, 8)).astype(np.float32) for _ in range(2))
    a, b = distribute_tensor(x, mesh, [p0, p1]), distribute_tensor(y, mesh, [q0, q1])
    out = UNARY[unary](BINARY[binary](a, b))
    want = UNARY[unary](BINARY[binary](x, y)) if unary not in ("amax",) else BINARY[binary](x, y).max(1)
    np.testing.assert_array_equal(out.full_tensor(), np.asarray(want))
    for d in (0, 5):
        expected = ss.layout(out.spec, out.shape)
        assert out.to_local(d).shape == expected.local_shape(d)
