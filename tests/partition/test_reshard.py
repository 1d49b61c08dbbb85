"""The reshard planner, checked by execution: random pairs of shardings on 1-, 2- and 3-axis
meshes (uneven shapes, sub-axes, pending reductions, permuted device orders, two meshes over the
same devices) move the data bit for bit, and every step moves exactly its analytic minimum."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simshard as ss
from simshard import Mesh
from simshard.partition.reshard import plan_reshard

from .helpers import check_plan, meshes, reshard_cases, shapes, shardings

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(reshard_cases(ops=("sum", "max", "avg", "min", "prod")))
def test_random_reshards_move_data_exactly(case):
    _, shape, src, dst = case
    plan = plan_reshard(src, dst, shape)
    check_plan(plan, np.random.default_rng(0))
    assert plan.bytes <= (plan.alternatives.get("structured") or plan.bytes) + sum(
        s.bytes for s in plan.steps if s.kind in ("reduce_scatter", "all_reduce"))


@SETTINGS
@given(st.data())
def test_random_reshards_across_meshes(data):
    """Two logical meshes over the same devices: different axes and / or device orders."""
    m1 = data.draw(meshes(name="a"), label="mesh a")
    n = m1.size
    shapes2 = [s for s in ([n], [2, n // 2] if n % 2 == 0 else [n], [n // 2, 2] if n % 2 == 0 else [n]) if np.prod(s) == n]
    sizes = data.draw(st.sampled_from(shapes2), label="mesh b sizes")
    ids = data.draw(st.permutations(list(range(n))), label="mesh b order") if data.draw(st.booleans()) else list(m1.device_ids)
    m2 = Mesh(list(zip(["p", "q"], sizes)), ids, name="b")
    rank = data.draw(st.integers(1, 2), label="rank")
    shape = data.draw(shapes(rank), label="shape")
    op = data.draw(st.sampled_from(["sum", "max"]), label="op")
    src = data.draw(shardings(m1, rank, reduce_op=op), label="src")
    dst = data.draw(shardings(m2, rank, reduce_op=op), label="dst")
    plan = plan_reshard(src, dst, shape)
    check_plan(plan, np.random.default_rng(1))


def _p(mesh, *spec, unreduced=()):
    return ss.NamedSharding(mesh, ss.P(*spec, unreduced=unreduced)).to_sharding(len(spec))


MESH = Mesh({"x": 2, "y": 4})


@pytest.mark.parametrize(
    "src, dst, kinds",
    [
        ((("x", None)), ((None, None)), ["all_gather"]),
        (((None, "x")), (("x", None)), ["all_to_all"]),
        (((("x", "y"), None)), ((("y", "x"), None)), ["collective_permute"]),
        (((None, "y")), (("x", None)), ["slice", "all_gather"]),
        (((None, None)), (("x", "y")), ["slice"]),
    ],
)
def test_familiar_reshards_pick_the_familiar_collective(src, dst, kinds):
    plan = plan_reshard(_p(MESH, *src), _p(MESH, *dst), (64, 128))
    assert [s.kind for s in plan.steps] == kinds
    check_plan(plan, np.random.default_rng(0))


def test_partial_to_sharded_is_one_reduce_scatter():
    plan = plan_reshard(_p(MESH, "x", None, unreduced=("y",)), _p(MESH, "x", "y"), (64, 128))
    assert [s.kind for s in plan.steps] == ["reduce_scatter"]
    assert plan.bytes == 8 * 3 * (32 * 32 * 4)  # each device receives 3 contributions to its 32x32 chunk
    check_plan(plan, np.random.default_rng(0))


def test_partial_to_replicated_slices_before_reducing():
    """XLA slices rows locally before the all-reduce when the target shards them."""
    plan = plan_reshard(_p(MESH, None, None, unreduced=("y",)), _p(MESH, "x", None), (64, 256))
    assert [s.kind for s in plan.steps] == ["slice", "all_reduce"]
    check_plan(plan, np.random.default_rng(0))


def test_uneven_rows_are_exact():
    m = Mesh({"x": 8})
    plan = plan_reshard(_p(m, "x", None), _p(m, None, None), (12, 64))
    check_plan(plan, np.random.default_rng(0))
    assert plan.bytes == sum(12 * 64 * 4 - len(ix[0]) * 64 * 4 for ix in ss.layout(_p(m, "x", None), (12, 64)).index_map.values())


def test_device_order_only_change_is_one_permute():
    a = Mesh({"x": 2, "y": 4}, name="a")
    b = Mesh({"x": 2, "y": 4}, [4, 5, 6, 7, 0, 1, 2, 3], name="b")
    plan = plan_reshard(_p(a, "x", "y"), _p(b, "x", "y"), (8, 8))
    assert [s.collective for s in plan.steps] == ["collective_permute"]
    check_plan(plan, np.random.default_rng(0))
    # replicated data needs nothing whatever the order
    assert plan_reshard(_p(a, None, None), _p(b, None, None), (8, 8)).steps == ()


def test_meshes_with_different_axes_reuse_the_devices():
    a = Mesh({"x": 8}, name="a")
    b = Mesh({"p": 2, "q": 4}, name="b")
    plan = plan_reshard(_p(a, "x", None), _p(b, ("p", "q"), None), (16, 4))
    assert plan.steps == ()  # the same layout
    plan = plan_reshard(_p(a, "x", None), _p(b, "p", None), (16, 4))
    assert [s.kind for s in plan.steps] == ["all_gather"]
    check_plan(plan, np.random.default_rng(0))


def test_exported_from_simshard():
    assert ss.plan_reshard is plan_reshard


def test_reduce_scatter_combines_in_canonical_order_even_when_the_target_dim_lists_axes_otherwise():
    """Pending over (x, y) scattered onto a dim sharded {"y", "x"}: chunks follow y-major order,
    but contributions still add in ascending mesh coordinate, the order Layout.assemble uses."""
    import numpy as np

    import simshard as ss
    from tests.partition.helpers import execute_plan

    mesh = ss.Mesh({"x": 2, "y": 2})
    src = ss.Sharding.parse('<@mesh, [{}], unreduced={"x", "y"}>', mesh)
    dst = ss.Sharding.parse('<@mesh, [{"y", "x"}]>', mesh)
    plan = ss.plan_reshard(src, dst, (4,))
    (step,) = plan.steps
    assert step.kind == "reduce_scatter" and step.groups == ((0, 2, 1, 3),)
    # float32 values where the order of additions changes the bits
    vals = {0: 1e8, 1: 1.0, 2: -1e8, 3: 1.0}
    shards = {d: np.full(4, vals[d], dtype=np.float32) for d in mesh.device_ids}
    out, _, _ = execute_plan(plan, shards)
    canonical = ss.layout(src, (4,)).assemble(shards)  # ((1e8 + 1) - 1e8) + 1 = 1
    other = np.float32(np.float32(np.float32(1e8) + np.float32(-1e8)) + np.float32(1.0)) + np.float32(1.0)  # group order: 2
    assert canonical[0] != other
    got = ss.layout(dst, (4,)).assemble(out)
    assert np.array_equal(got.view(np.uint32), canonical.view(np.uint32))
