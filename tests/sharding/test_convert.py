"""Exact conversion between the two dialects, decided by comparing layouts."""

import pytest

import simshard as ss
from simshard import AxisRef

MESH = ss.Mesh({"x": 2, "y": 4})


def text(t):
    return ss.Sharding.parse(t, MESH)


@pytest.mark.parametrize(
    "sharding, shape, placements",
    [
        ('<@mesh, [{"x"}, {"y"}]>', (8, 16), [ss.Shard(0), ss.Shard(1)]),
        ('<@mesh, [{"x", "y"}]>', (16,), [ss.Shard(0), ss.Shard(0)]),
        ('<@mesh, [{"y", "x"}]>', (16,), [ss.StridedShard(0, 4), ss.Shard(0)]),
        ('<@mesh, [{}, {"y"}]>', (4, 8), [ss.Replicate(), ss.Shard(1)]),
        ('<@mesh, [{}, {"y"}], unreduced={"x"}>', (4, 8), [ss.Partial(), ss.Shard(1)]),
        ('<@mesh, [{"y"}], unreduced(max)={"x"}>', (4,), [ss.Partial("max"), ss.Shard(0)]),
        ('<@mesh, [{"y":(1)2, "x", "y":(2)2}]>', (16,), [ss.StridedShard(0, 2), ss.Shard(0)]),
        ('<@mesh, [{"x"}, {"y"}]>', (5, 7), [ss.Shard(0), ss.Shard(1)]),  # uneven, one axis per dim
    ],
)
def test_both_directions(sharding, shape, placements):
    s = text(sharding)
    d = ss.DTensorSpec(MESH, placements)
    assert s.to_dtensor(shape) == d
    assert ss.Sharding.from_dtensor(d, shape) == s
    assert ss.layout(s, shape).same_as(ss.layout(d, shape))


def test_three_axes_right_to_left_order():
    mesh = ss.Mesh({"a": 2, "b": 2, "c": 2})
    d = ss.DTensorSpec(mesh, [ss.StridedShard(0, 4), ss.StridedShard(0, 2), ss.Shard(0)])
    s = ss.Sharding.from_dtensor(d, (16,))
    assert str(s) == '<@mesh, [{"c", "b", "a"}]>'
    assert s.to_dtensor((16,)) == d


def test_open_dims_and_priorities_are_not_carried_by_placements():
    s = text('<@mesh, [{"x", ?}p2, {?}], replicated={"y"}>')
    d = s.to_dtensor((4, 4))
    assert d == ss.DTensorSpec(MESH, [ss.Shard(0), ss.Replicate()])
    assert ss.equivalent(s, d, (4, 4))


def test_uneven_nested_vs_flat_is_refused_both_ways():
    with pytest.raises(ss.ShardingError) as e:
        text('<@mesh, [{"x", "y"}]>').to_dtensor((10,))
    assert e.value.rule == "not-expressible" and "device 2" in str(e.value)
    with pytest.raises(ss.ShardingError) as e:
        ss.Sharding.from_dtensor(ss.DTensorSpec(MESH, [ss.Shard(0), ss.Shard(0)]), (10,))
    assert e.value.rule == "not-expressible"


def test_a_mesh_axis_split_over_two_dims_has_no_placement():
    with pytest.raises(ss.ShardingError) as e:
        text('<@mesh, [{"y":(1)2}, {"y":(2)2}]>').to_dtensor((4, 4))
    assert e.value.rule == "not-expressible" and e.value.axis == "y"


def test_a_partly_used_axis_has_no_placement():
    with pytest.raises(ss.ShardingError) as e:
        text('<@mesh, [{"y":(2)2}]>').to_dtensor((4,))
    assert e.value.rule == "not-expressible" and e.value.axis == "y"


def test_stripes_inside_a_local_block_have_no_tensor_dim_form():
    d = ss.DTensorSpec(ss.Mesh({"x": 4}), [ss.StridedShard(0, 2)])
    with pytest.raises(ss.ShardingError) as e:
        ss.Sharding.from_dtensor(d, (8,))
    assert e.value.rule == "not-expressible" and "split factor 2" in str(e.value)


def test_strided_shard_after_shard_is_not_a_contiguous_block():
    d = ss.DTensorSpec(MESH, [ss.Shard(0), ss.StridedShard(0, 2)])
    with pytest.raises(ss.ShardingError):
        ss.Sharding.from_dtensor(d, (16,))


def test_unreduced_sub_axis_has_no_partial():
    with pytest.raises(ss.ShardingError) as e:
        text('<@mesh, [{}], unreduced={"y":(1)2}>').to_dtensor((4,))
    assert e.value.rule == "not-expressible"


def test_from_dtensor_with_a_strided_boundary_inside_a_later_axis_uses_sub_axes():
    d = ss.DTensorSpec(MESH, [ss.StridedShard(0, 2), ss.Shard(0)])
    s = ss.Sharding.from_dtensor(d, (16,))
    assert s.dims[0].axes == (AxisRef("y", (1, 2)), AxisRef("x"), AxisRef("y", (2, 2)))


def test_split_factor_off_a_boundary_names_the_later_axes():
    d = ss.DTensorSpec(MESH, [ss.StridedShard(0, 3), ss.Shard(0)])
    with pytest.raises(ss.ShardingError) as e:
        ss.Sharding.from_dtensor(d, (12,))
    assert "split factor 3" in str(e.value) and "y=4" in str(e.value)
