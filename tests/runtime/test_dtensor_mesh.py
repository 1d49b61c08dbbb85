"""torch's DeviceMesh spellings and ``DTensor.from_local`` in torch's form (issue 27, seed 002)."""

import numpy as np
import pytest

import simshard.dtensor as dt
from simshard.dtensor import DTensor, Replicate, Shard, distribute_tensor, init_device_mesh
from simshard.errors import ShardingError


def mesh2d():
    return init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))


def test_init_device_mesh_names_sizes_and_sub_meshes():
    mesh = mesh2d()
    assert mesh.mesh_dim_names == ("dp", "tp")
    assert mesh.size() == 8 and mesh.size(1) == 4 and mesh.size == 8  # a method, and still the count
    tp = mesh["tp"]
    assert tp.mesh_dim_names == ("tp",) and tp.size() == 4 and tp.ndim == 1
    assert mesh["dp", "tp"].size() == 8
    with pytest.raises(ShardingError, match='axis "pp" does not exist'):
        mesh["pp"]


def test_distribute_on_a_sub_mesh_replicates_over_the_other_axes():
    mesh = mesh2d()
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    d = distribute_tensor(x, mesh["tp"], [Shard(0)])
    assert d.placements == (Replicate(), Shard(0)) and d.device_mesh == mesh
    np.testing.assert_array_equal(d.to_local(1), x[2:4])
    np.testing.assert_array_equal(d.to_local(5), x[2:4])  # dp replica of device 1
    e = d.redistribute(mesh["tp"], [Replicate()])
    np.testing.assert_array_equal(e.to_local(6), x)
    y = distribute_tensor(x, mesh["dp", "tp"], [Shard(0), Shard(1)])
    assert y.placements == (Shard(0), Shard(1))


def test_from_local_this_ranks_shard_under_a_rank_context():
    mesh = mesh2d()
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    with dt.rank(3):
        d = DTensor.from_local(w, mesh, [Replicate(), Replicate()], run_check=True, shape=(2, 3), stride=(3, 1))
        np.testing.assert_array_equal(d.to_local(), w)  # rank 3's shard, as torch's to_local()
        with pytest.raises(ShardingError, match=r"inside rank\(3\) one array is rank 3's shard"):
            DTensor.from_local(w, mesh, [Shard(0), Replicate()])
    np.testing.assert_array_equal(d.full_tensor(), w)


def test_from_local_with_every_ranks_shard_and_its_checks():
    mesh = init_device_mesh("cpu", (4,), mesh_dim_names=("x",))
    blocks = [np.full((2, 3), r, np.float32) for r in range(4)]
    d = DTensor.from_local(blocks, mesh, [Shard(0)], shape=(8, 3), stride=(3, 1))
    assert d.shape == (8, 3)
    with pytest.raises(ShardingError, match="stride"):
        DTensor.from_local(blocks, mesh, [Shard(0)], stride=(1, 8))
    with pytest.raises(ShardingError, match="run_check: device 1 and device 0 are replicas"):
        DTensor.from_local(blocks, mesh, [Replicate()], run_check=True)


def test_one_array_shaped_like_a_stack_of_shards_is_named_as_that_mistake():
    """A (4, 3) array on a 4-device mesh is not four shards of (3,)."""
    mesh = init_device_mesh("cpu", (4,), mesh_dim_names=("x",))
    with pytest.raises(ShardingError, match=r"one array of shape \(4, 3\) where every device's shard was expected"):
        DTensor.from_local(np.ones((4, 3), np.float32), mesh, [Shard(0)])
