"""torch's per-rank DTensor code run for every rank by one controller (``run_per_rank``): each
rank hands ``from_local`` its own shard, the ranks meet at every DTensor call, each op runs once,
and ranks that do not make the same calls are named instead of waited on."""

from __future__ import annotations

import numpy as np
import pytest

from simshard.dtensor import DTensor, Partial, Replicate, Shard, current_rank, init_device_mesh, run_per_rank
from simshard.errors import ShardingError
from simshard.runtime.eager import call as eager_call
from simshard.runtime.eager.rendezvous import RendezvousError

X = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
W = np.arange(16, dtype=np.float32).reshape(4, 4) % 3  # small integers: every sum exact


def test_each_rank_gives_its_own_shard_and_the_ops_run_once(monkeypatch):
    mesh = init_device_mesh("cpu", (4,), mesh_dim_names=("tp",))
    compiled = []
    real = eager_call.compiled_for
    monkeypatch.setattr(eager_call, "compiled_for", lambda *a, **k: compiled.append(1) or real(*a, **k))
    shards = np.split(X, 4)

    def step():
        d = DTensor.from_local(shards[current_rank()], mesh, [Shard(0)])
        w = DTensor.from_local(W, mesh, [Replicate()])
        y = (d @ w).sum()
        return d.to_local(), y.full_tensor(), tuple(y.placements)

    out = run_per_rank(step, mesh)
    assert len(compiled) == 2  # the matmul and the sum, once each for the four ranks
    for r, (mine, total, placements) in enumerate(out):
        assert np.array_equal(mine, shards[r])
        assert total == (X @ W).sum()
        assert placements == (Partial("sum"),)
    everyone = DTensor.from_local(shards, mesh, [Shard(0)])  # the controller's form gives the same DTensor
    assert np.array_equal(everyone.full_tensor(), X)


def test_a_two_dimensional_mesh_with_both_dims_sharded():
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    blocks = {r: X[4 * (r // 2):4 * (r // 2) + 4, 2 * (r % 2):2 * (r % 2) + 2] for r in range(4)}
    out = run_per_rank(lambda: DTensor.from_local(blocks[current_rank()], mesh, [Shard(0), Shard(1)]).full_tensor(), mesh)
    assert all(np.array_equal(o, X) for o in out)


def test_a_rank_that_skips_a_call_is_named():
    mesh = init_device_mesh("cpu", (4,))

    def uneven():
        d = DTensor.from_local(np.ones((2, 4), np.float32), mesh, [Shard(0)])
        return None if current_rank() == 2 else (d * 2).sum()

    with pytest.raises(RendezvousError, match=r"ranks \[2\] finished without DTensor call #2"):
        run_per_rank(uneven, mesh, timeout=30)


def test_a_rank_that_raises_ends_every_rank_with_its_error():
    mesh = init_device_mesh("cpu", (4,))

    def failing():
        if current_rank() == 1:
            raise ValueError("rank one's own mistake")
        return DTensor.from_local(np.ones((2, 4), np.float32), mesh, [Shard(0)])

    with pytest.raises(ValueError, match="rank one's own mistake"):
        run_per_rank(failing, mesh, timeout=30)


def test_one_rank_alone_still_names_what_it_lacks():
    mesh = init_device_mesh("cpu", (4,))
    from simshard.dtensor import rank

    with rank(0), pytest.raises(ShardingError, match="run_per_rank"):
        DTensor.from_local(np.ones((2, 4), np.float32), mesh, [Shard(0)])
