"""Resharding onto a mesh over fewer of the source's devices (the FHE seed's fewer ciphertexts:
[64][112x112] on 64 -> [32][2x112x112] on 32), scaled down, run bit for bit with its bytes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simshard as ss
from simshard import Mesh
from simshard.errors import ShardingError
from simshard.partition.reshard.plan import layout_of
from simshard.partition.reshard import plan_reshard

from .helpers import check_plan, execute_plan, meshes, shardings

F32 = 4


def test_eight_ciphertexts_onto_four():
    """[8][4x4] on 8 devices -> [4][2x4x4] on devices 0..3: device j keeps channel j where it
    is one of its two (only device 0: channel 0), and receives the others; devices 4..7 end empty.
    1 + 2 + 2 + 2 = 7 channel blocks of 4x4 float32."""
    m8, m4 = Mesh({"c": 8}, name="m8"), Mesh({"c": 4}, name="m4")
    src = ss.NamedSharding(m8, ss.P("c", None, None))
    dst = ss.NamedSharding(m4, ss.P("c", None, None))
    plan = plan_reshard(src, dst, (8, 4, 4))
    block = 4 * 4 * F32
    assert plan.collectives and set(plan.collectives) == {"collective_permute"}
    assert [plan.bytes_received(d) for d in range(8)] == [block, 2 * block, 2 * block, 2 * block, 0, 0, 0, 0]
    assert plan.bytes == plan.minimum_bytes == 7 * block == 448
    check_plan(plan, np.random.default_rng(0))
    # the idle devices hold nothing; the others hold their two channels
    L = layout_of(src, (8, 4, 4))
    x = np.arange(8 * 4 * 4, dtype=np.float32).reshape(8, 4, 4)
    out, _, _ = execute_plan(plan, L.shard(x), executor="both")
    for d in range(4):
        assert np.array_equal(out[d], x[2 * d:2 * d + 2])
    assert all(out[d].size == 0 for d in range(4, 8))


def test_a_replicated_source_needs_no_bytes_and_a_pending_one_is_reduced_first():
    m8, m4 = Mesh({"c": 8}, name="m8"), Mesh({"c": 4}, name="m4")
    dst = ss.NamedSharding(m4, ss.P("c", None))
    plan = plan_reshard(ss.NamedSharding(m8, ss.P()), dst, (8, 4))
    assert plan.bytes == 0
    check_plan(plan, np.random.default_rng(1))
    pending = ss.NamedSharding(m8, ss.P(None, None, unreduced=("c",)))
    plan = plan_reshard(pending, dst, (8, 4))
    assert plan.collectives[0] == "all_reduce"
    check_plan(plan, np.random.default_rng(2))


def test_devices_outside_the_source_are_refused_by_name():
    m4, m8 = Mesh({"c": 4}, name="m4"), Mesh({"c": 8}, name="m8")
    with pytest.raises(ShardingError, match=r"target's devices \[4\.\.7\] are not among the source's"):
        plan_reshard(ss.NamedSharding(m4, ss.P("c")), ss.NamedSharding(m8, ss.P("c")), (8,))


def test_a_pending_target_on_fewer_devices_is_refused():
    m8, m4 = Mesh({"c": 8}, name="m8"), Mesh({"c": 4}, name="m4")
    with pytest.raises(ShardingError, match="pending reduction"):
        plan_reshard(ss.NamedSharding(m8, ss.P("c")), ss.NamedSharding(m4, ss.P(None, unreduced=("c",))), (8,))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_random_reshards_onto_fewer_devices(data):
    """Any sharding on a mesh, any sharding on a mesh over its first k devices (some order):
    bitwise, and every target device receives exactly the elements of its block it lacks."""
    m1 = data.draw(meshes(name="a"), label="source mesh")
    k = data.draw(st.integers(1, m1.size), label="target devices")
    if k == m1.size:
        k = max(1, m1.size // 2)
    ids = data.draw(st.permutations(list(range(k))), label="target order")
    sizes = [k] if k < 4 or data.draw(st.booleans()) else [2, k // 2] if k % 2 == 0 else [k]
    m2 = Mesh(list(zip(["p", "q"], sizes)), ids, name="b")
    rank = data.draw(st.integers(1, 2), label="rank")
    shape = tuple(data.draw(st.sampled_from([1, 2, 3, 4, 5, 8])) for _ in range(rank))
    src = data.draw(shardings(m1, rank, reduce_op="sum"), label="src")
    dst = data.draw(shardings(m2, rank, pending=False), label="dst")
    plan = plan_reshard(src, dst, shape)
    check_plan(plan, np.random.default_rng(3))
    LS, LT = layout_of(src, shape), layout_of(dst, shape)
    if not LS.unreduced:  # what each target device lacks, by the index sets
        for d in m2.device_ids:
            held = math.prod(len(np.intersect1d(a, b)) for a, b in zip(LT.index_map[d], LS.index_map[d]))
            assert plan.bytes_received(d) == (math.prod(map(len, LT.index_map[d])) - held) * F32
        assert all(plan.bytes_received(d) == 0 for d in m1.device_ids if d not in m2.device_ids)
