"""The ``propagation_barrier`` op: identity on data; propagation crosses it only in its
allowed direction, whatever the op-priority stage."""

import numpy as np
import pytest

import simshard as ss
from simshard.tracing.interpret import evaluate
from simshard.ops import get_op
from simshard.propagate import propagate
from simshard.tracing.tracer import ShapeDtype, TraceError, bind, trace

MESH = ss.Mesh({"x": 2, "y": 2}, name="mesh")
A = ss.Sharding.parse('<@mesh, [{"x", ?}, {?}]>', MESH)
B = ss.Sharding.parse('<@mesh, [{?}, {"y", ?}]>', MESH)


def barrier_program(direction):
    def f(a):
        return bind("propagation_barrier", a, allowed_direction=direction) * 2.0

    return trace(f, ShapeDtype((4, 4)), in_shardings=(A,), out_shardings=B)


def test_barrier_is_the_identity():
    p = barrier_program("FORWARD")
    x = np.arange(16.0).reshape(4, 4)
    np.testing.assert_array_equal(evaluate(p, x)[0], x * 2.0)
    assert get_op("propagation_barrier").factor_rule([p.inputs[0].aval], [p.inputs[0].aval], allowed_direction="BOTH").operands == ((("a",), ("b",)),)


def test_barrier_rejects_unknown_direction():
    with pytest.raises(TraceError, match="allowed_direction must be one of"):
        barrier_program("SIDEWAYS")


@pytest.mark.parametrize(
    "direction, into_result, into_input",
    [
        ("FORWARD", '<@mesh, [{"x", ?}, {"y", ?}]>', '<@mesh, [{"x", ?}, {?}]>'),
        ("BACKWARD", '<@mesh, [{?}, {"y", ?}]>', '<@mesh, [{"x", ?}, {"y", ?}]>'),
        ("BOTH", '<@mesh, [{"x", ?}, {"y", ?}]>', '<@mesh, [{"x", ?}, {"y", ?}]>'),
        ("NONE", '<@mesh, [{?}, {"y", ?}]>', '<@mesh, [{"x", ?}, {?}]>'),
    ],
)
@pytest.mark.parametrize("strategy", ["basic", "user_priority"])
def test_barrier_directions(direction, into_result, into_input, strategy):
    p = propagate(barrier_program(direction), strategy=strategy)
    barrier_out = p.eqns[0].outputs[0]
    assert str(p.shardings[barrier_out]) == into_result
    assert str(p.sharding_of("a")) == into_input
