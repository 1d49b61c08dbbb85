"""Every collective against a numpy reference, bit for bit: random groups in random orders, uneven
splits (empty chunks included), every reduce op; the canonical order shown to decide the bits;
bytes moved equal to the analytic minimum."""

import itertools

import numpy as np
import pytest

from runtime_helpers import floats, fold, run_devices, same_bits, uneven_blocks
from simshard.sharding.reduce_ops import REDUCE_OPS
from simshard.runtime import (
    CollectiveError, all_gather, all_reduce, all_to_all, broadcast, collective_permute, reduce_scatter,
)

SEEDS = range(12)


def random_group(rng, max_g=5):
    g = int(rng.integers(1, max_g + 1))
    return tuple(int(d) for d in rng.permutation(8)[:g])  # random ids in a random (canonical) order


def random_splits(rng, g, allow_zero=True):
    return tuple(int(s) for s in rng.integers(0 if allow_zero else 1, 4, size=g))



@pytest.mark.parametrize("seed", SEEDS)
def test_all_gather_uneven_blocks(seed):
    rng = np.random.default_rng(seed)
    group = random_group(rng)
    axis = int(rng.integers(0, 3))
    xs = uneven_blocks(rng, group, axis)
    out, t = run_devices(group, lambda ch: all_gather(ch, xs[ch.me], group, axis))
    ref = np.concatenate([xs[d] for d in group], axis=axis)
    total = sum(x.nbytes for x in xs.values())
    for d in group:
        assert same_bits(out[d], ref)
        assert t.log.bytes_received(d) == total - xs[d].nbytes  # the analytic minimum
        assert t.log.bytes_sent(d) == (len(group) - 1) * xs[d].nbytes
        assert t.log.totals(d, 0).messages_sent == len(group) - 1


@pytest.mark.parametrize("op", sorted(REDUCE_OPS))
@pytest.mark.parametrize("seed", SEEDS)
def test_reduce_scatter_uneven_splits(seed, op):
    rng = np.random.default_rng(seed)
    group = random_group(rng)
    g = len(group)
    axis = int(rng.integers(0, 2))
    splits = random_splits(rng, g)
    shape = [sum(splits), 3] if axis == 0 else [3, sum(splits)]
    xs = {d: floats(rng, shape) for d in group}
    out, t = run_devices(group, lambda ch: reduce_scatter(ch, xs[ch.me], group, axis, splits, op))
    cuts = np.cumsum(splits)[:-1]
    for i, d in enumerate(group):
        chunks = [np.split(xs[p], cuts, axis=axis)[i] for p in group]
        assert same_bits(out[d], fold(chunks, op)), (d, op)
        mine = chunks[0].nbytes
        assert t.log.bytes_received(d) == (g - 1) * mine  # analytic minimum: (g-1) x my chunk
        assert t.log.bytes_sent(d) == xs[d].nbytes - mine


@pytest.mark.parametrize("op", sorted(REDUCE_OPS))
@pytest.mark.parametrize("seed", SEEDS)
def test_all_reduce(seed, op):
    rng = np.random.default_rng(seed)
    group = random_group(rng)
    g = len(group)
    shape = tuple(int(s) for s in rng.integers(0, 5, size=int(rng.integers(0, 3))))
    xs = {d: floats(rng, shape) for d in group}
    out, t = run_devices(group, lambda ch: all_reduce(ch, xs[ch.me], group, op))
    ref = fold([xs[d] for d in group], op)
    n = int(np.prod(shape, dtype=int)) * 4
    total_received = 0
    for d in group:
        assert same_bits(out[d], ref), (d, op)
        total_received += t.log.bytes_received(d)
    assert total_received == sum(t.log.bytes_sent(d) for d in group) == 2 * (g - 1) * n


@pytest.mark.parametrize("seed", SEEDS)
def test_all_to_all_uneven(seed):
    rng = np.random.default_rng(seed)
    group = random_group(rng)
    g = len(group)
    split_axis, concat_axis = (int(a) for a in rng.integers(0, 3, size=2))
    splits = random_splits(rng, g)
    xs = {}
    for d in group:
        shape = [2, 2, 2]
        shape[split_axis] = sum(splits)
        if concat_axis != split_axis:
            shape[concat_axis] = int(rng.integers(0, 3))  # members may differ along the concat axis
        xs[d] = floats(rng, shape)
    out, t = run_devices(group, lambda ch: all_to_all(ch, xs[ch.me], group, split_axis, splits, concat_axis))
    cuts = np.cumsum(splits)[:-1]
    for i, d in enumerate(group):
        ref = np.concatenate([np.split(xs[p], cuts, axis=split_axis)[i] for p in group], axis=concat_axis)
        assert same_bits(out[d], ref)
        own = np.split(xs[d], cuts, axis=split_axis)[i].nbytes
        assert t.log.bytes_received(d) == ref.nbytes - own
        assert t.log.bytes_sent(d) == xs[d].nbytes - own


@pytest.mark.parametrize("even", [True, False])
def test_blocks_are_received_into_their_place_in_the_output_when_they_fit(monkeypatch, even):
    """All-gather and all-to-all joined along their first long dimension, and all-reduce, offer
    each peer's place in the output: a block of that shape that arrives after the offer is
    received there (no join copies it), one of another shape is joined the usual way, and the
    bits are the same either way. Joined along a later dimension, no place is offered."""
    from simshard.runtime.core.mailbox import Mailbox

    seen = []  # (a place was offered, it was taken) per message delivered
    offer = Mailbox.place

    def place(self, src, key, dtype, shape):
        offered = (src, key) in self._places
        out = offer(self, src, key, dtype, shape)
        seen.append((offered, out is not None))
        return out

    def placed():
        got = [taken for offered, taken in seen if offered]
        seen.clear()
        return got

    monkeypatch.setattr(Mailbox, "place", place)
    rng = np.random.default_rng(5)
    group = (3, 0, 2)
    xs = {d: floats(rng, (2 if even else 1 + d, 3)) for d in group}
    out, _ = run_devices(group, lambda ch: all_gather(ch, xs[ch.me], group, 0))
    assert all(same_bits(out[d], np.concatenate([xs[p] for p in group])) for d in group)
    got = placed()
    assert got and (all(got) if even else not all(got))
    splits = (1, 0, 2) if even else (1, 1, 1)
    ys = {d: floats(rng, (3, 2 if even else 1 + d)) for d in group}
    out, _ = run_devices(group, lambda ch: all_to_all(ch, ys[ch.me], group, 0, splits, 0 if even else 1))
    for i, d in enumerate(group):
        ref = np.concatenate([np.split(ys[p], np.cumsum(splits)[:-1])[i] for p in group], axis=0 if even else 1)
        assert same_bits(out[d], ref)
    got = placed()
    assert got and (all(got) if even else not all(got))
    out, _ = run_devices(group, lambda ch: all_reduce(ch, xs[ch.me] if even else xs[0], group, "sum"))
    ref = fold([xs[p] if even else xs[0] for p in group], "sum")
    assert all(same_bits(out[d], ref) for d in group)
    got = placed()
    assert got and all(got)
    zs = {d: floats(rng, (2, 1 + d if not even else 2)) for d in group}
    out, _ = run_devices(group, lambda ch: all_gather(ch, zs[ch.me], group, 1))
    assert all(same_bits(out[d], np.concatenate([zs[p] for p in group], axis=1)) for d in group)
    assert not placed()


@pytest.mark.parametrize("seed", SEEDS)
def test_collective_permute(seed):
    rng = np.random.default_rng(seed)
    devices = tuple(range(6))
    targets = [int(t) for t in rng.permutation(6)[: int(rng.integers(0, 7))]]
    sources = [int(s) for s in rng.integers(0, 6, size=len(targets))]  # a source may feed several targets
    pairs = tuple(zip(sources, targets))
    xs = {d: floats(rng, (2, 3)) for d in devices}
    out, t = run_devices(devices, lambda ch: collective_permute(ch, xs[ch.me], pairs, (2, 3), "float32"))
    for d in devices:
        src = [s for s, tt in pairs if tt == d]
        ref = xs[src[0]] if src else np.zeros((2, 3), np.float32)
        assert same_bits(out[d], ref)
        assert t.log.bytes_received(d) == (xs[d].nbytes if src and src[0] != d else 0)


def test_permute_target_twice_is_an_error():
    with pytest.raises(CollectiveError, match="target of more than one pair"):
        run_devices((0, 1, 2), lambda ch: collective_permute(ch, np.zeros(2), ((0, 2), (1, 2)), (2,), "float64"))


@pytest.mark.parametrize("root", [0, 1, 2, 3])
def test_broadcast(root):
    group = (3, 0, 2)
    x = np.arange(5, dtype=np.int16) * 7
    if root not in group:
        with pytest.raises(CollectiveError, match="root 1 is not in group"):
            run_devices(group, lambda ch: broadcast(ch, x if ch.me == root else None, group, root))
        return
    out, t = run_devices(group, lambda ch: broadcast(ch, x if ch.me == root else None, group, root))
    for d in group:
        assert same_bits(out[d], x)
    assert t.log.bytes_sent(root) == 2 * x.nbytes


# -- the canonical order decides the bits ------------------------------------------------------------


def test_canonical_order_matters_for_float32():
    # (1e8 + 1) - 1e8 == 0 in float32, but (1e8 - 1e8) + 1 == 1: the order of a sum changes its bits.
    xs = {0: np.float32([1e8, 3.0]), 1: np.float32([1.0, 1e8]), 2: np.float32([-1e8, -1e8])}
    results = {}
    for group in itertools.permutations((0, 1, 2)):
        out, _ = run_devices(group, lambda ch: all_reduce(ch, xs[ch.me], group, "sum"))
        for d in group:  # every member gets the same bits: the left fold in group order
            assert same_bits(out[d], fold([xs[p] for p in group], "sum"))
        results[group] = out[group[0]]
    distinct = {r.tobytes() for r in results.values()}
    assert len(distinct) > 1  # so the order the group names is really the one used
    assert results[(0, 1, 2)][0] == np.float32(0.0) and results[(0, 2, 1)][0] == np.float32(1.0)


def test_reduce_scatter_then_all_gather_equals_all_reduce_bitwise():
    # Same canonical order whichever algorithm combined the contributions.
    rng = np.random.default_rng(7)
    group = (5, 1, 3, 0)
    xs = {d: floats(rng, (8, 3)) for d in group}

    async def rs_ag(ch):
        part = await reduce_scatter(ch, xs[ch.me], group, 0, (3, 1, 0, 4), "sum")
        ch.instr = 1
        return await all_gather(ch, part, group, 0)

    a, _ = run_devices(group, lambda ch: all_reduce(ch, xs[ch.me], group, "sum"))
    b, _ = run_devices(group, rs_ag)
    ref = fold([xs[d] for d in group], "sum")
    other = fold([xs[d] for d in sorted(group)], "sum")
    assert not same_bits(ref, other)  # these inputs do depend on the order
    for d in group:
        assert same_bits(a[d], ref) and same_bits(b[d], ref)


# -- bad input ------------------------------------------------------------------------------------------


def test_device_outside_its_group():
    with pytest.raises(CollectiveError, match="device 2 runs all_gather over group \\(0, 1\\), which does not include it"):
        run_devices((2,), lambda ch: all_gather(ch, np.zeros(2), (0, 1), 0))


def test_splits_that_do_not_cut_the_buffer():
    with pytest.raises(CollectiveError, match="splits \\(1, 1\\) do not cut dim 0"):
        run_devices((0, 1), lambda ch: reduce_scatter(ch, np.zeros(3), (0, 1), 0, (1, 1)))


def test_blocks_that_disagree():
    xs = {0: np.zeros((2, 3)), 1: np.zeros((2, 4))}
    with pytest.raises(CollectiveError, match=r"device 1 got a float64\[2, 3\] block from device 0 but holds float64\[2, 4\]"):
        run_devices((0, 1), lambda ch: all_gather(ch, xs[ch.me], (0, 1), 0))
