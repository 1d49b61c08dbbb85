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
