"""Negative slice steps (issue 27, seed 004's random programs): ``x[::-1]``, ``x[6:1:-2, ::-1]``
trace, and their sharded runs give what numpy gives on the whole array, for random shapes,
slices and shardings."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st, HealthCheck

import simshard as ss

MESH = ss.Mesh({"x": 2, "y": 2})


@st.composite
def cases(draw):
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=1, max_size=2)))
    index = []
    for n in shape:
        step = draw(st.sampled_from([-1, -2, -3, 1, 2]))
        start = draw(st.one_of(st.none(), st.integers(-n, n)))
        stop = draw(st.one_of(st.none(), st.integers(-n - 1, n)))
        index.append(slice(start, stop, step))
    axes = draw(st.permutations(["x", "y", None, None]))
    spec = ss.P(*[a if n % 2 == 0 else None for a, n in zip(axes, shape)])
    return shape, tuple(index), spec


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_negative_steps_sharded_equal_whole(case):
    shape, index, spec = case
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    res = ss.run(lambda a: a[index] * 2, x, mesh=MESH, in_shardings=(spec,), backend="local")
    np.testing.assert_array_equal(res.outputs, x[index] * 2)
    assert res.verify.ok


def test_reverse_traces_to_a_slice_and_a_take():
    p = ss.jit(lambda a: a[6:1:-2, ::-1]).trace(np.zeros((8, 6), np.float32))
    assert [e.op for e in p.eqns].count("take") == 2 and p.outputs[0].aval.shape == (3, 6)
    x = np.arange(48.0).reshape(8, 6)
    np.testing.assert_array_equal(ss.jit(lambda a: a[6:1:-2, ::-1])(x), x[6:1:-2, ::-1])


def test_explicit_mode_types_a_reversed_dim_as_its_operand():
    mesh = ss.make_mesh((2, 4), ("X", "Y"), axis_types=ss.AxisType.Explicit)
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    with ss.use_mesh(mesh):
        f = ss.jit(lambda a: a[::-1, 6:1:-2], in_shardings=ss.P("X", None))
        p = f.trace(x)
        res = ss.run(f, x, backend="local")
    assert p.type_string(p.outputs[0]) == "f32[8@X,3]"
    np.testing.assert_array_equal(res.outputs, x[::-1, 6:1:-2])
