"""Every example of seed 000 (Shardy's sharding representation), with the local shapes it states."""

import numpy as np
import pytest

import simshard as ss
from simshard import AxisRef


def parse(text, *meshes):
    return ss.Sharding.parse(text, {m.name: m for m in meshes})


MESH_XYZ = ss.Mesh({"x": 2, "y": 4, "z": 2}, name="mesh_xy")


def local_shapes(s, shape):
    lay = ss.layout(s, shape)
    return {lay.local_shape(d) for d in lay.devices}


def test_basic_2x2_each_device_holds_one_element():
    mesh = ss.Mesh({"x": 2, "y": 2}, name="mesh_xy")
    s = parse('<@mesh_xy, [{"x"}, {"y"}]>', mesh)
    lay = ss.layout(s, (2, 2))
    # devices [[0, 1], [2, 3]] hold [[a, b], [c, d]] one each
    for dev, want in zip(range(4), [(0, 0), (0, 1), (1, 0), (1, 1)]):
        assert tuple(int(i[0]) for i in lay.indices(dev)) == want
        assert lay.local_shape(dev) == (1, 1)


def test_basic_structure_z_then_y_local_2x1():
    s = parse('<@mesh_xy, [{"x"}, {"z", "y"}]>', MESH_XYZ)
    assert local_shapes(s, (4, 8)) == {(2, 1)}
    lay = ss.layout(s, (4, 8))
    # "z" is major: device with z=1, y=0 holds column 4 (the second z-half, first y-block).
    dev = MESH_XYZ.device((0, 0, 1))
    assert lay.indices(dev)[1].tolist() == [4]


def test_open_and_closed_dims():
    s = parse('<@mesh_xy, [{"x"}, {"z", ?}]>', MESH_XYZ)
    assert not s.dims[0].is_open and s.dims[1].is_open
    assert local_shapes(s, (4, 8)) == {(2, 4)}


def test_explicitly_replicated_axis_local_2x8():
    s = parse('<@mesh_xy, [{"x"}, {?}], replicated={"y"}>', MESH_XYZ)
    assert s.replicated == (AxisRef("y"),)
    assert local_shapes(s, (4, 8)) == {(2, 8)}


def test_replicated_axes_stored_in_mesh_order():
    mesh = ss.Mesh({"c": 2, "a": 2, "b": 2}, name="mesh_xy")
    s = parse('<@mesh_xy, [{}], replicated={"a", "c"}>', mesh)
    assert str(s) == '<@mesh_xy, [{}], replicated={"c", "a"}>'


def test_reshape_motivation_sub_axes_keep_data_in_place():
    mesh = ss.Mesh({"x": 4}, name="mesh_x")
    before = ss.layout(parse('<@mesh_x, [{"x"}]>', mesh), (8,))
    after = ss.layout(parse('<@mesh_x, [{"x":(1)2}, {"x":(2)2}]>', mesh), (2, 4))
    for d in mesh.device_ids:
        rows, cols = after.indices(d)
        flat = sorted(int(r) * 4 + int(c) for r in rows for c in cols)
        assert flat == before.indices(d)[0].tolist()


def test_sub_axis_y_2_2_local_2x4():
    mesh = ss.Mesh({"x": 2, "y": 8, "z": 2}, name="mesh_xyz")
    s = parse('<@mesh_xyz, [{"x"}, {"y":(2)2}]>', mesh)
    assert s.dims[1].axes == (AxisRef("y", (2, 2)),)
    assert local_shapes(s, (4, 8)) == {(2, 4)}
    # "y":(2)2 is the middle bit of y = 8 = [2, 2, 2]: y coordinate 2 -> sub-axis index 1.
    assert mesh.axis_index(mesh.device((0, 2, 0)), AxisRef("y", (2, 2))) == 1
    assert mesh.axis_index(mesh.device((0, 4, 0)), AxisRef("y", (2, 2))) == 0


def test_explicitly_replicated_sub_axis():
    mesh = ss.Mesh({"x": 2, "y": 8, "z": 2}, name="mesh_xyz")
    s = parse('<@mesh_xyz, [{"x"}, {"y":(2)2}], replicated={"y":(1)2}>', mesh)
    assert s.replicated == (AxisRef("y", (1, 2)),)
    assert local_shapes(s, (4, 8)) == {(2, 4)}


def test_replicated_sub_axes_sorted_by_pre_size():
    mesh = ss.Mesh({"x": 2, "y": 8}, name="m")
    s = parse('<@m, [{}], replicated={"y":(4)2, "x", "y":(1)2}>', mesh)
    assert str(s) == '<@m, [{}], replicated={"x", "y":(1)2, "y":(4)2}>'


def test_overlapping_sub_axes_are_refused():
    mesh = ss.Mesh({"x": 8}, name="m")
    with pytest.raises(ss.ShardingError) as e:
        parse('<@m, [{"x":(1)4}, {"x":(2)4}]>', mesh)
    assert e.value.rule == "overlapping-sub-axes" and e.value.axis == "x"


@pytest.mark.parametrize("text, merged, where", [
    ('<@m, [{"x":(1)2, "x":(2)4}]>', '"x":(1)8', "dimension 0"),
    ('<@m, [{"x":(1)2, "x":(2)8}]>', '"x"', "dimension 0"),
    ('<@m, [{"y", "x":(4)2, "x":(8)2}]>', '"x":(4)4', "dimension 0"),
    ('<@m, [{}], replicated={"x":(2)8, "x":(1)2}>', '"x"', "replicated"),
    ('<@m, [{}], unreduced={"x":(1)4, "x":(4)4}>', '"x"', "unreduced"),
])
def test_consecutive_sub_axes_are_refused_naming_the_merged_axis(text, merged, where):
    # The seed: "Sub-axes referenced in a tensor sharding must be as big as possible [...]
    # "x":(1)2 and "x":(2)4 [...] can be replaced with a single "x":(1)8."
    mesh = ss.Mesh({"x": 16, "y": 2}, name="m")
    with pytest.raises(ss.ShardingError) as e:
        parse(text, mesh)
    assert e.value.rule == "non-maximal-sub-axes" and e.value.axis == "x"
    assert f"write them as {merged}" in str(e.value) and where in str(e.value)


def test_the_issue_example_is_refused_not_merged():
    with pytest.raises(ss.ShardingError, match=r'"x":\(1\)2 and "x":\(2\)4 .* write them as "x"'):
        ss.Sharding.parse('<@m, [{"x":(1)2, "x":(2)4}]>', {"m": ss.Mesh({"x": 8})})


def test_non_consecutive_or_separated_sub_axes_are_fine():
    mesh = ss.Mesh({"x": 16, "y": 2}, name="m")
    assert str(parse('<@m, [{"x":(1)2, "y", "x":(2)4}]>', mesh)) == '<@m, [{"x":(1)2, "y", "x":(2)4}]>'
    assert str(parse('<@m, [{"x":(1)2}, {"x":(2)4}]>', mesh)) == '<@m, [{"x":(1)2}, {"x":(2)4}]>'
    assert str(parse('<@m, [{"x":(2)4, "x":(1)2}]>', mesh)) == '<@m, [{"x":(2)4, "x":(1)2}]>'


def test_mesh_xy_is_a_split_of_mesh_full():
    full = ss.Mesh({"devices": 8}, name="mesh_full")
    xy = ss.Mesh({"x": 4, "y": 2}, name="mesh_xy")
    a = parse('<@mesh_xy, [{"x"}, {"y"}]>', xy)
    b = parse('<@mesh_full, [{"devices":(1)4}, {"devices":(4)2}]>', full)
    assert ss.equivalent(a, b, (4, 4))
    c = parse('<@mesh_full, [{"devices":(2)4}, {"devices":(1)2}]>', full)
    assert not ss.equivalent(a, c, (4, 4))


def test_multiple_logical_meshes_b_is_z():
    mesh_0 = ss.Mesh({"a": 4, "b": 2}, device_ids=range(8), name="mesh_0")
    mesh_1 = ss.Mesh({"x": 2, "y": 2, "z": 2}, device_ids=range(8), name="mesh_1")
    b = parse('<@mesh_0, [{"b"}]>', mesh_0, mesh_1)
    z = parse('<@mesh_1, [{"z"}]>', mesh_0, mesh_1)
    assert ss.equivalent(b, z, (4,))
    assert not ss.equivalent(b, parse('<@mesh_1, [{"x"}]>', mesh_1), (4,))


def test_meshes_with_different_device_orders_are_different_layouts():
    m = ss.Mesh({"x": 4}, name="m")
    r = ss.Mesh({"x": 4}, device_ids=[3, 2, 1, 0], name="r")
    a, b = parse('<@m, [{"x"}]>', m), parse('<@r, [{"x"}]>', r)
    assert not ss.equivalent(a, b, (8,))
    assert ss.layout(b, (8,)).indices(3)[0].tolist() == [0, 1]


def test_priorities_with_gaps():
    mesh = ss.Mesh({"w": 6, "x": 2, "y": 4, "z": 2}, name="mesh_xy")
    s = parse('<@mesh_xy, [{"x"}p1, {"y"}, {"z",?}p2], replicated={}>', mesh)
    assert [d.priority for d in s.dims] == [1, None, 2]
    assert str(s) == '<@mesh_xy, [{"x"}p1, {"y"}, {"z", ?}p2]>'


def test_priority_on_empty_closed_dim_is_refused():
    mesh = ss.Mesh({"x": 2}, name="m")
    with pytest.raises(ss.ShardingError) as e:
        parse('<@m, [{}p1]>', mesh)
    assert e.value.rule == "priority-on-empty-closed-dim" and e.value.dim == 0
    parse('<@m, [{?}p1]>', mesh)  # open: the priority matters


def test_non_divisible_dims_are_padded():
    mesh = ss.Mesh({"x": 8, "y": 2, "z": 3}, name="mesh_xy")
    s = parse('<@mesh_xy, [{"x"}, {"y"}, {"z"}]>', mesh)
    lay = ss.layout(s, (7, 3, 8))
    assert lay.block_shape == (1, 2, 3)
    assert lay.local_shape(mesh.device((0, 0, 0))) == (1, 2, 3)
    assert lay.local_shape(mesh.device((7, 1, 2))) == (0, 1, 2)
    assert lay.padding(mesh.device((7, 1, 2))) == (1, 1, 1)
    a = np.arange(7 * 3 * 8, dtype=np.float32).reshape(7, 3, 8)
    assert np.array_equal(lay.assemble(lay.shard(a)), a)
