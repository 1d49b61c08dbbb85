"""Projection onto factors and back: sub-axes born by gcd splitting, minor-most over-sharding,
overflow axes freezing later factors, back-projection merging sub-axes and stopping early."""

from prop_helpers import MESH, S, ax, factor_axes, mesh, projection

M4 = mesh(x=4, y=2)


def test_proj_split_axis_across_factors_creates_sub_axes():
    r, p = projection("(ij)->ij", [(8,)], [(2, 4)], [S('<@mesh, [{"x", "y"}]>', M4)], [None], M4, sizes={"i": 2})
    assert factor_axes(p, 0, 0) == ["x:(1)2"]
    assert factor_axes(p, 0, 1) == ["x:(2)2", "y"]


def test_proj_minor_most_factor_takes_all_remaining_axes():
    m = mesh(a=4, b=4)
    r, p = projection("(ij)->ij", [(8,)], [(2, 4)], [S('<@mesh, [{"a", "b"}]>', m)], [None], m, sizes={"i": 2})
    assert factor_axes(p, 0, 1) == ["a:(2)2", "b"]  # size 8 on a factor of 4: padding allowed


def test_proj_coprime_axis_overflows_and_freezes_later_factors():
    m = mesh(a=3)
    r, p = projection("(ij)->ij", [(8,)], [(2, 4)], [S('<@mesh, [{"a"}]>', m)], [None], m, sizes={"i": 2})
    i, j = p.operands[0].factors[0], p.operands[0].factors[1]
    assert i.axes == [] and [a.short() for a in i.overflow] == ["a"]
    assert j.closed and j.axes == []


def test_proj_missing_sharding_is_open_and_empty():
    r, p = projection("ij->ij", [(4, 4)], [(4, 4)], [None], [None])
    fs = p.operands[0].factors[0]
    assert fs.axes == [] and not fs.closed


def test_proj_closed_dim_makes_its_factors_closed():
    r, p = projection("ij->ij", [(4, 4)], [(4, 4)], [S('<@mesh, [{"a"}, {"b", ?}]>')], [None])
    assert p.operands[0].factors[0].closed and not p.operands[0].factors[1].closed


def test_proj_round_trip_is_exact_and_drops_priorities():
    s = S('<@mesh, [{"a"}p1, {"b", ?}], replicated={"c"}>')
    r, p = projection("ij->ij", [(4, 4)], [(4, 4)], [s], [None])
    back = p.to_shardings(r, MESH)[0]
    assert str(back) == '<@mesh, [{"a"}, {"b", ?}], replicated={"c"}>'


def test_proj_back_projection_merges_sub_axes_at_factor_boundaries():
    r, p = projection("(ij)->ij", [(8,)], [(2, 4)], [S('<@mesh, [{"x", "y"}]>', M4)], [None], M4, sizes={"i": 2})
    assert str(p.to_shardings(r, M4)[0]) == '<@mesh, [{"x", "y"}]>'


def test_proj_back_projection_stops_after_a_factor_not_fully_sharded():
    r, p = projection("(ij)->ij", [(16,)], [(4, 4)], [None], [None], M4, sizes={"i": 4})
    p.operands[0].factors[0].axes = [ax("y")]  # i=4 only half sharded ...
    p.operands[0].factors[1].axes = [ax("x")]  # ... so j's axes would need a strided view
    assert str(p.to_shardings(r, M4)[0]) == '<@mesh, [{"y", ?}]>'


def test_proj_dim_without_factor_keeps_its_sharding():
    s = S('<@mesh, [{"a"}, {"b"}]>')
    r, p = projection("i.->i", [(4, 1)], [(4,)], [s], [None])
    assert str(p.to_shardings(r, MESH)[0]) == str(s)


def test_proj_common_prefix_per_factor():
    r, p = projection(
        "ij,ij->ij", [(8, 8)] * 2, [(8, 8)], [S('<@mesh, [{"a", "b"}, {}]>'), S('<@mesh, [{"a", "c"}, {"d"}]>')],
        [S('<@mesh, [{"a", "b"}, {?}]>')],
    )
    assert [[a.short() for a in f] for f in p.common_prefix_axes(2, MESH.shape)] == [["a"], []]
