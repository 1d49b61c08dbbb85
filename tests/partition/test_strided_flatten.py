"""Seed 002 (issue 27): a (Replicate, Shard(1)) value of shape (B, S, H) flattened to (B*S, H) for
a matmul keeps DTensor's strided layout (``_StridedShard(0, B)``) through the ops after the
flatten that treat the flat dim as a batch dim, so they move nothing; a sum over the flat dim is
a partial sum over the sharding axis, combined by an all-reduce (the bytes of the same sum on
the unflattened value). Every run is bitwise on exact-integer inputs."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import simshard as ss
from simshard.sharding.layout import layout


def ints(shape, seed):
    return np.random.default_rng(seed).integers(-4, 5, size=shape).astype(np.float32)


@st.composite
def cases(draw):
    """A mesh whose "tp" axis shards the minor factor S of the flattened dims (evenly or not),
    the major factors (one or two dims, B in all) unsharded: x of shape (*lead, S, H)."""
    dp, tp = draw(st.integers(1, 2)), draw(st.integers(2, 4))
    lead = tuple(draw(st.lists(st.integers(2, 3), min_size=1, max_size=2)))
    s, h, n = draw(st.sampled_from([tp, 2 * tp, tp + 1])), draw(st.integers(1, 4)), draw(st.integers(1, 3))
    return ss.Mesh({"dp": dp, "tp": tp}), lead + (s, h), n, draw(st.integers(0, 99))


def shardings(rank, dtensor, mesh):
    """(Replicate, Shard(S)) for x and replicated w, as placement lists or DTensorSpecs."""
    specs = ([ss.Replicate(), ss.Shard(rank - 2)], [ss.Replicate(), ss.Replicate()])
    return tuple(ss.DTensorSpec(mesh, p) for p in specs) if dtensor else specs


def run(f, args, mesh, specs):
    res = ss.run(f, *args, in_shardings=specs, mesh=mesh, backend="local")
    assert res.verify.ok and res.verify.bitwise, res.verify
    np.testing.assert_array_equal(np.asarray(res.outputs), f(*args))
    return res


def flat_layout_of(res, shape):
    """The layout the partitioner holds the flattened value in right after the reshape."""
    cp = next(c for c in res.spmd.checkpoints if c.source.endswith("reshape"))
    return layout(cp.sharding, shape)


PROGRAMS = {  # what follows the flatten: each treats the flat dim as a batch dim
    "matmul": lambda x, w: x.reshape(-1, x.shape[-1]) @ w,
    "elementwise": lambda x, w: (x.reshape(-1, x.shape[-1]) * 2 + 1) * x.reshape(-1, x.shape[-1]),
    "sum_over_h": lambda x, w: (x.reshape(-1, x.shape[-1]) @ w).sum(1),
}


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.sampled_from(sorted(PROGRAMS)), st.booleans())
def test_ops_after_a_strided_flatten_move_nothing(case, name, dtensor):
    mesh, shape, n, seed = case
    x, w = ints(shape, seed), ints((shape[-1], n), seed + 1)
    res = run(PROGRAMS[name], (x, w), mesh, shardings(len(shape), dtensor, mesh))
    assert res.comm.total_bytes == 0
    b, flat = int(np.prod(shape[:-2])), (int(np.prod(shape[:-1])), shape[-1])
    strided = layout(ss.DTensorSpec(mesh, [ss.Replicate(), ss.StridedShard(0, b)]), flat)
    assert flat_layout_of(res, flat).same_as(strided)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_a_sum_over_the_strided_dim_is_a_partial_sum_all_reduced(case):
    """Summing the flat dim: each device sums its stripes, pending over "tp", and only the
    all-reduce of the (N,) result moves: the bytes of summing (*lead, S) of the unflattened value."""
    mesh, shape, n, seed = case
    x, w = ints(shape, seed), ints((shape[-1], n), seed + 1)
    specs = shardings(len(shape), False, mesh)
    res = run(lambda x, w: (x.reshape(-1, x.shape[-1]) @ w).sum(0), (x, w), mesh, specs)
    assert {(r.kind, tuple(r.axes)) for r in res.comm.records} == {("all_reduce", ("tp",))}
    unflat = run(lambda x, w: (x @ w).sum(tuple(range(len(shape) - 1))), (x, w), mesh, specs)
    assert res.comm.total_bytes == unflat.comm.total_bytes > 0


def test_the_issue_example_moves_nothing_and_its_sum_only_an_all_reduce():
    mesh = ss.Mesh({"dp": 2, "tp": 4})
    x = np.arange(4 * 8 * 6, dtype=np.float32).reshape(4, 8, 6)
    w = np.arange(30, dtype=np.float32).reshape(6, 5)
    specs = ([ss.Replicate(), ss.Shard(1)], [ss.Replicate(), ss.Replicate()])
    assert run(lambda x, w: x.reshape(-1, 6) @ w, (x, w), mesh, specs).comm.total_bytes == 0
    assert run(lambda x, w: x.reshape(-1, 6) * 2, (x, w), mesh, specs).comm.total_bytes == 0
    summed = run(lambda x, w: (x.reshape(-1, 6) * 2).sum(0), (x, w), mesh, specs)
    assert [r.kind for r in summed.comm.records] == ["all_reduce"] * len(summed.comm.records)
    # ring all-reduce of 6 float32 over tp=4, on 8 devices: 2 * 3/4 * 24 B each
    assert summed.comm.total_bytes == 8 * 2 * 3 * 24 // 4


def test_a_flatten_of_two_sharded_factors_keeps_its_layout_too():
    """(Shard(0), Shard(1)): both factors sharded, on two mesh axes; no tensor-dim sharding
    states the merged dim either (device (i, j) holds rows of b-block i and s-block j), the
    matmul runs where it lies and the sum's partial results are all-reduced over both axes."""
    mesh = ss.Mesh({"dp": 2, "tp": 4})
    x, w = ints((4, 8, 6), 3), ints((6, 5), 4)
    specs = ([ss.Shard(0), ss.Shard(1)], [ss.Replicate(), ss.Replicate()])
    assert run(lambda x, w: x.reshape(-1, 6) @ w, (x, w), mesh, specs).comm.total_bytes == 0
    summed = run(lambda x, w: (x.reshape(-1, 6) @ w).sum(0), (x, w), mesh, specs)
    assert {(r.kind, tuple(r.axes)) for r in summed.comm.records} == {("all_reduce", ("dp", "tp"))}


def test_an_op_needing_the_flat_dim_whole_reshards_it():
    """A cumulative sum along the flat dim is not functorial over stripes: the planner reshards
    the flattened value, as it does for any layout, and the result is still bitwise."""
    mesh = ss.Mesh({"tp": 4})
    x = ints((2, 8, 3), 7)
    res = run(lambda x: np.cumsum(x.reshape(-1, 3), axis=0), (x,), mesh, ([ss.Shard(1)],))
    assert res.comm.total_bytes > 0


def test_a_max_over_stripes_is_all_reduced_unless_a_device_holds_none():
    """A max over the flat dim splits like a sum when every device holds some stripe; where one
    holds none (5 rows of S over 4: blocks 2, 2, 1, 0) a max has no identity to stand for its
    empty part, so the flattened value is resharded instead. Both bitwise."""
    mesh = ss.Mesh({"tp": 4})
    even = run(lambda x: x.reshape(-1, 3).max(0), (ints((2, 8, 3), 5),), mesh, ([ss.Shard(1)],))
    assert {(r.kind, tuple(r.axes)) for r in even.comm.records} == {("all_reduce", ("tp",))}
    empty = run(lambda x: x.reshape(-1, 3).max(0), (ints((2, 5, 3), 5),), mesh, ([ss.Shard(1)],))
    assert empty.comm.total_bytes > 0 and {r.kind for r in empty.comm.records} != {"all_reduce"}


def test_a_split_sum_is_pending_only_over_the_axes_its_parts_vary_along():
    """Replicated: every device sums it all, nothing pending. Striped over "tp": pending over
    "tp". Overlapping parts (rows 0-4 and 3-7) do not tile the sum: not run where they lie."""
    from simshard.ops import get_op
    from simshard.partition.exact import functorial_layouts
    from simshard.ir.program import Aval

    mesh = ss.Mesh({"tp": 4})
    (rule,) = get_op("reduce_sum").rules([Aval((8, 3), np.dtype(np.float32))], [Aval((3,), np.dtype(np.float32))], axes=(0,))
    whole = layout(ss.DTensorSpec(mesh, [ss.Replicate()]), (8, 3))
    (out,) = functorial_layouts(rule, [whole], [(8, 3)], [(3,)])
    assert out.unreduced == ()
    striped = layout(ss.DTensorSpec(mesh, [ss.StridedShard(0, 2)]), (8, 3))
    (out,) = functorial_layouts(rule, [striped], [(8, 3)], [(3,)])
    assert [a.name for a in out.unreduced] == ["tp"] and out.reduce_op == "sum"
    two = ss.Mesh({"tp": 2})
    cols = np.arange(3)
    overlapping = ss.Layout(two, (8, 3), {0: (np.arange(0, 5), cols), 1: (np.arange(3, 8), cols)})
    assert functorial_layouts(rule, [overlapping], [(8, 3)], [(3,)]) is None


def test_an_output_left_strided_is_stated_as_dtensor_would():
    """The matmul's result, left where the flatten's stripes put it, is stated as placements:
    ``[Replicate(), _StridedShard(0, split_factor=B)]``, the flattened value's own."""
    from simshard.sharding.stating import placements_for

    mesh = ss.Mesh({"dp": 2, "tp": 4})
    x, w = ints((3, 8, 6), 1), ints((6, 5), 2)
    res = run(lambda x, w: x.reshape(-1, 6) @ w, (x, w), mesh, shardings(3, False, mesh))
    assert res.spmd.out_shardings[0] == ss.DTensorSpec(mesh, [ss.Replicate(), ss.StridedShard(0, 3)])
    pending = layout(ss.DTensorSpec(mesh, [ss.Partial(), ss.Shard(1)]), (4, 6))
    assert placements_for(pending) == ss.DTensorSpec(mesh, [ss.Partial(), ss.Shard(1)])
    odd = ss.Layout(ss.Mesh({"tp": 2}), (4,), {0: (np.array([0, 3]),), 1: (np.array([1, 2]),)})
    assert placements_for(odd) is None


def test_dtensor_eager_ops_keep_the_stripes_of_a_flatten():
    """The eager DTensor spelling: ``d.reshape(-1, 6)`` of a ``(Replicate, Shard(1))`` DTensor is
    ``_StridedShard(0, split_factor=4)``; a matmul by a replicated weight keeps those stripes and
    a sum over them is ``Partial``, as DTensor's batch-dim strategies say; nothing moves until
    ``full_tensor``, and every value is numpy's bit for bit."""
    from simshard.dtensor import CommDebugMode, distribute_tensor

    mesh = ss.Mesh({"dp": 2, "tp": 4})
    x, w = ints((4, 8, 6), 8), ints((6, 5), 9)
    d = distribute_tensor(x, mesh, [ss.Replicate(), ss.Shard(1)])
    wd = distribute_tensor(w, mesh, [ss.Replicate(), ss.Replicate()])
    with CommDebugMode() as comm:
        flat = d.reshape(-1, 6)
        y = flat @ wd
        s = (flat * 2).sum(0)
    assert comm.get_total_counts() == 0
    strided = (ss.Replicate(), ss.StridedShard(0, 4))
    assert tuple(flat.placements) == strided and tuple(y.placements) == strided
    assert tuple(s.placements) == (ss.Replicate(), ss.Partial())
    np.testing.assert_array_equal(np.asarray(y.full_tensor()), x.reshape(-1, 6) @ w)
    np.testing.assert_array_equal(np.asarray(s.full_tensor()), (x.reshape(-1, 6) * 2).sum(0))
