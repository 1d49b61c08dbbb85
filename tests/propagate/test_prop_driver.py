"""``propagate`` / ``explain`` on traced programs: every value sharded, annotations respected,
constraints, reshards, meshes, strategies, the pipeline's export step, provenance."""

import numpy as np
import pytest

import simshard as ss
from simshard.tracing.context import use_mesh
from simshard.propagate import explain, propagate, propagation_info
from simshard.tracing.tracer import ShapeDtype, bind, name, trace

MESH = ss.Mesh({"x": 2, "y": 4}, name="mesh")


def S(text, mesh=MESH):
    return ss.Sharding.parse(text, mesh)


def mlp(x, w1, w2):
    h = name(np.tanh(x @ w1), "h")
    return name(h @ w2, "out")


def traced(fn=mlp, shapes=((8, 16), (16, 32), (32, 4)), in_shardings=None, out_shardings=None):
    args = [ShapeDtype(s) for s in shapes]
    return trace(fn, *args, in_shardings=in_shardings or (None,) * len(args), out_shardings=out_shardings)


def sh(program, key):
    return str(program.sharding_of(key))


def test_driver_every_value_gets_a_sharding():
    p = propagate(traced(in_shardings=(S('<@mesh, [{"x"}, {}]>'), None, None)))
    assert p.mode == "auto"
    assert set(p.shardings) == set(p.values())
    assert sh(p, "h") == '<@mesh, [{"x", ?}, {?}]>'
    assert sh(p, "w2") == '<@mesh, [{?}, {?}]>'  # nothing reached it: fully open, empty


def test_driver_does_not_touch_the_input_program():
    p = traced(in_shardings=(S('<@mesh, [{"x"}, {}]>'), None, None))
    propagate(p)
    assert p.shardings == {}


def test_driver_closed_dims_and_replicated_axes_never_change():
    x = S('<@mesh, [{"x"}, {}], replicated={"y"}>')
    w1 = S('<@mesh, [{?}, {"y", ?}]>')
    p = propagate(traced(in_shardings=(x, w1, None)))
    assert p.sharding_of("x") == x
    assert sh(p, "w1") == '<@mesh, [{?}, {"y", ?}]>'
    assert sh(p, "h") == '<@mesh, [{"x", ?}, {"y", ?}]>'


def test_driver_output_sharding_flows_backward():
    out = S('<@mesh, [{"y"}, {}]>')
    p = propagate(traced(out_shardings=out))
    assert sh(p, "x") == '<@mesh, [{"y", ?}, {?}]>'
    assert propagation_info(p).result_shardings[0] == out


def test_driver_reshape_creates_sub_axes():
    p = propagate(traced(lambda a: a.reshape(2, 4) * 2.0, [(8,)], in_shardings=(S('<@mesh, [{"y"}]>'),)))
    assert str(p.shardings[p.outputs[0]]) == '<@mesh, [{"y":(1)2, ?}, {"y":(2)2, ?}]>'


def test_driver_conservative_refuses_sub_axes():
    p = propagate(traced(lambda a: a.reshape(2, 4) * 2.0, [(8,)], in_shardings=(S('<@mesh, [{"y"}]>'),)), conservative=True)
    assert str(p.shardings[p.outputs[0]]) == '<@mesh, [{?}, {?}]>'


def constrained(a, b):
    c = bind("sharding_constraint", a, sharding=S('<@mesh, [{"x", ?}, {?}]>'))
    return c + b


def test_driver_sharding_constraint_seeds_propagation_and_may_grow():
    p = propagate(traced(constrained, [(8, 8), (8, 8)], in_shardings=(None, S('<@mesh, [{?}, {"y"}]>'))))
    c = p.eqns[0].outputs[0]
    assert str(p.shardings[c]) == '<@mesh, [{"x", ?}, {"y", ?}]>'
    assert sh(p, "a") == '<@mesh, [{"x", ?}, {"y", ?}]>'


def test_driver_reshard_is_opaque():
    def f(a):
        return bind("reshard", a, sharding=S('<@mesh, [{}, {"y"}]>')) * 2.0

    p = propagate(traced(f, [(8, 8)], in_shardings=(S('<@mesh, [{"x", ?}, {?}]>'),)))
    assert str(p.shardings[p.outputs[0]]) == '<@mesh, [{?}, {"y", ?}]>'
    assert sh(p, "a") == '<@mesh, [{"x", ?}, {?}]>'


def test_driver_op_result_annotation_is_only_a_start():
    def f(a, b):
        c = bind("add", a, b, shardings=[S('<@mesh, [{"x", ?}, {?}]>')])
        return c * 2.0

    p = propagate(traced(f, [(8, 8), (8, 8)], in_shardings=(None, S('<@mesh, [{?}, {"y"}]>'))))
    assert str(p.shardings[p.eqns[0].outputs[0]]) == '<@mesh, [{"x", ?}, {"y", ?}]>'


def test_driver_values_on_another_mesh_are_not_reached():
    other = ss.Mesh({"x": 2, "y": 4}, device_ids=list(range(8))[::-1], name="other")
    p = propagate(traced(constrained, [(8, 8), (8, 8)], in_shardings=(None, S('<@other, [{?}, {"y"}]>', other))))
    assert str(p.shardings[p.outputs[0]]) == '<@mesh, [{?}, {?}]>'
    assert sh(p, "b") == '<@other, [{?}, {"y"}]>'


def test_driver_needs_a_mesh():
    with pytest.raises(ss.ShardingError, match="no-mesh"):
        propagate(traced())
    with use_mesh(MESH):
        p = propagate(traced())
    assert sh(p, "h") == '<@mesh, [{?}, {?}]>'


def test_driver_rejects_unknown_strategy_and_bad_ranks():
    with pytest.raises(ValueError, match="unknown propagation strategy"):
        propagate(traced(), strategy="greedy")
    p = traced(in_shardings=(S('<@mesh, [{"x"}, {}]>'), None, None))
    from dataclasses import replace

    bad = replace(p, in_shardings=(S('<@mesh, [{"x"}]>'), None, None))
    with pytest.raises(ss.ShardingError, match="input sharding of x"):
        propagate(bad)


@pytest.mark.parametrize("strategy", ["basic", "aggressive", "basic_then_aggressive", "op_priority", "user_priority", "pipeline"])
def test_driver_every_strategy_runs(strategy):
    p = propagate(traced(in_shardings=(S('<@mesh, [{"x"}, {}]>'), S('<@mesh, [{}, {"y"}]>'), None)), strategy=strategy)
    assert sh(p, "h").startswith('<@mesh, [{"x"')


def test_driver_pipeline_closes_everything_and_drops_replicated():
    x = S('<@mesh, [{"x", ?}, {?}], replicated={"y"}>')
    p = propagate(traced(in_shardings=(x, None, None)), strategy="pipeline")
    assert sh(p, "x") == '<@mesh, [{"x"}, {}]>'
    assert sh(p, "h") == '<@mesh, [{"x"}, {}]>'


def test_driver_pipeline_makes_inputs_evenly_divisible_without_open_sub_axes():
    mesh = ss.Mesh({"x": 4, "y": 2}, name="mesh")
    p = traced(lambda a, b: a + b, [(2, 6), (2, 6)], in_shardings=(S('<@mesh, [{"x", ?}, {"y", ?}]>', mesh), S('<@mesh, [{"x"}, {?}]>', mesh)))
    out = propagate(p, strategy="pipeline")
    assert sh(out, "a") == '<@mesh, [{}, {"y"}]>'  # x:(1)2 would divide, but open I/O dims drop sub-axes
    assert sh(out, "b") == '<@mesh, [{"x":(1)2}, {"y"}]>'  # closed: trimmed to the dividing sub-axis


def test_explain_names_annotation_ops_factor_and_priority():
    p = propagate(traced(in_shardings=(S('<@mesh, [{"x"}, {}]>'), S('<@mesh, [{}, {"y"}p1]>'), None)))
    text = explain(p, "w2")
    assert text.splitlines()[0] == 'w2 f32[32,4]: <@mesh, [{"y", ?}, {?}]>'
    assert 'dim 0 {"y"}: from input w1 (p1) via dot_general -> tanh -> dot_general factor c' in text
    assert "dim 1 {}: open, no axes" in text
    assert 'dim 0 {"x"}: annotated on input x (p0)' in explain(p, "x")


def test_explain_output_annotations_and_result_shardings():
    p = propagate(traced(out_shardings=S('<@mesh, [{}, {"y"}]>')))
    text = explain(p, "out")
    assert 'dim 1 {"y"}: from output 0 (p0) via return' in text
    # the function result's own (closed) sharding differs from the returned value's: shown too
    assert text.splitlines()[-3:] == ['output 0: <@mesh, [{}, {"y"}]>', "  dim 0 {}: closed, no axes", '  dim 1 {"y"}: annotated on output 0 (p0)']
    assert "from output 0 (p0) via return -> dot_general factor" in explain(p, "w2")


def test_explain_propagates_first_when_needed():
    p = traced(in_shardings=(S('<@mesh, [{"x"}, {}]>'), None, None))
    assert 'dim 0 {"x"}: from input x (p0) via dot_general -> tanh factor a' in explain(p, "h")


def test_explain_splits_a_dim_by_origin():
    def f(a, b):
        return a + b

    p = propagate(traced(f, [(8, 8), (8, 8)], in_shardings=(S('<@mesh, [{"x", ?}, {?}]>'), S('<@mesh, [{"x", "y", ?}, {?}]>'))))
    text = explain(p, "a")
    assert 'dim 0 {"x", "y"}: {"x"} annotated on input a (p0); {"y"} from input b (p0) via add factor a' in text
