"""What every collective algorithm shares: the canonical reduction (``reduce_in_order``), the checks
of a group, an axis and a peer's block, and receiving blocks into the places of their output."""

from __future__ import annotations

from itertools import accumulate
from typing import Sequence

import numpy as np

from simshard.report.collective_cost import balanced_chunks
from simshard.sharding.reduce_ops import REDUCE_OPS

from ...errors import CollectiveError
from ..large_buffers import empty
from .channel import Channel


def reduce_in_order(parts: Sequence[np.ndarray], reduce_op: str) -> np.ndarray:
    """Combine ``parts`` left to right (group order): the one canonical order of every reduction."""
    try:
        op = REDUCE_OPS[reduce_op]
    except KeyError:
        raise CollectiveError(f"unknown reduce op {reduce_op!r} (known: {', '.join(REDUCE_OPS)})") from None
    return op.reduce(list(parts))


def member_index(me: int, group: Sequence[int], what: str) -> int:
    if len(set(group)) != len(group):
        raise CollectiveError(f"{what} over group {tuple(group)}, which names a device twice")
    try:
        return list(group).index(me)
    except ValueError:
        raise CollectiveError(f"device {me} runs {what} over group {tuple(group)}, which does not include it") from None


def normalized_axis(axis: int, ndim: int, what: str) -> int:
    if not -ndim <= axis < ndim:
        raise CollectiveError(f"{what} along axis {axis} of a {ndim}-d buffer")
    return axis % ndim


def split_blocks(x: np.ndarray, axis: int, splits: Sequence[int], g: int, what: str) -> list[np.ndarray]:
    splits = [int(s) for s in splits]
    if len(splits) != g:
        raise CollectiveError(f"{what}: {len(splits)} splits {tuple(splits)} for a group of {g}")
    if any(s < 0 for s in splits) or sum(splits) != x.shape[axis]:
        raise CollectiveError(
            f"{what}: splits {tuple(splits)} do not cut dim {axis} of a buffer of shape {x.shape} (sum {sum(splits)})"
        )
    cuts = list(accumulate(splits))[:-1]  # (numpy's cumsum on a short list costs more than the split)
    return np.split(x, cuts, axis=axis)


def flat_chunks(x: np.ndarray, g: int) -> tuple[list[int], list[np.ndarray]]:
    """An all-reduce's pieces: the flattened buffer in ``g`` balanced chunks (sizes, views)."""
    flat = np.ascontiguousarray(x).reshape(-1)
    sizes = balanced_chunks(flat.size, g)
    offsets = [0, *accumulate(sizes)]
    return sizes, [flat[offsets[j]: offsets[j + 1]] for j in range(g)]


def same_except(shape_a, shape_b, axis: int | None) -> bool:
    if len(shape_a) != len(shape_b):
        return False
    return all(a == b for k, (a, b) in enumerate(zip(shape_a, shape_b)) if k != axis)


def check_block(what: str, me: int, peer: int, got: np.ndarray, mine: np.ndarray, axis: int | None) -> None:
    if got.dtype != mine.dtype or not same_except(got.shape, mine.shape, axis):
        free = "" if axis is None else f" (any length along axis {axis})"
        raise CollectiveError(
            f"{what}: device {me} got a {got.dtype}{list(got.shape)} block from device {peer} but holds "
            f"{mine.dtype}{list(mine.shape)}; they must agree{free}"
        )


async def receive_all(ch: Channel, group: Sequence[int], step: int, mine: np.ndarray, what: str,
                       axis: int | None = None) -> list[np.ndarray]:
    """Every member's block of ``step`` in group order, this device's own being ``mine``; each one
    received checked against it (free along ``axis``)."""
    blocks = []
    for p in group:
        if p == ch.me:
            blocks.append(mine)
            continue
        b = await ch.recv(p, step)
        check_block(what, ch.me, p, b, mine, axis)
        blocks.append(b)
    return blocks


def receive_slots(like: np.ndarray, g: int, axis: int) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """An output of ``g`` blocks shaped like ``like`` joined along ``axis``, and its blocks (views),
    when each block is one contiguous run of the output (``axis`` is the first dimension longer
    than 1): a transport can then receive a block straight into its place. None otherwise."""
    if like.ndim == 0 or any(n != 1 for n in like.shape[:axis]):
        return None
    shape = list(like.shape)
    shape[axis] *= g
    out = empty(shape, like.dtype)  # a large one from the process's pool of warm buffers
    n = like.shape[axis]
    return out, [out[(slice(None),) * axis + (slice(k * n, (k + 1) * n),)] for k in range(g)]


def post_slots(ch: Channel, group: Sequence[int], step: int, slots) -> None:
    """Offer the transport each peer's place in the output (``receive_slots``) for its block of ``step``."""
    if slots is not None:
        for p, view in zip(group, slots[1]):
            if p != ch.me:
                ch.expect(p, step, view)


def join_blocks(blocks: Sequence[np.ndarray], slots, axis: int) -> np.ndarray:
    """The blocks joined along ``axis``: in the posted output (``receive_slots``), copying only those not
    received in place, when every block has its slot's shape; else concatenated."""
    if slots is None or any(b.shape != v.shape or b.dtype != v.dtype for b, v in zip(blocks, slots[1])):
        return np.concatenate(blocks, axis=axis)
    out, views = slots
    for b, view in zip(blocks, views):
        if b is not view:
            view[...] = b
    return out
