"""Mesh axes of size 1 are legal everywhere: a sharding may name one, and it shards nothing.

Propagation used to see a size-1 axis as spanning nothing, so it put it on two dimensions of one
value (an internal duplicate-axis error on 8% of random programs)."""

import numpy as np
import pytest

import simshard as ss

A = np.arange(16, dtype=np.float32).reshape(4, 4)


@pytest.mark.parametrize("fn", [
    lambda a, b: a * b.T,
    lambda a, b: a @ b.T,
    lambda a, b: (a * b.T).sum(axis=1),
    lambda a, b: a.reshape(2, 8) + b.T.reshape(2, 8),
], ids=["mul-transposed", "matmul", "sum", "reshape"])
@pytest.mark.parametrize("mesh", [{"x": 1}, {"x": 1, "y": 2}, {"y": 2, "x": 1}], ids=str)
def test_a_size_one_axis_on_both_operands_runs_bitwise(fn, mesh):
    res = ss.run(fn, A, A, mesh=ss.Mesh(mesh), in_shardings=(ss.P("x", None),) * 2, backend="local")
    assert res.verify.bitwise


def test_no_value_names_a_size_one_axis_twice():
    prog = ss.propagate(ss.trace(lambda a, b: a * b.T, A, A, mesh=ss.Mesh({"x": 1}),
                                 in_shardings=(ss.P("x", None),) * 2))
    for v, s in prog.shardings.items():
        named = [a.name for d in s.dims for a in d.axes]
        assert len(named) == len(set(named)), (v, s)


# -- random small programs on meshes with a size-1 axis ----------------------------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

STEPS = ["mul_t", "matmul", "sum", "max", "reshape", "transpose", "add", "constrain"]


@st.composite
def size_one_programs(draw):
    """A mesh with at least one size-1 axis (at a random place), shardings that name it on any
    dim, and a chain of elementwise ops, matmuls, reductions, reshapes and constraints."""
    others = draw(st.lists(st.sampled_from([1, 2, 4]), min_size=0, max_size=2))
    pos = draw(st.integers(0, len(others)))
    sizes = others[:pos] + [1] + others[pos:]
    mesh = ss.Mesh(dict(zip(["x", "y", "z"], sizes)))
    names = list(mesh.axis_names)

    def sharding():
        dims: list[list[str]] = [[], []]
        for n in names:
            where = draw(st.integers(-1, 1))
            if where >= 0:
                dims[where].append(n)
        return ss.P(*(tuple(d) if d else None for d in dims))

    steps = draw(st.lists(st.sampled_from(STEPS), min_size=1, max_size=5))
    cons = [sharding() for _ in steps]
    in_sh = (sharding(), sharding())

    def fn(a, b):
        x = a  # 4x4 throughout
        for s, c in zip(steps, cons):
            if s == "mul_t":
                x = x * b.T
            elif s == "matmul":
                x = x @ b.T
            elif s == "sum":
                x = x.sum(axis=1, keepdims=True) + x
            elif s == "max":
                x = x - x.max(axis=0, keepdims=True)
            elif s == "reshape":
                x = x.reshape(2, 8).reshape(4, 4)
            elif s == "transpose":
                x = x.T
            elif s == "add":
                x = x + b
            elif s == "constrain":
                x = ss.with_sharding_constraint(x, ss.NamedSharding(mesh, c))
        return x

    return mesh, fn, in_sh


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(size_one_programs())
def test_random_programs_on_a_mesh_with_a_size_one_axis_run_bitwise(prog):
    mesh, fn, in_sh = prog
    a = (np.arange(16, dtype=np.float32).reshape(4, 4) % 7) - 3  # small integers: exact sums
    b = (np.arange(16, dtype=np.float32).reshape(4, 4) % 5) - 2
    res = ss.run(fn, a, b, mesh=mesh, in_shardings=in_sh, backend="local")
    assert res.verify.bitwise
    np.testing.assert_array_equal(res.outputs, fn(a, b))
