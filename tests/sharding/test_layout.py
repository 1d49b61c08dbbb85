"""Layout: shard / assemble, replica checks, canonical reduction order, equivalence."""

import numpy as np
import pytest

import simshard as ss

MESH = ss.Mesh({"x": 2, "y": 4})


def test_shard_and_assemble_identity_with_padding():
    s = ss.Sharding.parse('<@mesh, [{"y"}, {"x"}]>', MESH)
    lay = ss.layout(s, (7, 3))
    a = np.arange(21, dtype=np.int64).reshape(7, 3)
    shards = lay.shard(a)
    assert {d: sh.shape for d, sh in shards.items()}[MESH.device((1, 3))] == (1, 1)
    assert lay.padding(MESH.device((1, 3))) == (1, 1)
    assert np.array_equal(lay.assemble(shards), a)


def test_assemble_names_the_devices_whose_replicas_disagree():
    s = ss.Sharding.parse('<@mesh, [{"x"}]>', MESH)
    lay = ss.layout(s, (4,))
    shards = lay.shard(np.arange(4.0))
    shards[6] = shards[6].copy()
    shards[6][1] = 99.0
    with pytest.raises(ss.ReplicaMismatchError) as e:
        lay.assemble(shards)
    assert "device 4" in str(e.value) and "device 6" in str(e.value) and "(3,)" in str(e.value)


def test_replica_check_is_bitwise():
    lay = ss.layout(ss.Sharding.parse('<@mesh, [{}]>', MESH), (1,))
    shards = {d: np.array([0.0]) for d in MESH.device_ids}
    shards[3] = np.array([-0.0])  # == 0.0 numerically, different bits
    with pytest.raises(ss.ReplicaMismatchError):
        lay.assemble(shards)


def test_pending_sum_reduces_in_ascending_coordinate_order():
    lay = ss.layout(ss.Sharding.parse('<@mesh, [{}], unreduced={"y"}>', MESH), (1,))
    # With float32 the order of additions changes the result: 1e8 + 1 - 1e8 ...
    vals = [np.float32(1e8), np.float32(1.0), np.float32(-1e8), np.float32(1.0)]
    shards = {d: np.array([vals[MESH.coords(d)[1]]], dtype=np.float32) for d in MESH.device_ids}
    want = np.float32(np.float32(np.float32(vals[0] + vals[1]) + vals[2]) + vals[3])
    assert lay.assemble(shards)[0] == want
    assert lay.reduce_groups() == [(0, 1, 2, 3), (4, 5, 6, 7)]


def test_pending_sum_shard_puts_the_value_on_coordinate_zero():
    lay = ss.layout(ss.Sharding.parse('<@mesh, [{"x"}], unreduced={"y"}>', MESH), (4,))
    shards = lay.shard(np.array([1.0, 2.0, 3.0, 4.0]))
    assert shards[0].tolist() == [1.0, 2.0] and shards[1].tolist() == [0.0, 0.0]
    assert shards[4].tolist() == [3.0, 4.0]


def test_holder_count_and_distinct_blocks():
    lay = ss.layout(ss.Sharding.parse('<@mesh, [{"y"}, {}]>', MESH), (8, 2))
    assert (lay.holder_count() == 2).all()
    assert len(lay.distinct_blocks()) == 4


def test_equivalent_uses_data_not_spelling():
    a = ss.Sharding.parse('<@mesh, [{"x"}, {}]>', MESH)
    b = ss.DTensorSpec(MESH, [ss.Shard(0), ss.Replicate()])
    c = ss.NamedSharding(MESH, ss.P(None, "x"))
    assert ss.equivalent(a, b, (4, 4))
    assert not ss.equivalent(a, c, (4, 4))
    # size-1 dim sharded or not: the same data everywhere
    assert ss.equivalent(ss.NamedSharding(MESH, ss.P("x")), ss.NamedSharding(MESH, ss.P()), (1,)) is False
    assert ss.equivalent(ss.NamedSharding(MESH, ss.P("x")), ss.NamedSharding(MESH, ss.P()), (0,))


def test_equivalent_distinguishes_pending_reductions():
    a = ss.Sharding.parse('<@mesh, [{}], unreduced={"x"}>', MESH)
    b = ss.Sharding.parse('<@mesh, [{}], unreduced={"y"}>', MESH)
    c = ss.Sharding.parse('<@mesh, [{}], unreduced(max)={"x"}>', MESH)
    assert not ss.equivalent(a, b, (2,))
    assert not ss.equivalent(a, c, (2,))
    assert ss.equivalent(a, ss.DTensorSpec(MESH, [ss.Partial(), ss.Replicate()]), (2,))


def test_scalar_layout():
    lay = ss.layout(ss.Sharding.parse("<@mesh, []>", MESH), ())
    shards = lay.shard(np.float64(3.5))
    assert all(s.shape == () for s in shards.values())
    assert lay.assemble(shards) == 3.5


def test_indices_are_read_only():
    lay = ss.layout(ss.Sharding.parse('<@mesh, [{"x"}]>', MESH), (4,))
    with pytest.raises(ValueError):
        lay.indices(0)[0][0] = 3
