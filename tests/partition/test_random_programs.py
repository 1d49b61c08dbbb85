"""Random small programs with random shardings, partitioned and run: bit for bit equal to numpy.

Programs chain elementwise ops, matmuls, reductions (sum / max), transposes, reshapes and
sharding constraints on exact inputs; inputs, constraints and outputs get random shardings
(uneven included) on random 1-3 axis meshes.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simshard as ss

from .helpers import exact_values, meshes, shardings
from .run import run_partitioned


@st.composite
def programs(draw):
    mesh = draw(meshes(permuted=True))
    n, k, m = (draw(st.sampled_from([2, 3, 4, 6, 8])) for _ in range(3))
    steps = draw(st.lists(st.sampled_from(["tanh", "add", "mul", "matmul", "sum", "max", "transpose", "constrain", "reshape", "scale"]),
                          min_size=1, max_size=6))
    cons = [draw(shardings(mesh, 2, pending=False)) for _ in steps]
    in_a = draw(shardings(mesh, 2, pending=False))
    in_b = draw(shardings(mesh, 2, pending=False))
    out = draw(shardings(mesh, 2, pending=False))

    def fn(a, b):
        x = a  # [n, k]
        for s, c in zip(steps, cons):
            if s == "tanh":
                x = np.sign(x) * 2.0 + x
            elif s == "add":
                x = x + (b[:, :1] if x.shape[1] != b.shape[1] else b) if x.shape[0] == b.shape[0] else x + 1.0
            elif s == "mul":
                # |x| keeps magnitudes in check: squaring could pass 2**24 after a few steps, where
                # float32 sums stop being exact (six matmul / sum steps stay below 9**6 * 8 < 2**24)
                x = x * np.sign(x)
            elif s == "matmul":
                x = x @ np.ones((x.shape[1], m), np.float32)
            elif s == "sum":
                x = x.sum(axis=1, keepdims=True) + x
            elif s == "max":
                x = x - x.max(axis=0, keepdims=True)
            elif s == "transpose":
                x = x.T.T
            elif s == "reshape":
                x = x.reshape(x.shape[0] * x.shape[1], 1).reshape(x.shape)
            elif s == "scale":
                x = x * 0.5
            elif s == "constrain":
                x = ss.with_sharding_constraint(x, c)
        return x

    return mesh, (n, k), fn, (in_a, in_b), out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_random_programs_run_bitwise(prog):
    mesh, (n, k), fn, (in_a, in_b), out = prog
    rng = np.random.default_rng(0)
    a = exact_values(rng, (n, k))
    b = exact_values(rng, (n, k))
    expected = fn(a, b)
    out = out if out.rank == expected.ndim else None
    program = ss.propagate(ss.trace(fn, a, b, in_shardings=(in_a, in_b), out_shardings=out, mesh=mesh))
    run_partitioned(program, [a, b], expected)


def test_a_product_whose_operands_split_on_factors_that_do_not_meet_is_not_run_where_they_lie():
    """Found by hypothesis (tests/report/test_estimate.py): rows split unevenly one way (2 | 1 of
    3) times a constant whose columns are split the other way computes, on each device, only its
    rows by its columns: the rest of the result is nobody's. Such a layout is no result
    (``exact.covers``): the operands are resharded instead, and the program runs bitwise."""
    from simshard.partition.exact import covers

    mesh = ss.Mesh({"x": 2})
    row, col = ss.Sharding.parse('<@mesh, [{"x"}, {}]>', {"mesh": mesh}), ss.Sharding.parse('<@mesh, [{}, {"x"}]>', {"mesh": mesh})

    def fn(a, b):
        x = a
        for _ in range(3):  # (as drawn: element-wise steps before the reshape)
            x = np.sign(x) * 2.0 + x
        return x.reshape(6, 1).reshape(3, 2) @ np.ones((2, 2), np.float32)

    a = exact_values(np.random.default_rng(0), (3, 2))
    program = ss.propagate(ss.trace(fn, a, a, in_shardings=(row, row), out_shardings=col, mesh=mesh))
    run_partitioned(program, [a, a], fn(a, a))  # (the partitioner raised "no exchange from Layout(...)" here)
    i = lambda *v: np.array(v, dtype=np.int64)
    assert not covers({0: (i(0, 1), i(0)), 1: (i(2), i(1))}, (3, 2))
    assert covers({0: (i(0, 1), i(0, 1)), 1: (i(2), i(0, 1))}, (3, 2))
    assert covers({0: (i(0, 1, 2), i(0)), 1: (i(0, 1, 2), i(1)), 2: (i(0), i(0, 1))}, (3, 2))
