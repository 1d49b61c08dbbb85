"""A user-registered op is a first-class op: it traces, propagates, and its rule is checked."""

import numpy as np
import pytest

import simshard as ss
from simshard.ops import OPS, factor_rule
from simshard.ops.check import check_rule
from simshard.ir.program import Aval


@pytest.fixture
def softplus():
    op = ss.register_op(
        "user_softplus",
        lambda x, **_: (Aval(x.shape, x.dtype),),
        lambda x, **_: (np.log1p(np.exp(x)),),
        lambda ins, outs, **_: factor_rule("ab->ab", [ins[0].shape], [outs[0].shape]),
        doc="log(1 + e^x)",
    )
    yield op
    del OPS["user_softplus"]


def test_user_op_traces_propagates_and_checks(softplus):
    mesh = ss.Mesh({"x": 2, "y": 4})
    p = ss.trace(lambda a: softplus(a) * 2, ss.ShapeDtype((8, 4)), in_shardings=ss.NamedSharding(mesh, ss.P("x", "y")))
    assert [e.op for e in p.eqns] == ["user_softplus", "mul"]
    q = ss.propagate(p)
    assert str(q.sharding_of(0)) == '<@mesh, [{"x", ?}, {"y", ?}]>'
    x = np.arange(32.0).reshape(8, 4) / 8
    assert np.array_equal(ss.jit(lambda a: softplus(a))(x), np.log1p(np.exp(x)))
    check_rule("user_softplus", [x], {}, mesh, {"a": ("x",), "b": ("y",)})


def test_a_second_rule_is_validated_when_used(softplus):
    ss.register_rule("user_softplus", lambda ins, outs, **_: factor_rule("a->a", [ins[0].shape], [outs[0].shape]))
    with pytest.raises(ValueError, match="user_softplus"):
        OPS["user_softplus"].rules((Aval((8, 4), np.float64),), (Aval((8, 4), np.float64),))


def test_register_op_refuses_bad_entries():
    with pytest.raises(ValueError, match="already registered"):
        ss.register_op("add", lambda *a: a, lambda *a: a, lambda *a: None)
    with pytest.raises(TypeError, match="kernel must be callable"):
        ss.register_op("user_bad", lambda *a: a, None, lambda *a: None)
