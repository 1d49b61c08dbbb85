"""One propagation run over a graph: worklist to a fixed point, function-result exchange,
meshes, opaque ops, literals, propagation barriers."""

import simshard as ss
from prop_helpers import G, MESH, S, rule, state, txt
from simshard.propagate import engine
from simshard.propagate.direction import Direction
from simshard.propagate.graph import ELEMENTWISE, ResultRef, identity_rule

SH = (8, 8)


def chain():
    """z = x + y; w = z * u (all 8x8), z and w returned."""
    g = G({"x": SH, "y": SH, "u": SH})
    g.ew(["x", "y"], "z").ew(["z", "u"], "w")
    return g.graph(outputs=["w"])


def test_engine_forward_and_backward_to_fixed_point():
    g = chain()
    st = state(g, {"u": S('<@mesh, [{"a"}, {"b"}]>')})
    engine.run(g, st, "basic")
    for k in ("x", "y", "z", "w"):
        assert txt(st.get(k)) == '<@mesh, [{"a", ?}, {"b", ?}]>', k
    assert txt(st.get(ResultRef(0))) == '<@mesh, [{"a", ?}, {"b", ?}]>'


def test_engine_closed_output_sharding_constrains_the_returned_value():
    g = chain()
    st = state(g, {"x": S('<@mesh, [{"a", ?}, {?}]>')}, results=[S('<@mesh, [{}, {"b"}]>')])
    engine.run(g, st, "aggressive")
    assert txt(st.get("w")) == '<@mesh, [{"a", ?}, {"b", ?}]>'
    assert txt(st.get(ResultRef(0))) == '<@mesh, [{}, {"b"}]>'  # closed: unchanged


def test_engine_unsharded_values_stay_none():
    g = chain()
    st = state(g, {})
    engine.run(g, st, "aggressive")
    assert all(st.get(k) is None for k in g.shapes)


def test_engine_first_user_in_program_order_wins():
    g = G({"x": SH, "y1": SH, "y2": SH})
    g.ew(["x", "y1"], "z1").ew(["x", "y2"], "z2")
    gr = g.graph(outputs=["z1", "z2"])
    st = state(gr, {"y1": S('<@mesh, [{"a", ?}, {?}]>'), "y2": S('<@mesh, [{"b", ?}, {?}]>')})
    engine.run(gr, st, "aggressive")
    assert txt(st.get("x")) == '<@mesh, [{"a", ?}, {?}]>'
    assert txt(st.get("z2")) is None  # x [a] and y2 [b] cancel on the shared factor


def test_engine_different_meshes_do_not_exchange_shardings():
    other = ss.Mesh({"a": 2, "b": 2, "c": 2, "d": 2}, device_ids=list(range(16))[::-1], name="other")
    g = G({"x": SH, "y": SH})
    g.ew(["x", "y"], "z")
    gr = g.graph()
    st = state(gr, {"x": S('<@mesh, [{"a"}, {}]>'), "y": S('<@other, [{?}, {"b"}]>', other)})
    engine.run(gr, st, "aggressive")
    assert st.get("z") is None
    assert txt(st.get("y")) == '<@other, [{?}, {"b"}]>'


def test_engine_same_mesh_under_another_name_propagates():
    twin = MESH.renamed("twin")
    g = G({"x": SH, "y": SH})
    g.ew(["x", "y"], "z")
    gr = g.graph()
    st = state(gr, {"x": S('<@mesh, [{"a"}, {}]>'), "y": S('<@twin, [{?}, {"b"}]>', twin)})
    engine.run(gr, st, "aggressive")
    assert txt(st.get("z")) == '<@mesh, [{"a", ?}, {"b", ?}]>'


def test_engine_op_without_rule_is_opaque():
    g = G({"x": SH})
    g.op("reshard", None, ["x"], ["y"], out_shapes={"y": SH})
    gr = g.graph()
    st = state(gr, {"x": S('<@mesh, [{"a"}, {}]>')})
    engine.run(gr, st, "aggressive")
    assert st.get("y") is None


def test_engine_literal_operand_is_ignored():
    g = G({"x": SH})
    g.op("mul", rule("ij,->ij", [SH, ()], [SH]), ["x", None], ["y"], ELEMENTWISE, out_shapes={"y": SH})
    gr = g.graph()
    st = state(gr, {"x": S('<@mesh, [{"a"}, {}]>')})
    engine.run(gr, st, "aggressive")
    assert txt(st.get("y")) == '<@mesh, [{"a", ?}, {?}]>'


def test_engine_multi_result_op():
    # a variadic reduce over dim 1: ([i,j,k],[i,j,k])->([i,k],[i,k]) reduction={j}
    r = rule("ijk,ijk->ik,ik", [(4, 64, 8)] * 2, [(4, 8)] * 2, reduction="j")
    g = G({"x": (4, 64, 8), "y": (4, 64, 8)})
    g.op("reduce", r, ["x", "y"], ["r0", "r1"], out_shapes={"r0": (4, 8), "r1": (4, 8)})
    gr = g.graph()
    st = state(gr, {"r1": S('<@mesh, [{?}, {"b", ?}]>')})
    engine.run(gr, st, "basic")
    assert [txt(st.get(k)) for k in ("x", "y", "r0")] == ['<@mesh, [{?}, {?}, {"b", ?}]>'] * 2 + ['<@mesh, [{?}, {"b", ?}]>']


def barrier_graph(direction):
    g = G({"x": SH})
    g.op("propagation_barrier", identity_rule(SH), ["x"], ["y"], ELEMENTWISE, barrier=direction, out_shapes={"y": SH})
    return g.graph()


def test_engine_barrier_forward_only():
    gr = barrier_graph(Direction.FORWARD)
    st = state(gr, {"x": S('<@mesh, [{"a", ?}, {?}]>'), "y": S('<@mesh, [{?}, {"b", ?}]>')})
    engine.run(gr, st, "aggressive")
    assert txt(st.get("y")) == '<@mesh, [{"a", ?}, {"b", ?}]>'
    assert txt(st.get("x")) == '<@mesh, [{"a", ?}, {?}]>'


def test_engine_barrier_backward_only():
    gr = barrier_graph(Direction.BACKWARD)
    st = state(gr, {"x": S('<@mesh, [{"a", ?}, {?}]>'), "y": S('<@mesh, [{?}, {"b", ?}]>')})
    engine.run(gr, st, "aggressive")
    assert txt(st.get("y")) == '<@mesh, [{?}, {"b", ?}]>'
    assert txt(st.get("x")) == '<@mesh, [{"a", ?}, {"b", ?}]>'


def test_engine_barrier_none_blocks_both_ways():
    gr = barrier_graph(Direction.NONE)
    st = state(gr, {"x": S('<@mesh, [{"a", ?}, {?}]>')})
    engine.run(gr, st, "aggressive")
    assert st.get("y") is None


def test_engine_conservative_blocks_permutation_factors():
    # slice 8x8 -> 4x8: dim 0 is a permutation factor
    r = rule("ij->ij", [SH], [(4, 8)], permutation="i", inexact="i")
    g = G({"x": SH})
    g.op("slice", r, ["x"], ["y"], out_shapes={"y": (4, 8)})
    gr = g.graph()
    for conservative, expected in ((False, '<@mesh, [{"a", ?}, {"b", ?}]>'), (True, '<@mesh, [{?}, {"b", ?}]>')):
        st = state(gr, {"x": S('<@mesh, [{"a"}, {"b"}]>')})
        engine.run(gr, st, "basic", conservative=conservative)
        assert txt(st.get("y")) == expected


def test_engine_records_skipped_ops_and_why():
    from simshard.propagate.provenance import Provenance

    g = chain()
    prov = Provenance()
    engine.run(g, state(g, {}), "aggressive", prov=prov)
    assert {n: s.reason for n, s in prov.skipped.items()} == {0: engine.SkipReason.NO_MESH, 1: engine.SkipReason.NO_MESH}
