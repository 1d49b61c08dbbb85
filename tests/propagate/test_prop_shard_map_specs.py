"""A shard_map region's in_specs / out_specs seed propagation, as Shardy's ManualComputationOp
does: out_specs are its results' shardings, in_specs reach its operands through an identity
edge. A program whose only shardings are a region's specs is then sharded around the region,
with no reshard the specs make unnecessary."""

import numpy as np
import pytest

import simshard as ss

MESH = ss.Mesh({"x": 4})
X = np.arange(16, dtype=np.float32) - 5.0


def _region():
    return ss.shard_map(lambda a: a * 2.0, mesh=MESH, in_specs=ss.P("x"), out_specs=ss.P("x"))


def _kinds(res):
    return [r.kind for r in res.comm.records]


def test_specs_alone_shard_the_input_and_the_output_without_collectives():
    res = ss.run(_region(), X, mesh=MESH, backend="local")
    assert res.verify.bitwise
    prog = res.program
    assert str(prog.shardings[prog.inputs[0]]) == '<@mesh, [{"x", ?}]>'
    assert str(prog.shardings[prog.outputs[0]]) == '<@mesh, [{"x"}]>'
    assert _kinds(res) == []  # was one all-gather per device: the output gathered to replicated


def test_specs_reach_ops_before_and_after_the_region():
    f = _region()
    res = ss.run(lambda x: f(np.tanh(x)) + 1.0, X, mesh=MESH, backend="local")
    assert res.verify.bitwise
    assert _kinds(res) == []
    prog = res.program
    for v in prog.values():
        assert [a.name for d in prog.shardings[v].dims for a in d.axes] == ["x"], v


def test_a_user_sharding_is_not_overwritten_by_the_specs():
    res = ss.run(_region(), X, mesh=MESH, in_shardings=(ss.P(None),), backend="local")
    assert res.verify.bitwise
    prog = res.program
    assert str(prog.shardings[prog.inputs[0]]) == '<@mesh, [{}]>'


def test_two_dim_specs_on_a_two_axis_mesh():
    mesh = ss.Mesh({"x": 2, "y": 2})
    f = ss.shard_map(lambda a, b: a + b, mesh=mesh, in_specs=(ss.P("x", None), ss.P("x", None)), out_specs=ss.P("x", None))
    a = np.arange(32, dtype=np.float32).reshape(8, 4)
    res = ss.run(f, a, a * 3, mesh=mesh, backend="local")
    assert res.verify.bitwise
    assert _kinds(res) == []
    prog = res.program
    assert [str(prog.shardings[v]) for v in prog.inputs] == ['<@mesh, [{"x", ?}, {?}]>'] * 2


def test_explain_names_the_region_specs():
    from simshard.tracing import trace

    f = _region()
    q = ss.propagate(trace(lambda x: f(np.tanh(x)), X, mesh=MESH))
    text = ss.explain(q, "x")
    assert "in_specs[0]" in text, text
