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
