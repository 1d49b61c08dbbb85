"""The collective library, written once: async functions from one device's point of view over a
``Channel`` (a transport, the device's id and the instruction's message key and tag).

Every backend runs these same functions; only the transport differs (in-memory queues for the
local backend, Ray object transfers between actors for the Ray backend).

Algorithms here are *direct*: each member sends each piece straight to the member that needs it,
in one step (two for all-reduce). Per device the bytes moved equal the analytic minimum
(``simshard.report.analytic_min_bytes``): all-gather, reduce-scatter and all-to-all move
``(g-1)/g`` of the group's data, all-reduce ``2(g-1)/g`` (a reduce-scatter then an all-gather).

Canonical reduction order. Every reduction combines the contributions left to right in group
order (``reduce_in_order``); the group is listed in ascending mesh coordinate, so results are the
same bits whichever algorithm, backend or run produced them. Another algorithm must compute the
same association ``((x[g0] op x[g1]) op x[g2]) ...`` for every element (float addition commutes,
so ``acc op x`` and ``x op acc`` agree, but it does not associate). A textbook ring reduce-scatter
starts chunk ``c``'s sum at member ``c+1`` and so breaks this; an order-keeping "ring" is a
pipelined chain: every chunk's running partial travels ``g0 -> g1 -> ... -> g[-1]``, each member
combining its contribution on the right. It moves the ring's total, ``(g-1)N`` over the group,
but unevenly (``g0`` sends ``N``, ``g[-1]`` nothing) and the finished chunks end on ``g[-1]``,
one more hop from their owners. Such a variant goes next to the direct functions below and is
chosen by name (``ALGORITHMS``, ``run_collective(..., algorithm=...)``); the all-gather phase
has no arithmetic and may use a plain ring.

Protocol rules every algorithm follows (the local transport's deadlock detection relies on them):
a device finishes the sends of a step before it receives; it receives one message at a time; a
message is keyed ``(instruction id, step)`` and carries the sender's tag, which the receiver
checks against its own (two devices running different collectives under one id is an error, not
garbage). A message whose size both sides know to be zero (an empty reduce-scatter or all-reduce
chunk) is not sent; all-gather and all-to-all blocks always are (their receivers learn the sizes
from them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

import numpy as np

from simshard.reduce_ops import REDUCE_OPS
from simshard.report.comm import balanced_chunks

from .errors import CollectiveError
from .transport import Transport

ALGORITHMS = ("direct",)


@dataclass
class Channel:
    """What a collective needs to talk: the transport, who I am, which instruction, my tag."""

    transport: Transport
    me: int
    instr: int | str
    tag: Hashable = None
    note: str = ""

    async def send(self, peer: int, step: int, array: np.ndarray) -> None:
        await self.transport.send(self.me, peer, (self.instr, step), array, tag=self.tag, note=self.note)

    async def recv(self, peer: int, step: int) -> np.ndarray:
        return await self.transport.recv(self.me, peer, (self.instr, step), tag=self.tag)


# -- helpers -----------------------------------------------------------------------------------


def reduce_in_order(parts: Sequence[np.ndarray], reduce_op: str) -> np.ndarray:
    """Combine ``parts`` left to right (group order): the one canonical order of every reduction."""
    try:
        op = REDUCE_OPS[reduce_op]
    except KeyError:
        raise CollectiveError(f"unknown reduce op {reduce_op!r} (known: {', '.join(REDUCE_OPS)})") from None
    return op.reduce(list(parts))


def _index(me: int, group: Sequence[int], what: str) -> int:
    if len(set(group)) != len(group):
        raise CollectiveError(f"{what} over group {tuple(group)}, which names a device twice")
    try:
        return list(group).index(me)
    except ValueError:
        raise CollectiveError(f"device {me} runs {what} over group {tuple(group)}, which does not include it") from None


def _axis(axis: int, ndim: int, what: str) -> int:
    if not -ndim <= axis < ndim:
        raise CollectiveError(f"{what} along axis {axis} of a {ndim}-d buffer")
    return axis % ndim


def _split(x: np.ndarray, axis: int, splits: Sequence[int], g: int, what: str) -> list[np.ndarray]:
    splits = [int(s) for s in splits]
    if len(splits) != g:
        raise CollectiveError(f"{what}: {len(splits)} splits {tuple(splits)} for a group of {g}")
    if any(s < 0 for s in splits) or sum(splits) != x.shape[axis]:
        raise CollectiveError(
            f"{what}: splits {tuple(splits)} do not cut dim {axis} of a buffer of shape {x.shape} (sum {sum(splits)})"
        )
    cuts = np.cumsum(splits)[:-1]
    return np.split(x, cuts, axis=axis)


def _same_except(shape_a, shape_b, axis: int | None) -> bool:
    if len(shape_a) != len(shape_b):
        return False
    return all(a == b for k, (a, b) in enumerate(zip(shape_a, shape_b)) if k != axis)


def _check_block(what: str, me: int, peer: int, got: np.ndarray, mine: np.ndarray, axis: int | None) -> None:
    if got.dtype != mine.dtype or not _same_except(got.shape, mine.shape, axis):
        free = "" if axis is None else f" (any length along axis {axis})"
        raise CollectiveError(
            f"{what}: device {me} got a {got.dtype}{list(got.shape)} block from device {peer} but holds "
            f"{mine.dtype}{list(mine.shape)}; they must agree{free}"
        )


# -- the collectives -----------------------------------------------------------------------------


async def all_gather(ch: Channel, x: np.ndarray, group: Sequence[int], axis: int) -> np.ndarray:
    """Concatenate every member's block along ``axis`` in group order (blocks may differ in length
    along ``axis``)."""
    what = "all_gather"
    _index(ch.me, group, what)
    x = np.asarray(x)
    axis = _axis(axis, x.ndim, what)
    for p in group:
        if p != ch.me:
            await ch.send(p, 0, x)
    blocks = []
    for p in group:
        if p == ch.me:
            blocks.append(x)
            continue
        b = await ch.recv(p, 0)
        _check_block(what, ch.me, p, b, x, axis)
        blocks.append(b)
    return np.concatenate(blocks, axis=axis)


async def reduce_scatter(ch: Channel, x: np.ndarray, group: Sequence[int], axis: int, splits: Sequence[int],
                         reduce_op: str = "sum", reduce_order: Sequence[int] = ()) -> np.ndarray:
    """Reduce the members' buffers (in ``reduce_order`` if given, else group order) and keep chunk
    ``i`` (``splits[i]`` long along ``axis``) on member ``i``."""
    what = "reduce_scatter"
    i = _index(ch.me, group, what)
    order = tuple(reduce_order) or tuple(group)
    if sorted(order) != sorted(group):
        raise CollectiveError(f"{what}: reduce order {order} is not a permutation of the group {tuple(group)}")
    x = np.asarray(x)
    axis = _axis(axis, x.ndim, what)
    pieces = _split(x, axis, splits, len(group), what)
    for j, p in enumerate(group):
        if p != ch.me and pieces[j].shape[axis]:
            await ch.send(p, 0, pieces[j])
    mine = pieces[i]
    if not mine.shape[axis]:
        return reduce_in_order([mine], reduce_op)
    parts = {}
    for p in group:
        if p == ch.me:
            parts[p] = mine
            continue
        b = await ch.recv(p, 0)
        _check_block(what, ch.me, p, b, mine, None)
        parts[p] = b
    return reduce_in_order([parts[p] for p in order], reduce_op)


async def all_reduce(ch: Channel, x: np.ndarray, group: Sequence[int], reduce_op: str = "sum") -> np.ndarray:
    """Every member gets the reduction (group order) of all members' buffers: a reduce-scatter of
    the flattened buffer in ``g`` balanced chunks (step 0), then an all-gather (step 1)."""
    what = "all_reduce"
    i = _index(ch.me, group, what)
    x = np.asarray(x)
    g = len(group)
    flat = np.ascontiguousarray(x).reshape(-1)
    sizes = balanced_chunks(flat.size, g)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    pieces = [flat[offsets[j] : offsets[j + 1]] for j in range(g)]
    for j, p in enumerate(group):
        if p != ch.me and sizes[j]:
            await ch.send(p, 0, pieces[j])
    if sizes[i]:
        parts = []
        for p in group:
            if p == ch.me:
                parts.append(pieces[i])
                continue
            b = await ch.recv(p, 0)
            _check_block(what, ch.me, p, b, pieces[i], None)
            parts.append(b)
        mine = reduce_in_order(parts, reduce_op)
        for p in group:
            if p != ch.me:
                await ch.send(p, 1, mine)
    else:
        mine = reduce_in_order([pieces[i]], reduce_op)
    chunks = []
    for j, p in enumerate(group):
        if p == ch.me or not sizes[j]:
            chunks.append(mine if p == ch.me else reduce_in_order([pieces[j]], reduce_op))
            continue
        b = await ch.recv(p, 1)
        _check_block(what, ch.me, p, b, pieces[j], None)
        chunks.append(b)
    return np.concatenate(chunks).reshape(x.shape)


async def all_to_all(ch: Channel, x: np.ndarray, group: Sequence[int], split_axis: int, splits: Sequence[int],
                     concat_axis: int) -> np.ndarray:
    """Cut ``x`` along ``split_axis`` into chunks of ``splits``, send chunk ``j`` to member ``j``,
    concatenate what arrives along ``concat_axis`` in group order."""
    what = "all_to_all"
    i = _index(ch.me, group, what)
    x = np.asarray(x)
    split_axis = _axis(split_axis, x.ndim, what)
    concat_axis = _axis(concat_axis, x.ndim, what)
    pieces = _split(x, split_axis, splits, len(group), what)
    for j, p in enumerate(group):
        if p != ch.me:
            await ch.send(p, 0, pieces[j])
    blocks = []
    for p in group:
        if p == ch.me:
            blocks.append(pieces[i])
            continue
        b = await ch.recv(p, 0)
        _check_block(what, ch.me, p, b, pieces[i], concat_axis)
        blocks.append(b)
    return np.concatenate(blocks, axis=concat_axis)


async def collective_permute(ch: Channel, x: np.ndarray | None, pairs: Sequence[tuple[int, int]],
                             shape: Sequence[int], dtype) -> np.ndarray:
    """Each ``(source, target)`` pair moves the source's ``x`` to the target; a device that is no
    pair's target gets zeros of ``shape`` / ``dtype``. ``x`` is read only on sources."""
    what = "collective_permute"
    targets = [t for _, t in pairs]
    dup = sorted({t for t in targets if targets.count(t) > 1})
    if dup:
        raise CollectiveError(f"{what}: device {dup[0]} is the target of more than one pair in {tuple(pairs)}")
    sends = [t for s, t in pairs if s == ch.me]
    if sends and x is None:
        raise CollectiveError(f"{what}: device {ch.me} is a source in {tuple(pairs)} but has no buffer to send")
    for t in sends:
        if t != ch.me:
            await ch.send(t, 0, x)
    sources = [s for s, t in pairs if t == ch.me]
    if not sources:
        return np.zeros(tuple(shape), dtype=np.dtype(dtype))
    s = sources[0]
    return np.array(x, copy=True) if s == ch.me else await ch.recv(s, 0)


async def broadcast(ch: Channel, x: np.ndarray | None, group: Sequence[int], root: int) -> np.ndarray:
    """``root``'s ``x`` to every member of ``group`` (initial placement of a replicated value)."""
    what = "broadcast"
    _index(ch.me, group, what)
    if root not in group:
        raise CollectiveError(f"{what}: root {root} is not in group {tuple(group)}")
    if ch.me == root:
        if x is None:
            raise CollectiveError(f"{what}: root device {root} has no buffer to send")
        x = np.asarray(x)
        for p in group:
            if p != root:
                await ch.send(p, 0, x)
        return x
    return await ch.recv(root, 0)


# -- running a schedule instruction --------------------------------------------------------------


def signature(instr, dtype=None, shape=None) -> tuple:
    """What must be equal on every device that runs one collective instruction together (plain
    data: it travels with each message and is compared on receipt)."""
    kind = instr.kind
    if kind == "all_gather":
        body = (tuple(instr.group), instr.axis)
    elif kind == "reduce_scatter":
        body = (tuple(instr.group), instr.axis, tuple(instr.splits), instr.reduce_op)
    elif kind == "all_reduce":
        body = (tuple(instr.group), instr.reduce_op, tuple(shape) if shape is not None else None)
    elif kind == "all_to_all":
        body = (tuple(instr.group), instr.split_axis, tuple(instr.splits), instr.concat_axis)
    elif kind == "collective_permute":
        return (kind, tuple(tuple(p) for p in instr.pairs))
    else:
        raise CollectiveError(f"{kind} is not a collective")
    return (kind,) + body + (None if dtype is None else np.dtype(dtype).str,)


def participants(instr) -> tuple[int, ...]:
    """The devices an instruction exchanges data between (for a permute: every device in a pair)."""
    if instr.kind == "collective_permute":
        seen: list[int] = []
        for s, t in instr.pairs:
            for d in (s, t):
                if d not in seen:
                    seen.append(d)
        return tuple(seen)
    return tuple(instr.group)


async def run_collective(ch: Channel, instr, x: np.ndarray | None, algorithm: str = "direct") -> np.ndarray:
    """Run a schedule's collective instruction on this device's buffer ``x``."""
    if algorithm not in ALGORITHMS:
        raise CollectiveError(f"unknown collective algorithm {algorithm!r} (available: {', '.join(ALGORITHMS)})")
    kind = instr.kind
    if kind == "all_gather":
        return await all_gather(ch, x, instr.group, instr.axis)
    if kind == "reduce_scatter":
        return await reduce_scatter(ch, x, instr.group, instr.axis, instr.splits, instr.reduce_op,
                                    getattr(instr, "reduce_order", ()))
    if kind == "all_reduce":
        return await all_reduce(ch, x, instr.group, instr.reduce_op)
    if kind == "all_to_all":
        return await all_to_all(ch, x, instr.group, instr.split_axis, instr.splits, instr.concat_axis)
    if kind == "collective_permute":
        return await collective_permute(ch, x, instr.pairs, instr.shape, instr.dtype)
    raise CollectiveError(f"{kind} is not a collective")
