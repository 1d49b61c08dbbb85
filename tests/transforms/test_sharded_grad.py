"""Sharded backward passes: the gradient of a sharded program, run on the devices, equals the
single-process numpy gradient bit for bit (exact inputs), for shapes and shardings hypothesis
draws; gradient sums over a sharded batch become an all-reduce, or a reduce-scatter where the
parameter is sharded (FSDP), never an all-reduce followed by a slice."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import simshard as ss
from simshard.tracing.explicit.errors import ShardingTypeError

P = ss.P
OWN_ERRORS = (ss.ShardingError, ss.TraceError, ShardingTypeError)
LAYERS = {
    "relu": lambda h, w: np.where(h @ w > 0, h @ w, 0),
    "tanh-free": lambda h, w: h @ w * 0.5,
    "max": lambda h, w: np.maximum(h @ w, h[:, :1]),
    "norm": lambda h, w: (h @ w) - np.mean(h @ w, axis=1, keepdims=True),
    "pairs": lambda h, w: _pairs(h @ w),
}


def _pairs(z):
    """Sum neighbouring columns and lay the sums out twice: a reshape, a reduction, a concatenate."""
    s = z.reshape(z.shape[0], -1, 2).sum(axis=2)
    return np.concatenate([s, s], axis=1)


@st.composite
def spec(draw, mesh, rank):
    dims = [[] for _ in range(rank)]
    for name in mesh.axis_names:
        where = draw(st.integers(-1, rank - 1))
        if where >= 0:
            dims[where].append(name)
    return P(*(None if not d else d[0] if len(d) == 1 else tuple(d) for d in dims))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_sharded_gradients_are_bitwise_the_unsharded_ones(data):
    mesh = ss.Mesh({"x": data.draw(st.sampled_from([1, 2, 3])), "y": data.draw(st.sampled_from([1, 2]))})
    b, d = data.draw(st.sampled_from([2, 4, 6])), data.draw(st.sampled_from([2, 4]))
    kinds = data.draw(st.lists(st.sampled_from(sorted(LAYERS)), min_size=1, max_size=2))
    # float64: integer values stay exact through a few layers and the squared loss
    x, w, y = (a.astype(np.float64) for a in ss.exact_inputs([(b, d), (d, d), (b, d)], seed=data.draw(st.integers(0, 3))))

    def loss(w, x, y):
        h = x
        for k in kinds:
            h = LAYERS[k](h, w)
        return np.sum((h - y) ** 2)

    def step(w, x, y):
        value, g = ss.value_and_grad(loss)(w, x, y)
        return value, w - 0.125 * g

    shardings = tuple(data.draw(spec(mesh, 2)) for _ in range(3))
    try:
        res = ss.run(step, w, x, y, mesh=mesh, in_shardings=shardings, out_shardings=(P(), shardings[0]), backend="local")
    except OWN_ERRORS as e:
        event(f"refused: {type(e).__name__}")
        return
    event("ran")
    assert res.verify.bitwise, res.verify.render()


def _mlp_step(x, y, lr=0.125):
    def loss(p, x, y):
        z = x @ p["w1"]
        return np.sum((np.where(z > 0, z, 0) @ p["w2"] - y) ** 2)

    def step(p, x, y):
        value, g = ss.value_and_grad(loss)(p, x, y)
        return value, {k: p[k] - lr * g[k] for k in p}

    return step


@pytest.mark.parametrize("strategy, param_spec, gradient_collective", [
    ("dp", P(), "all_reduce"),
    ("fsdp", P("x", None), "reduce_scatter"),
])
def test_gradient_sums_over_the_batch(strategy, param_spec, gradient_collective):
    x, y, w1, w2 = ss.exact_inputs([(16, 8), (16, 4), (8, 8), (8, 4)])
    params = {"w1": w1, "w2": w2}
    psh = {"w1": param_spec, "w2": param_spec}
    res = ss.run(_mlp_step(x, y), params, x, y, mesh=ss.Mesh({"x": 4}),
                 in_shardings=(psh, P("x", None), P("x", None)), out_shardings=(P(), psh))
    assert res.verify.bitwise
    kinds = [r.kind for r in res.comm.records if r.device == 0 and "transpose" in r.source]
    assert kinds == [gradient_collective] * 2, [(r.kind, r.source) for r in res.comm.records if r.device == 0]
    # never all-reduce then slice: with FSDP no gradient is all-reduced
    if strategy == "fsdp":
        assert not any(r.kind == "all_reduce" and r.bytes_sent > 64 for r in res.comm.records)


def test_in_explicit_mode_a_cotangent_has_its_primals_type():
    """Seed 001: under sharding in types the gradient is typed as the parameter, so a contraction
    over the sharded batch (ambiguous for explicit mode) resolves to it."""
    mesh = ss.make_mesh((2, 2), ("x", "y"), axis_types=ss.AxisType.Explicit)
    x, w = ss.exact_inputs([(8, 4), (4, 4)], max_abs=2)
    seen = {}

    def step(w, x):
        value, g = ss.value_and_grad(lambda w: np.sum(np.maximum(x @ w, 0) ** 2))(w)
        seen.setdefault("types", (str(ss.typeof(w)), str(ss.typeof(g))))  # the traced call, not the reference
        return value, w - 0.125 * g

    res = ss.run(ss.jit(step, in_shardings=(P(None, "y"), P("x", None)), mesh=mesh), w, x)
    assert res.verify.bitwise and res.program.mode == "explicit"
    assert seen["types"] == ("float32[4,4@y]", "float32[4,4@y]")
