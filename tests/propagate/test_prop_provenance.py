"""Provenance: each axis traced back to the annotation that introduced it, through every op and
factor on the way, with the annotation's priority."""

import numpy as np

import simshard as ss
from simshard.propagate import explain, propagate
from simshard.tracing.tracer import ShapeDtype, bind, name, trace

MESH = ss.Mesh({"x": 2, "y": 4}, name="mesh")


def S(text):
    return ss.Sharding.parse(text, MESH)


def test_provenance_follows_sub_axes_through_reshape():
    def f(a):
        b = name(a.reshape(2, 4), "b")
        return name(np.exp(b), "c")

    p = propagate(trace(f, ShapeDtype((8,)), in_shardings=(S('<@mesh, [{"y"}]>'),)))
    text = explain(p, "c")
    assert 'dim 0 {"y":(1)2}: from input a (p0) via reshape -> exp factor a' in text
    assert 'dim 1 {"y":(2)2}: from input a (p0) via reshape -> exp factor b' in text


def test_provenance_reports_user_priorities():
    def f(a, b):
        return name(a + b, "s")

    p = propagate(trace(f, ShapeDtype((8, 8)), ShapeDtype((8, 8)), in_shardings=(S('<@mesh, [{"x"}p2, {?}]>'), S('<@mesh, [{?}, {"y"}p1]>'))))
    text = explain(p, "s")
    assert 'dim 0 {"x"}: from input a (p2) via add factor a' in text
    assert 'dim 1 {"y"}: from input b (p1) via add factor b' in text


def test_provenance_names_sharding_constraints():
    def f(a):
        c = name(bind("sharding_constraint", a, sharding=S('<@mesh, [{"x", ?}, {?}]>')), "c")
        return name(c * 2.0, "d")

    p = propagate(trace(f, ShapeDtype((8, 8))))
    assert 'dim 0 {"x"}: from sharding_constraint c (p0) via mul factor a' in explain(p, "d")
    assert 'dim 0 {"x"}: from sharding_constraint c (p0) via sharding_constraint factor a' in explain(p, "a")


def test_provenance_with_a_value_used_twice_by_one_op():
    def f(a):
        return name(a * a, "sq")

    p = propagate(trace(f, ShapeDtype((8, 8)), in_shardings=(S('<@mesh, [{"x"}, {}]>'),)))
    assert 'dim 0 {"x"}: from input a (p0) via mul factor a' in explain(p, "sq")


def test_provenance_dims_nothing_reached():
    p = propagate(trace(lambda a: a * 2.0, ShapeDtype((8, 8)), in_shardings=(S('<@mesh, [{"x"}, {}]>'),)))
    text = explain(p, "a")
    assert "dim 1 {}: closed, no axes" in text
    assert text.splitlines()[0] == 'a f32[8,8]: <@mesh, [{"x"}, {}]>'
