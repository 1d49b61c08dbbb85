"""Meshes: axes, device order, coordinates both ways, make_mesh."""

import pytest

import simshard as ss
from simshard import AxisRef


def test_mesh_basics_and_hashability():
    m = ss.Mesh({"x": 2, "y": 4})
    assert m.shape == {"x": 2, "y": 4} and m.size == 8 and m.ndim == 2
    assert m.device_ids == tuple(range(8))
    assert hash(m) == hash(ss.Mesh({"x": 2, "y": 4}))
    assert {m: 1}[ss.Mesh([("x", 2), ("y", 4)])] == 1
    with pytest.raises(Exception):
        m.axis_names = ("a", "b")


def test_coords_round_trip_with_a_permuted_device_order():
    ids = [3, 7, 1, 5, 0, 4, 2, 6]
    m = ss.Mesh({"x": 2, "y": 4}, device_ids=ids)
    for flat, dev in enumerate(ids):
        c = m.coords(dev)
        assert c == (flat // 4, flat % 4)
        assert m.device(c) == dev


def test_sub_axis_index():
    m = ss.Mesh({"y": 8})
    # y = [2, 2, 2]: sub-axis (2)2 is the middle bit
    assert [m.axis_index(d, AxisRef("y", (2, 2))) for d in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert [m.axis_index(d, AxisRef("y", (1, 2))) for d in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_unknown_device_and_coordinate():
    m = ss.Mesh({"x": 2})
    with pytest.raises(ss.ShardingError, match="device 5"):
        m.coords(5)
    with pytest.raises(ss.ShardingError, match="outside"):
        m.device((2,))


def test_make_mesh_infers_one_axis():
    m = ss.make_mesh((2, -1), ("x", "y"), devices=8)
    assert m.shape == {"x": 2, "y": 4}
    assert ss.make_mesh((-1,), ("d",), devices=[3, 2, 1, 0]).device_ids == (3, 2, 1, 0)


def test_make_mesh_over_a_physical_torus():
    m = ss.make_mesh((16, 4), ("data", "model"), physical_shape=(4, 4, 4))
    assert m.shape == {"data": 16, "model": 4}
    # each logical axis is made of whole physical dims: "model" = one physical dim of size 4
    assert sorted(m.device_ids) == list(range(64))


def test_make_mesh_refuses_to_split_physical_dims_unless_asked():
    with pytest.raises(ss.ShardingError) as e:
        ss.make_mesh((8, 8), ("x", "y"), physical_shape=(4, 4, 4))
    assert e.value.rule == "mesh-axis-splitting" and "mesh_axis_splitting=True" in str(e.value)
    m = ss.make_mesh((8, 8), ("x", "y"), physical_shape=(4, 4, 4), mesh_axis_splitting=True)
    assert m.shape == {"x": 8, "y": 8}


def test_make_mesh_physical_assignment_reorders_devices():
    # logical (2, 4) over physical (4, 2): "x"=2 takes physical dim 1, "y"=4 physical dim 0.
    m = ss.make_mesh((2, 4), ("x", "y"), physical_shape=(4, 2))
    assert m.device_ids == (0, 2, 4, 6, 1, 3, 5, 7)


def test_mesh_parse_and_print():
    m = ss.Mesh.parse('@mesh_1 = <["x"=2, "y"=2, "z"=2], device_ids=[0, 1, 2, 3, 4, 5, 6, 7]>')
    assert m.name == "mesh_1" and m.shape == {"x": 2, "y": 2, "z": 2}
    assert str(m) == '@mesh_1 = <["x"=2, "y"=2, "z"=2]>'


@pytest.mark.parametrize("size", [2.5, "2", None, float("nan"), float("inf")])
def test_a_size_that_is_no_whole_number_is_refused_naming_the_axis(size):
    with pytest.raises(ss.ShardingError, match='axis "x" has size') as e:
        ss.Mesh({"y": 2, "x": size})
    assert e.value.axis == "x"
