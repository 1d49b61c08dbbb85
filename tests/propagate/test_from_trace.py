"""Propagation on programs traced from plain numpy (not hand-built): the whole front end at once."""

import numpy as np

import simshard as ss
import simshard.numpy as snp

MESH = ss.Mesh({"x": 2, "y": 4})


def mlp(x, w1, w2):
    h = ss.name(np.tanh(x @ w1), "h")
    return h @ w2


def test_megatron_mlp_column_then_row():
    p = ss.trace(mlp, ss.ShapeDtype((8, 16)), ss.ShapeDtype((16, 32)), ss.ShapeDtype((32, 4)),
                 in_shardings=(ss.P("x", None), ss.P(None, "y"), None), mesh=MESH)
    q = ss.propagate(p)
    assert str(q.sharding_of("h")) == '<@mesh, [{"x", ?}, {"y", ?}]>'
    assert str(q.sharding_of("w2")) == '<@mesh, [{"y", ?}, {?}]>'
    assert "f32[8@x,32@y] = tanh" in q.pretty()
    why = ss.explain(q, "h")
    assert 'dim 0 {"x"}: from input x (p0)' in why and 'dim 1 {"y"}: from input w1 (p0)' in why


def test_priorities_decide_which_annotation_reaches_a_shared_value():
    """x wants "x" on dim 0, w wants it on dim 1; whichever has the higher priority (lower pN)
    propagates first and shapes the unannotated result."""
    for xp, wp, want in [("p0", "p1", '<@mesh, [{"x", ?}, {?}]>'), ("p1", "p0", '<@mesh, [{?}, {"x", ?}]>')]:
        a = ss.Sharding.parse(f'<@mesh, [{{"x", ?}}{xp}, {{?}}]>', MESH)
        b = ss.Sharding.parse(f'<@mesh, [{{?}}, {{"x", ?}}{wp}]>', MESH)
        p = ss.trace(lambda x, w: np.tanh(x + w), ss.ShapeDtype((8, 8)), ss.ShapeDtype((8, 8)), in_shardings=(a, b))
        assert str(ss.propagate(p, strategy="user_priority").sharding_of(0)) == want


def test_out_sharding_in_auto_mode_is_a_constraint_that_propagates_back():
    def f(x, w):
        return snp.matmul(np.tanh(x), w, out_sharding=ss.P(None, "y"))

    with ss.use_mesh(MESH):
        p = ss.trace(f, ss.ShapeDtype((8, 16)), ss.ShapeDtype((16, 32)))
    assert [e.op for e in p.eqns][-1] == "sharding_constraint"
    q = ss.propagate(p)
    assert str(q.sharding_of("w")) == '<@mesh, [{?}, {"y", ?}]>'


def test_reshape_splits_an_axis_into_sub_axes():
    mesh = ss.Mesh({"x": 4})
    p = ss.trace(lambda a: np.exp(a.reshape(2, 4)), ss.ShapeDtype((8,)), in_shardings=ss.NamedSharding(mesh, ss.P("x")))
    q = ss.propagate(p)
    assert str(q.sharding_of(0)) == '<@mesh, [{"x":(1)2, ?}, {"x":(2)2, ?}]>'
