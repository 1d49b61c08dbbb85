"""The exchange: every device receives exactly what it lacks, in as many rounds as the busiest device
has transfers, and pending contributions only ever move between devices holding the same one."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import simshard as ss
from simshard.sharding.axes import merge_adjacent
from simshard.partition.reshard.exchange import plan_exchange
from simshard.partition.reshard.deferred import Deferred
from simshard.partition.reshard.plan import ReshardPlan, layout_of
from simshard.partition.reshard.rounds import edge_colouring as _edge_colouring
from simshard.partition.reshard.rounds import path_colouring, shift_colouring

from .helpers import check_plan, meshes, shardings


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), max_size=60))
def test_edge_colouring_uses_max_degree_rounds(edges):
    for colouring in (_edge_colouring, path_colouring):  # by shifts where they reach it, and by paths always
        _assert_proper_with_max_degree(edges, colouring(edges))


def _assert_proper_with_max_degree(edges, colours):
    degree = max(max(np.bincount([s for s, _ in edges])), max(np.bincount([t for _, t in edges]))) if edges else 0
    assert max(colours, default=-1) + 1 == degree
    ends = {(side, e[side], c) for e, c in zip(edges, colours) for side in (0, 1)}
    assert len(ends) == 2 * len(edges)  # no device sends (or receives) twice in a round


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), min_size=1, max_size=60))
def test_the_colouring_by_shifts_is_proper_and_optimal_where_it_answers(edges):
    colours = shift_colouring(edges)
    if colours is not None:
        _assert_proper_with_max_degree(edges, colours)


@settings(max_examples=50, deadline=None)
@given(st.integers(2, 6), st.integers(1, 4), st.integers(1, 3), st.data())
def test_shifts_colour_every_group_gathering_stripes(groups, size, cells, data):
    """Devices in ``groups`` groups of ``size`` (strided, as a minor mesh axis makes them), each
    receiving ``cells`` stripes from every other member of its group: a shift per distance in the
    group, so the shifts reach the largest degree; the pairs listed in any order."""
    edges = [(g + groups * i, g + groups * j) for g in range(groups) for i in range(size) for j in range(size)
             if i != j for _ in range(cells)] or [(0, 1)]
    edges = data.draw(st.permutations(edges))
    colours = shift_colouring(edges)
    assert colours is not None
    _assert_proper_with_max_degree(edges, colours)


def draw_forced_exchange(data):
    """Two layouts of one shape that only an exchange moves between: the target keeps the
    source's pending reductions and uses none of their axes."""
    mesh = data.draw(meshes())
    rank = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.sampled_from([1, 3, 4, 5, 8])) for _ in range(rank))
    src = data.draw(shardings(mesh, rank, reduce_op="sum"))
    dst = data.draw(shardings(mesh, rank, pending=False))
    kept = [[a for a in d.axes if all(a.name != u.name for u in src.unreduced)] for d in dst.dims]
    dst = ss.Sharding(mesh, tuple(merge_adjacent(d, mesh.shape) for d in kept),
                      unreduced=src.unreduced, reduce_op=src.reduce_op)
    return src, dst, shape


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_exchange_alone_moves_any_layout(data):
    """Forced exchanges (pending reductions carried along unchanged) are exact and at the bound."""
    src, dst, shape = draw_forced_exchange(data)
    step = plan_exchange(src, dst, shape, 4)
    plan = ReshardPlan(src, dst, shape, np.dtype(np.float32), (step,), dst)
    check_plan(plan, np.random.default_rng(0))
    rounds = step.data.rounds
    for rnd in rounds:
        sources = rnd.sources.tolist()
        assert len(sources) == len(set(sources))


def test_dtensor_uneven_nested_layouts_plan_on_layouts():
    """10 rows over (2, 4) nested (2,2,1,0 | 2,2,1,0): no sharding says it; reduce-scatter over the
    reduce groups lands exactly there."""
    mesh = ss.Mesh({"dp": 2, "tp": 4})
    src = ss.DTensorSpec(mesh, [ss.Partial(), ss.Partial()])
    dst = ss.DTensorSpec(mesh, [ss.Shard(0), ss.Shard(0)])
    plan = ss.plan_reshard(src, dst, (10, 4))
    assert [s.kind for s in plan.steps] == ["reduce_scatter"]
    check_plan(plan, np.random.default_rng(0))
    back = ss.plan_reshard(dst, ss.DTensorSpec(mesh, [ss.Replicate(), ss.Replicate()]), (10, 4))
    assert back.bytes == sum(10 * 4 * 4 - ss.layout(dst, (10, 4)).local_shape(d)[0] * 16 for d in mesh.device_ids)
    check_plan(back, np.random.default_rng(1))


def test_a_cell_few_devices_hold_is_passed_on_by_its_receivers():
    """4 elements over a (4, 4) mesh's 16 devices sit on the first four; each row of the mesh
    wants one of them (dim sharded over x alone): elements 1-3 are each wanted by 4 devices that
    lack them. Sent straight from their holders that takes 4 rounds; a device that has received
    its element passes it on, so copies go 1 -> 2 -> 4 -> 8 and 3 rounds serve 4 devices, each
    still receiving only what it lacks."""
    mesh = ss.Mesh({"x": 4, "y": 4})
    src = ss.Sharding(mesh, (ss.DimSharding(("x", "y")),))
    dst = ss.Sharding(mesh, (ss.DimSharding(("x",)),))
    step = plan_exchange(src, dst, (4,), 4)
    assert len(step.data.rounds) == 3
    relayed = [t for rnd in step.data.rounds for t, r in zip(rnd.targets.tolist(), rnd.relayed) if r]
    assert relayed, "no receiver passed its element on"
    assert step.bytes == step.minimum_bytes == 4 * (16 - 1)
    check_plan(ReshardPlan(src, dst, (4,), np.dtype(np.float32), (step,), dst), np.random.default_rng(0))


def test_a_relayed_exchange_runs_bitwise_along_with_the_rest_of_a_block():
    """The same pattern on a 2-D block, where each device keeps part of its new block and relays
    forward cells they assemble among others."""
    mesh = ss.Mesh({"x": 2, "y": 4})
    src = ss.Sharding(mesh, (ss.DimSharding(("x", "y")), ss.DimSharding(())))
    dst = ss.Sharding(mesh, (ss.DimSharding(("x",)), ss.DimSharding(())))
    step = plan_exchange(src, dst, (4, 3), 4)
    assert any(rnd.relayed.any() for rnd in step.data.rounds)
    check_plan(ReshardPlan(src, dst, (4, 3), np.dtype(np.float32), (step,), dst), np.random.default_rng(1))


def test_a_rounds_cuts_are_one_instruction_whose_source_and_positions_vary():
    """The relayed broadcast above, emitted: each round's cut is one Slice whose source (the
    device's own block, or for a relay the block it assembles) and positions are Varying (as a
    write offset's Literal value is where offsets differ); the 16 devices stay one class, and each
    device's own list names plain buffers and positions (the bits: the test above)."""
    from simshard.partition.builder import ScheduleBuilder
    from simshard.partition.emit import emit_step
    from simshard.spmd import Varying

    mesh = ss.Mesh({"x": 4, "y": 4})
    src = ss.Sharding(mesh, (ss.DimSharding(("x", "y")),))
    dst = ss.Sharding(mesh, (ss.DimSharding(("x",)),))
    step = plan_exchange(src, dst, (4,), 4)
    b = ScheduleBuilder(range(16))
    first = b.buf()
    out = emit_step(step, b, first, np.dtype(np.float32))
    scheds = b.finish([first], [out])
    assert len({s.instrs.device_class for s in scheds}) == 1
    shared = [scheds[0].instrs.shared(i) for i in range(len(scheds[0].instrs))]
    varying = {(i.kind, n) for i in shared for n in ("src", "index", "value") if isinstance(getattr(i, n, None), Varying)}
    assert {("slice", "src"), ("slice", "index")} <= varying
    for s in scheds:
        for i in s.instrs:
            assert not any(isinstance(getattr(i, n, None), Varying) for n in ("src", "index", "value")), (s.device, i)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_deferred_exchange_is_the_exchange_planned_now(data):
    """Between shardings the exchange's rounds are planned on first use; the bytes known before
    (each device receives what it lacks) and everything planned after equal the exchange planned
    at once on the same layouts (``Layout``s are planned eagerly)."""
    src, dst, shape = draw_forced_exchange(data)
    deferred = plan_exchange(src, dst, shape, 4)
    now = plan_exchange(layout_of(src, shape), layout_of(dst, shape), shape, 4)
    assert not isinstance(now.data, Deferred) and isinstance(deferred.data, Deferred)
    assert deferred.received == now.received and deferred.minimum == now.minimum  # before planning
    # counted from the transfers' sources, before any colouring: what the search's prices read
    assert dict(deferred.sent) == now.sent
    assert deferred.round_count == len(now.rounds) == now.round_count
    assert deferred.pair_devices == tuple(sorted({d for rnd in now.rounds for pair in rnd for d in pair}))
    relayed = any(bool(r.relayed.any()) for r in now.data.rounds)
    assert relayed or "planned" not in vars(deferred.data)  # relays are counted off the planned rounds
    assert deferred.rounds == now.rounds
    assert deferred.data.shapes == now.data.shapes and deferred.data.rank == now.data.rank
    assert repr(deferred.data.local) == repr(now.data.local)
    for a, b in zip(deferred.data.rounds, now.data.rounds):
        assert a.pieces == b.pieces and all(np.array_equal(x, y) for x, y in
                                            zip((a.sources, a.targets, a.piece, a.starts, a.sizes), (b.sources, b.targets, b.piece, b.starts, b.sizes)))


def test_pricing_an_exchange_plans_no_rounds():
    """A reshard moving both axes of a 64 x 128 mesh onto one dim is priced (bytes per device,
    what the partitioner compares) without planning its ~67 million transfers."""
    mesh = ss.Mesh({"x": 64, "y": 128})
    spec = lambda *dims: ss.Sharding(mesh, tuple(ss.DimSharding(d) for d in dims))
    step = plan_exchange(spec(("y",), ("x",), ()), spec((), (), ("x", "y")), (512, 256, 8192), 4)
    # blocks [4, 4, 8192] before and [512, 256, 1] after: 4 x 4 x 1 elements kept
    assert step.received == {d: (4 * 4 * 8192 - 4 * 4) * 4 for d in range(8192)}
    assert "planned" not in vars(step.data)


def test_an_exchange_is_timed_without_colouring_its_rounds():
    """The search times an exchange as the estimate times its rounds (``autoshard.costs``): bytes
    sent, rounds, the devices they name. These come from the transfers' sources; the colouring
    (the rounds themselves) is left for emission. On 4 x 4 devices, moving both axes onto one dim,
    and on a relayed exchange (a broadcast), the prices equal those of the exchange planned now."""
    from simshard.autoshard.collectives import collective_seconds
    from simshard.autoshard.costs import step_collectives

    topology = ss.Topology({}, "nvlink", device="h100")
    mesh = ss.Mesh({"x": 4, "y": 4})
    spec = lambda *dims: ss.Sharding(mesh, tuple(ss.DimSharding(d) for d in dims))
    for src, dst, shape in ((spec(("y",), ("x",), ()), spec((), (), ("x", "y")), (8, 8, 32)),
                            (spec(("x", "y")), spec(("x",)), (4,))):  # relayed (above)
        deferred = plan_exchange(src, dst, shape, 4)
        now = plan_exchange(layout_of(src, shape), layout_of(dst, shape), shape, 4)
        axes = tuple(mesh.axis_names)
        priced = step_collectives(deferred, axes, 1.0, topology, 4)
        relayed = any(bool(r.relayed.any()) for r in now.data.rounds)
        assert relayed == (len(shape) == 1) and (relayed or "planned" not in vars(deferred.data))
        assert priced == step_collectives(now, axes, 1.0, topology, 4)
        assert collective_seconds(topology, priced) > 0
