"""The ring collectives, order-keeping (every chunk's partial travels g0 -> g1 -> ... -> g[-1], so
reductions keep the canonical order), and the one-shot all-reduce (see the package docstring)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from simshard.sharding.reduce_ops import REDUCE_OPS

from ...errors import CollectiveError
from .blocks import (
    check_block, flat_chunks, member_index, normalized_axis, receive_all, split_blocks, reduce_in_order,
)
from .channel import Channel


def _ring_neighbours(me: int, group: Sequence[int]) -> tuple[int, int, int]:
    """(my position, the member before me, the member after me) round the ring."""
    i = list(group).index(me)
    g = len(group)
    return i, group[(i - 1) % g], group[(i + 1) % g]


async def ring_all_gather(ch: Channel, x: np.ndarray, group: Sequence[int], axis: int) -> np.ndarray:
    """``all_gather`` round the ring: at step ``s`` send the block of member ``i - s`` to the next
    member and get the block of member ``i - s - 1`` from the previous one."""
    what = "all_gather"
    member_index(ch.me, group, what)
    x = np.asarray(x)
    axis = normalized_axis(axis, x.ndim, what)
    g = len(group)
    i, prev, nxt = _ring_neighbours(ch.me, group)
    blocks: list[np.ndarray | None] = [None] * g
    blocks[i] = x
    for s in range(g - 1):
        ch.send(nxt, s, blocks[(i - s) % g])
        b = await ch.recv(prev, s)
        check_block(what, ch.me, prev, b, x, axis)
        blocks[(i - s - 1) % g] = b
    return np.concatenate(blocks, axis=axis)


async def _chain_reduce(ch: Channel, pieces: Sequence[np.ndarray], order: Sequence[int], reduce_op: str,
                        what: str) -> list[np.ndarray | None]:
    """Every piece's running partial travels ``order[0] -> order[1] -> ...``, each member combining
    its own piece on the right (the canonical association); message ``(instr, c)`` carries piece
    ``c``. The last member of ``order`` gets every finished piece, the others ``None``s. Empty
    pieces are not sent."""
    k = list(order).index(ch.me)
    prev = order[k - 1] if k else None
    nxt = order[k + 1] if k + 1 < len(order) else None
    op = REDUCE_OPS[reduce_op]
    out: list[np.ndarray | None] = []
    for c, mine in enumerate(pieces):
        if not mine.size:
            out.append(reduce_in_order([mine], reduce_op) if nxt is None else None)
            continue
        if prev is None:
            acc = mine
        else:
            got = await ch.recv(prev, c)
            check_block(what, ch.me, prev, got, mine, None)
            acc = op.combine(got, mine)
        if nxt is not None:
            ch.send(nxt, c, acc)
            out.append(None)
        else:
            out.append(reduce_in_order([acc], reduce_op) if prev is None else _finish(acc, reduce_op, len(order), mine))
    return out


def _finish(acc: np.ndarray, reduce_op: str, n: int, like: np.ndarray) -> np.ndarray:
    """The chain's combined value as ``reduce_in_order`` would return it (``avg`` divides once)."""
    if reduce_op == "avg":
        acc = acc / n
    return np.asarray(acc, dtype=np.result_type(like))


async def ring_reduce_scatter(ch: Channel, x: np.ndarray, group: Sequence[int], axis: int, splits: Sequence[int],
                              reduce_op: str = "sum", reduce_order: Sequence[int] = ()) -> np.ndarray:
    """``reduce_scatter`` as an order-keeping chain along ``reduce_order`` (group order if empty);
    its last member then sends each finished chunk to the member that keeps it (key step ``g + j``)."""
    what = "reduce_scatter"
    i = member_index(ch.me, group, what)
    order = tuple(reduce_order) or tuple(group)
    if sorted(order) != sorted(group):
        raise CollectiveError(f"{what}: reduce order {order} is not a permutation of the group {tuple(group)}")
    if reduce_op not in REDUCE_OPS:
        reduce_in_order([x], reduce_op)  # raises the unknown-op error
    x = np.asarray(x)
    axis = normalized_axis(axis, x.ndim, what)
    g = len(group)
    pieces = split_blocks(x, axis, splits, g, what)
    done = await _chain_reduce(ch, pieces, order, reduce_op, what)
    last = order[-1]
    if ch.me == last:
        for j, p in enumerate(group):
            if p != last and pieces[j].shape[axis]:
                ch.send(p, g + j, done[j])
        return done[i]
    if not pieces[i].shape[axis]:
        return reduce_in_order([pieces[i]], reduce_op)
    got = await ch.recv(last, g + i)
    check_block(what, ch.me, last, got, pieces[i], None)
    return got


async def ring_all_reduce(ch: Channel, x: np.ndarray, group: Sequence[int], reduce_op: str = "sum") -> np.ndarray:
    """``all_reduce`` as an order-keeping chain (``g`` balanced chunks of the flattened buffer,
    steps ``0..g-1``) ending on the last member, which then pipelines the result on round the ring
    (steps ``g..2g-1``): ``g[-1] -> g0 -> g1 -> ... -> g[-2]``."""
    what = "all_reduce"
    member_index(ch.me, group, what)
    if reduce_op not in REDUCE_OPS:
        reduce_in_order([x], reduce_op)
    x = np.asarray(x)
    g = len(group)
    sizes, pieces = flat_chunks(x, g)
    done = await _chain_reduce(ch, pieces, group, reduce_op, what)
    # the broadcast ring starts at the last member: position k of ``ring`` receives from k - 1
    ring = (group[-1],) + tuple(group[:-1])
    k = ring.index(ch.me)
    prev = ring[k - 1] if k else None
    nxt = ring[k + 1] if k + 1 < g else None
    chunks = []
    for c in range(g):
        if not sizes[c]:
            chunks.append(reduce_in_order([pieces[c]], reduce_op))
            continue
        if prev is None:
            chunk = done[c]
        else:
            chunk = await ch.recv(prev, g + c)
            check_block(what, ch.me, prev, chunk, pieces[c], None)
        if nxt is not None:
            ch.send(nxt, g + c, chunk)
        chunks.append(chunk)
    return np.concatenate(chunks).reshape(x.shape)


async def oneshot_all_reduce(ch: Channel, x: np.ndarray, group: Sequence[int], reduce_op: str = "sum") -> np.ndarray:
    """``all_reduce`` in one step: every member's whole buffer to every other member (one message
    each, step 0), then each reduces all ``g`` buffers in group order itself."""
    what = "all_reduce"
    member_index(ch.me, group, what)
    x = np.asarray(x)
    flat = np.ascontiguousarray(x).reshape(-1)  # as direct does: a 0-d buffer travels as [1]
    if not flat.size:  # nothing to send: every member knows the shape from the tag
        return reduce_in_order([flat] * len(group), reduce_op).reshape(x.shape)
    for p in group:
        if p != ch.me:
            ch.send(p, 0, flat)
    return reduce_in_order(await receive_all(ch, group, 0, flat, what), reduce_op).reshape(x.shape)
