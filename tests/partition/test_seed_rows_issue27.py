"""Seed rows of issue 27 that the partitioner answers, each shown on a run."""

from __future__ import annotations

import numpy as np

import simshard as ss


def test_seed000_a_reshape_splitting_a_sharded_dim_into_sub_axes_moves_nothing():
    """Shardy's motivating example: (8,) over "x"=4 reshaped to (2, 4) as [{"x":(1)2}, {"x":(2)2}]
    keeps every element where it is (the operand's "x" is the two sub-axes, merged)."""
    mesh = ss.Mesh({"x": 4})
    x = np.arange(8, dtype=np.float32)
    res = ss.run(lambda a: a.reshape(2, 4), x, mesh=mesh, in_shardings=('<@mesh, [{"x"}]>',),
                 out_shardings='<@mesh, [{"x":(1)2}, {"x":(2)2}]>', backend="local")
    assert res.comm.total_bytes == 0 and res.verify.ok
    np.testing.assert_array_equal(res.outputs, x.reshape(2, 4))
    for d in range(4):
        np.testing.assert_array_equal(res.shards(d)[0], x[2 * d:2 * d + 2].reshape(1, 2))


def test_seed003_a_program_run_may_end_on_a_mesh_over_fewer_of_its_devices():
    """[8][4x4] on 8 ciphertexts, doubled, ends as [4][2x4x4] on the first 4 (the seed's
    [64][112x112] on 64 -> [32][2x112x112] on 32, scaled down): the planner's exchange moves
    1 + 3 * 2 channel blocks of 64 B, and devices 4..7 end holding nothing."""
    m8, m4 = ss.Mesh({"y": 8}, name="m8"), ss.Mesh({"y": 4}, name="m4")
    x = np.arange(8 * 4 * 4, dtype=np.float32).reshape(8, 4, 4)
    res = ss.run(lambda a: a * 2, x, mesh=m8, in_shardings=(ss.NamedSharding(m8, ss.P("y", None, None)),),
                 out_shardings=ss.NamedSharding(m4, ss.P("y", None, None)), backend="local")
    assert res.verify.ok and res.comm.total_bytes == 7 * 64
    np.testing.assert_array_equal(res.outputs, x * 2)
    for d in range(4):
        np.testing.assert_array_equal(res.shards(d)[0], x[2 * d:2 * d + 2] * 2)


def test_seed002_a_flattened_replicate_shard_value_keeps_its_strided_layout():
    """(Replicate, Shard(1)) of (4, 8, 6) flattened to (32, 6): no tensor-dim sharding states
    the result (its merged dim is sharded over the minor factor), so propagation alone would
    gather it; the output takes DTensor's strided placements instead and nothing moves."""
    mesh = ss.Mesh({"dp": 2, "tp": 4})
    x = np.arange(4 * 8 * 6, dtype=np.float32).reshape(4, 8, 6)
    spec = ss.DTensorSpec(mesh, [ss.Replicate(), ss.Shard(1)])
    res = ss.run(lambda a: a.reshape(32, 6), x, mesh=mesh, in_shardings=(spec,), backend="local")
    assert res.comm.total_bytes == 0 and res.verify.ok
    np.testing.assert_array_equal(res.outputs, x.reshape(32, 6))
    assert res.program.out_shardings[0] == ss.DTensorSpec(mesh, [ss.Replicate(), ss.StridedShard(0, 4)])
    for d, t in ((0, 0), (5, 1)):  # device (dp, tp) holds rows b*8 + 2t, b*8 + 2t + 1 of every b
        rows = [b * 8 + 2 * t + i for b in range(4) for i in range(2)]
        np.testing.assert_array_equal(np.sort(res.shards(d)[0][:, 0]), np.sort(x.reshape(32, 6)[rows, 0]))


def test_seed002_a_flatten_propagation_can_state_is_left_alone():
    from simshard.propagate.strided import strided_output

    mesh = ss.Mesh({"x": 2})
    x = np.arange(4 * 8, dtype=np.float32).reshape(4, 8)
    res = ss.run(lambda a: a.reshape(32), x, mesh=mesh, in_shardings=(ss.P("x", None),), backend="local")
    assert res.comm.total_bytes == 0 and strided_output(res.program, 0) is None


def test_seed002_the_ops_after_the_flatten_keep_its_strided_layout():
    """The seed's point: the flattened (batch, seq) feeds a matmul. Each device multiplies its own
    rows (0 B, was 4,608 B), and a following sum over the flat dim is only the all-reduce of
    partial sums (more in tests/partition/test_strided_flatten.py)."""
    mesh = ss.Mesh({"dp": 2, "tp": 4})
    x = np.arange(4 * 8 * 6, dtype=np.float32).reshape(4, 8, 6)
    w = np.arange(30, dtype=np.float32).reshape(6, 5)
    specs = ([ss.Replicate(), ss.Shard(1)], [ss.Replicate(), ss.Replicate()])
    mm = ss.run(lambda x, w: x.reshape(-1, 6) @ w, x, w, in_shardings=specs, mesh=mesh, backend="local")
    assert mm.comm.total_bytes == 0 and mm.verify.bitwise
    np.testing.assert_array_equal(mm.outputs, x.reshape(-1, 6) @ w)
    summed = ss.run(lambda x, w: (x.reshape(-1, 6) @ w).sum(0), x, w, in_shardings=specs, mesh=mesh, backend="local")
    assert summed.verify.bitwise and {r.kind for r in summed.comm.records} == {"all_reduce"}
    np.testing.assert_array_equal(summed.outputs, (x.reshape(-1, 6) @ w).sum(0))
