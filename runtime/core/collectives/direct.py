"""The direct collectives: each member sends each piece straight to the member that needs it, in
one step (two for all-reduce); per device the bytes equal the analytic minimum. Which pieces
travel is the collective cost's rule (``simshard.report.collective_cost.sends``), shared with the
estimate."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from simshard.report.collective_cost import sends

from ...errors import CollectiveError
from ..large_buffers import empty
from .blocks import (
    check_block, flat_chunks, join_blocks, member_index, normalized_axis, post_slots, receive_all, receive_slots, split_blocks, reduce_in_order,
)
from .channel import Channel


async def all_gather(ch: Channel, x: np.ndarray, group: Sequence[int], axis: int) -> np.ndarray:
    """Concatenate every member's block along ``axis`` in group order (blocks may differ in length
    along ``axis``)."""
    what = "all_gather"
    member_index(ch.me, group, what)
    x = np.asarray(x)
    axis = normalized_axis(axis, x.ndim, what)
    slots = receive_slots(x, len(group), axis)  # blocks are usually equal: offer their places
    post_slots(ch, group, 0, slots)
    for p in group:
        if p != ch.me:
            ch.send(p, 0, x)
    return join_blocks(await receive_all(ch, group, 0, x, what, axis), slots, axis)


async def reduce_scatter(ch: Channel, x: np.ndarray, group: Sequence[int], axis: int, splits: Sequence[int],
                         reduce_op: str = "sum", reduce_order: Sequence[int] = ()) -> np.ndarray:
    """Reduce the members' buffers (in ``reduce_order`` if given, else group order) and keep chunk
    ``i`` (``splits[i]`` long along ``axis``) on member ``i``."""
    what = "reduce_scatter"
    i = member_index(ch.me, group, what)
    order = tuple(reduce_order) or tuple(group)
    if sorted(order) != sorted(group):
        raise CollectiveError(f"{what}: reduce order {order} is not a permutation of the group {tuple(group)}")
    x = np.asarray(x)
    axis = normalized_axis(axis, x.ndim, what)
    pieces = split_blocks(x, axis, splits, len(group), what)
    for j, p in enumerate(group):
        if p != ch.me and sends(what, pieces[j].shape[axis]):
            ch.send(p, 0, pieces[j])
    mine = pieces[i]
    if not sends(what, mine.shape[axis]):
        return reduce_in_order([mine], reduce_op)
    parts = dict(zip(group, await receive_all(ch, group, 0, mine, what)))
    return reduce_in_order([parts[p] for p in order], reduce_op)


async def all_reduce(ch: Channel, x: np.ndarray, group: Sequence[int], reduce_op: str = "sum") -> np.ndarray:
    """Every member gets the reduction (group order) of all members' buffers: a reduce-scatter of
    the flattened buffer in ``g`` balanced chunks (step 0), then an all-gather (step 1)."""
    what = "all_reduce"
    i = member_index(ch.me, group, what)
    x = np.asarray(x)
    g = len(group)
    sizes, pieces = flat_chunks(x, g)
    out = empty(x.size, x.dtype)  # a large one from the process's pool of warm buffers
    slots = (out, flat_chunks(out, g)[1])  # where each member's finished chunk goes (step 1)
    for j, p in enumerate(group):
        if p != ch.me and sends(what, sizes[j]):
            ch.expect(p, 1, slots[1][j])
            ch.send(p, 0, pieces[j])
    if sends(what, sizes[i]):
        mine = reduce_in_order(await receive_all(ch, group, 0, pieces[i], what), reduce_op)
        for p in group:
            if p != ch.me:
                ch.send(p, 1, mine)
    else:
        mine = reduce_in_order([pieces[i]], reduce_op)
    chunks = []
    for j, p in enumerate(group):
        if p == ch.me or not sends(what, sizes[j]):
            chunks.append(mine if p == ch.me else reduce_in_order([pieces[j]], reduce_op))
            continue
        b = await ch.recv(p, 1)
        check_block(what, ch.me, p, b, pieces[j], None)
        chunks.append(b)
    return join_blocks(chunks, slots, 0).reshape(x.shape)


async def all_to_all(ch: Channel, x: np.ndarray, group: Sequence[int], split_axis: int, splits: Sequence[int],
                     concat_axis: int) -> np.ndarray:
    """Cut ``x`` along ``split_axis`` into chunks of ``splits``, send chunk ``j`` to member ``j``,
    concatenate what arrives along ``concat_axis`` in group order."""
    what = "all_to_all"
    i = member_index(ch.me, group, what)
    x = np.asarray(x)
    split_axis = normalized_axis(split_axis, x.ndim, what)
    concat_axis = normalized_axis(concat_axis, x.ndim, what)
    pieces = split_blocks(x, split_axis, splits, len(group), what)
    slots = receive_slots(pieces[i], len(group), concat_axis)  # the members' chunks are usually alike
    post_slots(ch, group, 0, slots)
    for j, p in enumerate(group):
        if p != ch.me:
            ch.send(p, 0, pieces[j])
    return join_blocks(await receive_all(ch, group, 0, pieces[i], what, concat_axis), slots, concat_axis)


async def collective_permute(ch: Channel, x: np.ndarray | None, pairs: Sequence[tuple[int, int]],
                             shape: Sequence[int], dtype) -> np.ndarray:
    """Each ``(source, target)`` pair moves the source's ``x`` to the target; a device that is no
    pair's target gets zeros of ``shape`` / ``dtype``. ``x`` is read only on sources."""
    what, me = "collective_permute", ch.me
    sends, source = [], None
    for s, t in pairs:  # one pass: each device checks the pairs that name it
        if s == me:
            sends.append(t)
        if t == me:
            if source is not None:
                raise CollectiveError(f"{what}: device {me} is the target of more than one pair in {tuple(pairs)}")
            source = s
    if sends and x is None:
        raise CollectiveError(f"{what}: device {me} is a source in {tuple(pairs)} but has no buffer to send")
    for t in sends:
        if t != me:
            ch.send(t, 0, x)
    if source is None:
        return np.zeros(tuple(shape), dtype=np.dtype(dtype))
    return np.array(x, copy=True) if source == me else await ch.recv(source, 0)


async def broadcast(ch: Channel, x: np.ndarray | None, group: Sequence[int], root: int) -> np.ndarray:
    """``root``'s ``x`` to every member of ``group`` (initial placement of a replicated value)."""
    what = "broadcast"
    member_index(ch.me, group, what)
    if root not in group:
        raise CollectiveError(f"{what}: root {root} is not in group {tuple(group)}")
    if ch.me == root:
        if x is None:
            raise CollectiveError(f"{what}: root device {root} has no buffer to send")
        x = np.asarray(x)
        for p in group:
            if p != root:
                ch.send(p, 0, x)
        return x
    return await ch.recv(root, 0)
