"""Op-priority stages (which op may propagate in which direction at each stage) and user
priorities (dims of priority > 0 held back, then released in order)."""

from prop_helpers import G, S, rule, state, txt
from simshard.propagate.direction import Direction
from simshard.propagate.graph import BROADCAST, ELEMENTWISE, FORWARD_ONLY, OTHER, PASS_THROUGH
from simshard.propagate.op_priority import stage_direction
from simshard.propagate.user_priority import initial_sharding, released_sharding, run_user_priority

SH = (8, 8)


def single(category, r=None, operands=("x",)):
    g = G({"x": SH, "s": ()})
    g.op("op", r or rule("ij->ij", [SH], [SH]), list(operands), ["y"], category, out_shapes={"y": SH})
    return g


def directions(g, node=0, factor=0, outputs=()):
    gr = g.graph(outputs=list(outputs))
    return [stage_direction(gr, s)(gr.nodes[node], factor) for s in range(5)]


B, F, K, N = Direction.BOTH, Direction.FORWARD, Direction.BACKWARD, Direction.NONE


def test_op_prio_pass_through_ops_go_first():
    assert directions(single(ELEMENTWISE)) == [B] * 5
    assert directions(single(PASS_THROUGH)) == [B] * 5


def test_op_prio_multi_use_operand_waits_for_stage_1():
    g = single(ELEMENTWISE)
    g.ew(["x", "x"], "z")  # x now has three uses
    assert directions(g) == [N, B, B, B, B]


def test_op_prio_returned_value_counts_as_a_use():
    assert directions(single(ELEMENTWISE), outputs=["x"]) == [N, B, B, B, B]


def test_op_prio_scalar_operands_with_many_uses_are_ignored():
    r = rule("ij,->ij", [SH, ()], [SH])
    g = single(ELEMENTWISE, r, ("x", "s"))
    g.op("neg", rule("->", [()], [()]), ["s"], ["s2"], ELEMENTWISE, out_shapes={"s2": ()})
    assert directions(g)[0] == B  # only the scalar has several uses
    g.op("op", r, ["x", "s"], ["y2"], ELEMENTWISE, out_shapes={"y2": SH})
    assert directions(g)[0] == N  # now x has two uses


def test_op_prio_dynamic_slice_is_forward_only_at_first():
    assert directions(single(FORWARD_ONLY)) == [F, F, B, B, B]


def test_op_prio_other_ops_wait_and_use_pass_through_factors_first():
    r = rule("ik,kj->ij", [SH, SH], [SH], reduction="k")
    g = G({"x": SH, "w": SH})
    g.op("dot_general", r, ["x", "w"], ["y"], OTHER, out_shapes={"y": SH})
    assert directions(g, factor=0) == [N, N, B, B, B]  # i: pass-through
    assert directions(g, factor=2) == [N, N, N, B, B]  # k: reduction


def test_op_prio_broadcast_backward_until_the_last_stage():
    assert directions(single(BROADCAST)) == [N, N, K, K, B]


def test_user_prio_initial_sharding_holds_back_lower_priorities():
    s = S('<@mesh, [{"a"}p1, {"b", ?}p0, {"c", ?}p2], replicated={"d"}>')
    assert str(initial_sharding(s)) == '<@mesh, [{}, {"b", ?}, {}], replicated={"a", "c", "d"}>'


def test_user_prio_release_restores_dims_of_that_priority():
    s = S('<@mesh, [{"a"}p1, {"b", ?}p0, {"c", ?}p2], replicated={"d"}>')
    cur = initial_sharding(s)
    cur = released_sharding(cur, s, 1)
    assert str(cur) == '<@mesh, [{"a"}, {"b", ?}, {}], replicated={"c", "d"}>'
    assert str(released_sharding(cur, s, 2)) == '<@mesh, [{"a"}, {"b", ?}, {"c", ?}], replicated={"d"}>'


def test_user_prio_p0_claims_shared_values_before_p1():
    g = G({"x": SH, "w": SH})
    g.ew(["x", "w"], "y").ew(["y", "y"], "z")
    gr = g.graph(outputs=["z"])
    st = state(gr, {"x": S('<@mesh, [{"a", ?}p1, {?}]>'), "w": S('<@mesh, [{"b", ?}, {?}]>')})
    run_user_priority(gr, st)
    assert txt(st.get("y")) == '<@mesh, [{"b", ?}, {?}]>'
    assert txt(st.get("x")) == '<@mesh, [{"a", ?}, {?}]>'  # released, but conflicts downstream


def test_user_prio_lower_dim_further_sharded_once_released():
    g = G({"x": SH, "w": SH})
    g.ew(["x", "w"], "y")
    gr = g.graph(outputs=["y"])
    st = state(gr, {"x": S('<@mesh, [{"b", ?}p1, {}]>')}, results=[S('<@mesh, [{"b", "a", ?}p0, {?}]>')])
    run_user_priority(gr, st)
    assert txt(st.get("x")) == '<@mesh, [{"b", "a", ?}, {}]>'
    assert txt(st.get("w")) == '<@mesh, [{"b", "a", ?}, {?}]>'
