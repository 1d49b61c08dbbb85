"""The ring algorithms: bit for bit the direct ones (the canonical reduction order kept), every
message to the next member of the ring (but reduce-scatter's last hop), and the bytes the module
docstring promises."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simshard as ss
from runtime_helpers import floats, fold, run_devices, same_bits, uneven_blocks
from simshard.sharding.reduce_ops import REDUCE_OPS
from simshard.runtime.core.collectives import (
    all_gather, all_reduce, reduce_scatter, ring_all_gather, ring_all_reduce, ring_reduce_scatter,
)

OPS = sorted(REDUCE_OPS)



@st.composite
def groups(draw, max_g=6):
    g = draw(st.integers(1, max_g))
    ids = draw(st.permutations(range(8)))
    return tuple(ids[:g])


def sent_pairs(t):
    """(source, destination) of every message with bytes."""
    return {(e.device, e.peer) for e in t.log.entries if e.direction == "sent"}


def ring_pairs(order):
    g = len(order)
    return {(order[k], order[(k + 1) % g]) for k in range(g)} if g > 1 else set()


@settings(max_examples=40, deadline=None)
@given(group=groups(), axis=st.integers(0, 2), seed=st.integers(0, 2**16))
def test_ring_all_gather_equals_direct(group, axis, seed):
    rng = np.random.default_rng(seed)
    xs = uneven_blocks(rng, group, axis)
    direct, td = run_devices(group, lambda ch: all_gather(ch, xs[ch.me], group, axis))
    ring, tr = run_devices(group, lambda ch: ring_all_gather(ch, xs[ch.me], group, axis))
    for d in group:
        assert same_bits(ring[d], direct[d])
        assert tr.log.bytes_received(d) == td.log.bytes_received(d)  # the same bytes as direct
    assert sent_pairs(tr) <= ring_pairs(group)


@settings(max_examples=60, deadline=None)
@given(group=groups(), op=st.sampled_from(OPS), axis=st.integers(0, 1), seed=st.integers(0, 2**16),
       shuffle=st.booleans())
def test_ring_reduce_scatter_equals_direct(group, op, axis, seed, shuffle):
    rng = np.random.default_rng(seed)
    g = len(group)
    splits = tuple(int(s) for s in rng.integers(0, 4, size=g))
    shape = [sum(splits), 3] if axis == 0 else [3, sum(splits)]
    xs = {d: floats(rng, shape) for d in group}
    order = tuple(rng.permutation(group).tolist()) if shuffle else ()
    direct, _ = run_devices(group, lambda ch: reduce_scatter(ch, xs[ch.me], group, axis, splits, op, order))
    ring, t = run_devices(group, lambda ch: ring_reduce_scatter(ch, xs[ch.me], group, axis, splits, op, order))
    chain = order or group
    cuts = np.cumsum(splits)[:-1]
    for i, d in enumerate(group):
        assert same_bits(ring[d], direct[d]), (d, op)
        ref = fold([np.split(xs[p], cuts, axis=axis)[i] for p in chain], op)
        assert same_bits(ring[d], ref)
    # the chain's hops, then the last member's one message to each owner
    last = chain[-1]
    chain_pairs = {(chain[k], chain[k + 1]) for k in range(g - 1)}
    assert sent_pairs(t) <= chain_pairs | {(last, p) for p in group}
    chunk = [3 * s * 4 for s in splits]  # bytes of each chunk: s rows or columns of 3 float32
    total = sum(e.nbytes for e in t.log.entries if e.direction == "sent")
    owners = sum(c for c, p in zip(chunk, group) if p != last)
    assert total == (g - 1) * sum(chunk) + owners  # (g-1)N + what the last hop carries


@settings(max_examples=60, deadline=None)
@given(group=groups(), op=st.sampled_from(OPS), ndim=st.integers(0, 3), seed=st.integers(0, 2**16))
def test_ring_all_reduce_equals_direct(group, op, ndim, seed):
    rng = np.random.default_rng(seed)
    shape = tuple(int(s) for s in rng.integers(0, 5, size=ndim))
    xs = {d: floats(rng, shape) for d in group}
    direct, td = run_devices(group, lambda ch: all_reduce(ch, xs[ch.me], group, op))
    ring, tr = run_devices(group, lambda ch: ring_all_reduce(ch, xs[ch.me], group, op))
    ref = fold([xs[p] for p in group], op)
    for d in group:
        assert same_bits(ring[d], direct[d]), (d, op)
        assert same_bits(ring[d], ref)
    assert sent_pairs(tr) <= ring_pairs(group)
    # the same total as direct, 2(g-1)N
    sent = lambda t: sum(e.nbytes for e in t.log.entries if e.direction == "sent")  # noqa: E731
    assert sent(tr) == sent(td) == 2 * (len(group) - 1) * xs[group[0]].nbytes


def test_the_canonical_order_decides_the_bits_of_the_ring_too():
    # a textbook ring would start chunk c at member c+1; these values make that visible
    group = (0, 1, 2)
    xs = {0: np.float32([1e8, 1e8, 1e8]), 1: np.float32([-1e8, -1e8, -1e8]), 2: np.float32([1.0, 1.0, 1.0])}
    ring, _ = run_devices(group, lambda ch: ring_all_reduce(ch, xs[ch.me], group, "sum"))
    for d in group:
        assert ring[d].tolist() == [1.0, 1.0, 1.0]  # (1e8 + -1e8) + 1, never 1e8 + (-1e8 + 1) = 0


def test_ss_run_with_the_ring_algorithm_matches_direct():
    mesh = ss.Mesh({"x": 2, "y": 4})

    def f(x, w1, w2):
        return np.tanh(x @ w1) @ w2  # inexact on purpose: the bits depend on the summation order

    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((8, 16), (16, 32), (32, 16))]
    shard = (ss.P("x", "y"), ss.P("y", None), ss.P(None, "y"))
    direct = ss.run(f, *args, mesh=mesh, in_shardings=shard, backend="local")
    ring = ss.run(f, *args, mesh=mesh, in_shardings=shard, backend="local", algorithm="ring")
    assert {r.kind for r in ring.comm.records} == {"all_reduce"}  # the row-parallel matmul's partial sums
    assert same_bits(ring.outputs, direct.outputs)
    # the same total as direct, spread unevenly: the chain's first member sends more than it gets
    assert ring.comm.total_received == direct.comm.total_received
    first = [r for r in ring.comm.records if r.group and r.device == r.group[0]][0]
    assert first.bytes_sent > first.bytes_received


@pytest.mark.parametrize("f", [lambda x: x.sum(), lambda x: x * 2], ids=["collective", "no collective"])
def test_unknown_algorithm_is_named_before_anything_runs(f):
    mesh = ss.Mesh({"x": 2})
    with pytest.raises(Exception, match="unknown collective algorithm 'tree'.*direct, ring"):
        ss.run(f, np.ones(4, np.float32), mesh=mesh, in_shardings=(ss.P("x"),), backend="local", algorithm="tree")
