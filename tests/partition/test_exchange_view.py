"""An exchange between strided layouts is planned in the view where blocks are whole
(``exchange_view``): a sequence-first flatten of a batch-sharded array, gathered, is one transfer
per pair of devices rather than one per run, and runs bitwise."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import simshard as ss
from simshard.partition.reshard.exchange import plan_exchange
from simshard.partition.reshard.exchange_view import viewed
from simshard.partition.reshard.plan import ReshardPlan
from simshard.sharding.layout_model import Layout

from .helpers import check_plan


def flattened(mesh: ss.Mesh, seq: int, batch: int, d: int) -> Layout:
    """(seq, batch, d) with batch split over the mesh's first axis (replicated over the rest),
    flattened to (seq * batch, d): each device holds ``seq`` runs of ``batch / n`` rows."""
    axis = mesh.axis_names[0]
    n = mesh.shape[axis]
    per = batch // n
    blocks = {}
    index_map = {}
    for dev in mesh.device_ids:
        i = mesh.axis_index(dev, axis)
        if i not in blocks:
            rows = (np.arange(seq)[:, None] * batch + np.arange(i * per, (i + 1) * per)[None, :]).ravel()
            blocks[i] = (rows, np.arange(d))
        index_map[dev] = blocks[i]
    return Layout(mesh, (seq * batch, d), index_map)


def test_a_strided_block_gathered_is_one_transfer_per_pair():
    mesh = ss.Mesh({"dp": 8, "tp": 2})
    src = flattened(mesh, seq=16, batch=32, d=4)
    dst = ss.Sharding(mesh, (ss.DimSharding(()), ss.DimSharding(())))
    found = viewed(src, ss.layout(dst, src.shape), src.shape)
    assert found is not None and found[2].shape == (16, 32, 4)
    step = plan_exchange(src, dst, src.shape, 4)
    assert step.data.view is not None and len(step.data.rounds) == 7  # 7 peers' blocks, not 7 x 16 runs
    check_plan(ReshardPlan(src, dst, src.shape, np.dtype(np.float32), (step,), dst), np.random.default_rng(0))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([(2,), (4,), (2, 2), (4, 2)]), st.integers(1, 5), st.integers(1, 3), st.integers(1, 3),
       st.sampled_from(["replicated", "rows", "cols"]), st.integers(0, 2**16))
def test_any_strided_layout_moves_bitwise_at_the_bound(sizes, seq, per, d, target, seed):
    mesh = ss.Mesh(dict(zip(("a", "b"), sizes)))
    n = sizes[0]
    src = flattened(mesh, seq, n * per, d)
    rows = {"replicated": (), "rows": ("a",), "cols": ()}[target]
    cols = ("a",) if target == "cols" and d % n == 0 else ()
    dst = ss.Sharding(mesh, (ss.DimSharding(rows), ss.DimSharding(cols)))
    step = plan_exchange(src, dst, src.shape, 4)
    check_plan(ReshardPlan(src, dst, src.shape, np.dtype(np.float32), (step,), dst), np.random.default_rng(seed))


def test_no_view_where_blocks_are_whole_or_no_product():
    mesh = ss.Mesh({"x": 4})
    whole = ss.layout(ss.Sharding(mesh, (ss.DimSharding(("x",)), ss.DimSharding(()))), (8, 2))
    rep = ss.layout(ss.Sharding(mesh, (ss.DimSharding(()), ss.DimSharding(()))), (8, 2))
    assert viewed(whole, rep, (8, 2)) is None  # contiguous blocks: nothing to split
    odd = Layout(mesh, (8, 2), {d: (np.array([d, d + 3]) % 8, np.arange(2)) for d in mesh.device_ids})
    assert viewed(odd, rep, (8, 2)) is None  # runs at no stride dividing 8
