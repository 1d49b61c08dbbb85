"""User priorities on the results of a multi-result op: each result's dims are held back until
their own priority is released (Shardy's user-priority pass keeps one reference per value), never
released together at the op's lowest priority.

The op is a variadic reduce of two operands (``([i, j], [i, j]) -> ([i], [i])``, ``j`` a
reduction factor), registered here; its results are annotated through ``bind(..., shardings=)``.
"""

import numpy as np
import pytest

import simshard as ss
from simshard.ops import OPS, factor_rule
from simshard.ir.program import Aval
from simshard.tracing.tracer import bind

MESH = ss.Mesh({"a": 2, "b": 2}, name="mesh")
OP = "test_variadic_sum"


def _eval(x, y, **_):
    return (Aval(x.shape[:1], x.dtype), Aval(y.shape[:1], y.dtype))


def _kernel(x, y, **_):
    return (x.sum(axis=1), y.sum(axis=1))


def _rule(ins, outs, **_):
    return factor_rule("ij,ij->i,i", [a.shape for a in ins], [a.shape for a in outs], reduction="j")


@pytest.fixture(autouse=True)
def variadic_sum():
    # registered for these tests only: the op table's own tests want every op documented
    op = ss.register_op(OP, _eval, _kernel, _rule, doc="sum of two operands over dim 1 (a variadic reduce)",
                        replace_existing=True)
    yield op
    OPS.pop(OP, None)


def S(text):
    return ss.Sharding.parse(text, MESH)


def _program(first: str, second: str):
    def f(x, y):
        return bind(OP, x, y, shardings=(S(first), S(second)))

    x = np.zeros((8, 8), np.float32)
    return ss.trace(f, x, x, mesh=MESH)


@pytest.mark.parametrize("first, second, operands", [
    # p0 on the first result claims the shared factor before the p1 one is even looked at
    ('<@mesh, [{"a", ?}p0]>', '<@mesh, [{"b", ?}p1]>', '<@mesh, [{"a", ?}, {?}]>'),
    ('<@mesh, [{"a", ?}p1]>', '<@mesh, [{"b", ?}p0]>', '<@mesh, [{"b", ?}, {?}]>'),
    # two priorities above 0: p1 goes first, p2 waits for it (not both released at p1)
    ('<@mesh, [{"a", ?}p2]>', '<@mesh, [{"b", ?}p1]>', '<@mesh, [{"b", ?}, {?}]>'),
    ('<@mesh, [{"a", ?}p1]>', '<@mesh, [{"b", ?}p2]>', '<@mesh, [{"a", ?}, {?}]>'),
], ids=["p0-p1", "p1-p0", "p2-p1", "p1-p2"])
def test_each_result_is_released_at_its_own_priority(first, second, operands):
    q = ss.propagate(_program(first, second))
    x, y = q.inputs
    r0, r1 = q.outputs
    assert str(q.shardings[x]) == operands
    assert str(q.shardings[y]) == operands
    # each result keeps its own annotation (priority dropped), the other's axes never replace it
    assert str(q.shardings[r0]) == first.rsplit("p", 1)[0] + "]>"
    assert str(q.shardings[r1]) == second.rsplit("p", 1)[0] + "]>"


def test_same_priorities_conflict_and_cancel():
    # released together (both p1), "a" and "b" cancel on the shared factor: operands stay open
    q = ss.propagate(_program('<@mesh, [{"a", ?}p1]>', '<@mesh, [{"b", ?}p1]>'))
    assert str(q.shardings[q.inputs[0]]) == '<@mesh, [{?}, {?}]>'


def test_multi_result_program_runs_bitwise():
    rng = np.random.default_rng(0)
    x = rng.integers(-4, 5, (8, 8)).astype(np.float32)
    y = rng.integers(-4, 5, (8, 8)).astype(np.float32)

    def f(x, y):
        return bind(OP, x, y, shardings=(S('<@mesh, [{"a", ?}p1]>'), S('<@mesh, [{"b", ?}p0]>')))

    res = ss.run(f, x, y, mesh=MESH, backend="local")
    assert res.verify.bitwise
    np.testing.assert_array_equal(res.outputs[0], x.sum(1))
