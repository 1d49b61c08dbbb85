"""The collective library, written once: async functions from one device's point of view over a
``Channel`` (a transport, the device's id and the instruction's message key and tag).

Every backend runs these same functions; only the transport differs (in-memory queues for the
local backend, Ray object transfers between actors for the Ray backend).

Canonical reduction order. Every reduction combines the contributions left to right in group
order (``reduce_in_order``); the group is listed in ascending mesh coordinate, so results are the
same bits whichever algorithm, backend or run produced them. Another algorithm must compute the
same association ``((x[g0] op x[g1]) op x[g2]) ...`` for every element (float addition commutes,
so ``acc op x`` and ``x op acc`` agree, but it does not associate).

Three algorithms (``ALGORITHMS``, chosen by ``run_collective(..., algorithm=...)``):

* ``direct``: each member sends each piece straight to the member that needs it, in one step
  (two for all-reduce); per device the bytes equal the analytic minimum
  (``simshard.report.analytic_min_bytes``): all-gather, reduce-scatter and all-to-all move
  ``(g-1)/g`` of the group's data, all-reduce ``2(g-1)/g`` (a reduce-scatter then an all-gather).
* ``ring``: every message goes to the next member of the ring. A textbook ring reduce-scatter
  starts chunk ``c``'s sum at member ``c+1`` and so breaks the canonical order; the ring here
  is order-keeping instead: every chunk's running partial travels ``g0 -> g1 -> ... -> g[-1]``
  (a pipelined chain, each member combining its contribution on the right), then
  - all-reduce: ``g[-1]`` holds the whole result and pipelines it on round the ring
    (``g[-1] -> g0 -> ... -> g[-2]``), chunk by chunk: ``2(g-1)N`` bytes over the group, the
    same total as direct, but uneven per device;
  - reduce-scatter: ``g[-1]`` sends each finished chunk to its owner, the one non-neighbour
    message: ``(g-1)N (1 + 1/g)`` bytes over the group (direct: ``(g-1)N``);
  - all-gather has no arithmetic: a plain ring, ``g-1`` steps, each forwarding the block it got
    last, the same bytes as direct.
  All-to-all and collective-permute send personalised pieces, which a ring could only forward at
  a cost in bytes: they run direct under either algorithm.
* ``oneshot`` (all-reduce only; every other collective runs direct): each member sends its whole
  buffer to every other member in one step and reduces all of them itself, in group order. Half
  the messages and one step instead of two, for ``(g-1)N`` bytes per device instead of
  ``2(g-1)N/g``: the usual choice for small, latency-bound all-reduces (the report shows the
  extra bytes against the analytic minimum).

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

from simshard.sharding.reduce_ops import REDUCE_OPS
from simshard.report.collective_cost import balanced_chunks, sends
from simshard.spmd.dispatch import COLLECTIVE_KINDS, dispatch_table

from ..errors import CollectiveError
from .transport import Transport

ALGORITHMS = ("direct", "ring", "oneshot")


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

    def expect(self, peer: int, step: int, out: np.ndarray) -> None:
        self.transport.expect(self.me, peer, (self.instr, step), out)


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


def _flat_chunks(x: np.ndarray, g: int) -> tuple[list[int], list[np.ndarray]]:
    """An all-reduce's pieces: the flattened buffer in ``g`` balanced chunks (sizes, views)."""
    flat = np.ascontiguousarray(x).reshape(-1)
    sizes = balanced_chunks(flat.size, g)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    return sizes, [flat[offsets[j]: offsets[j + 1]] for j in range(g)]


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


async def _receive_all(ch: Channel, group: Sequence[int], step: int, mine: np.ndarray, what: str,
                       axis: int | None = None) -> list[np.ndarray]:
    """Every member's block of ``step`` in group order, this device's own being ``mine``; each one
    received checked against it (free along ``axis``)."""
    blocks = []
    for p in group:
        if p == ch.me:
            blocks.append(mine)
            continue
        b = await ch.recv(p, step)
        _check_block(what, ch.me, p, b, mine, axis)
        blocks.append(b)
    return blocks


def _slots(like: np.ndarray, g: int, axis: int) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """An output of ``g`` blocks shaped like ``like`` joined along ``axis``, and its blocks (views),
    when each block is one contiguous run of the output (``axis`` is the first dimension longer
    than 1): a transport can then receive a block straight into its place. None otherwise."""
    if like.ndim == 0 or any(n != 1 for n in like.shape[:axis]):
        return None
    shape = list(like.shape)
    shape[axis] *= g
    out = np.empty(shape, dtype=like.dtype)
    n = like.shape[axis]
    return out, [out[(slice(None),) * axis + (slice(k * n, (k + 1) * n),)] for k in range(g)]


def _post(ch: Channel, group: Sequence[int], step: int, slots) -> None:
    """Offer the transport each peer's place in the output (``_slots``) for its block of ``step``."""
    if slots is not None:
        for p, view in zip(group, slots[1]):
            if p != ch.me:
                ch.expect(p, step, view)


def _join(blocks: Sequence[np.ndarray], slots, axis: int) -> np.ndarray:
    """The blocks joined along ``axis``: in the posted output (``_slots``), copying only those not
    received in place, when every block has its slot's shape; else concatenated."""
    if slots is None or any(b.shape != v.shape or b.dtype != v.dtype for b, v in zip(blocks, slots[1])):
        return np.concatenate(blocks, axis=axis)
    out, views = slots
    for b, view in zip(blocks, views):
        if b is not view:
            view[...] = b
    return out


def check_algorithm(algorithm: str) -> None:
    """Refuse an algorithm name this library does not have."""
    if algorithm not in ALGORITHMS:
        raise CollectiveError(f"unknown collective algorithm {algorithm!r} (available: {', '.join(ALGORITHMS)})")


# -- the collectives -----------------------------------------------------------------------------


async def all_gather(ch: Channel, x: np.ndarray, group: Sequence[int], axis: int) -> np.ndarray:
    """Concatenate every member's block along ``axis`` in group order (blocks may differ in length
    along ``axis``)."""
    what = "all_gather"
    _index(ch.me, group, what)
    x = np.asarray(x)
    axis = _axis(axis, x.ndim, what)
    slots = _slots(x, len(group), axis)  # blocks are usually equal: offer their places
    _post(ch, group, 0, slots)
    for p in group:
        if p != ch.me:
            await ch.send(p, 0, x)
    return _join(await _receive_all(ch, group, 0, x, what, axis), slots, axis)


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
        if p != ch.me and sends(what, pieces[j].shape[axis]):
            await ch.send(p, 0, pieces[j])
    mine = pieces[i]
    if not sends(what, mine.shape[axis]):
        return reduce_in_order([mine], reduce_op)
    parts = dict(zip(group, await _receive_all(ch, group, 0, mine, what)))
    return reduce_in_order([parts[p] for p in order], reduce_op)


async def all_reduce(ch: Channel, x: np.ndarray, group: Sequence[int], reduce_op: str = "sum") -> np.ndarray:
    """Every member gets the reduction (group order) of all members' buffers: a reduce-scatter of
    the flattened buffer in ``g`` balanced chunks (step 0), then an all-gather (step 1)."""
    what = "all_reduce"
    i = _index(ch.me, group, what)
    x = np.asarray(x)
    g = len(group)
    sizes, pieces = _flat_chunks(x, g)
    out = np.empty(x.size, dtype=x.dtype)
    slots = (out, _flat_chunks(out, g)[1])  # where each member's finished chunk goes (step 1)
    for j, p in enumerate(group):
        if p != ch.me and sends(what, sizes[j]):
            ch.expect(p, 1, slots[1][j])
            await ch.send(p, 0, pieces[j])
    if sends(what, sizes[i]):
        mine = reduce_in_order(await _receive_all(ch, group, 0, pieces[i], what), reduce_op)
        for p in group:
            if p != ch.me:
                await ch.send(p, 1, mine)
    else:
        mine = reduce_in_order([pieces[i]], reduce_op)
    chunks = []
    for j, p in enumerate(group):
        if p == ch.me or not sends(what, sizes[j]):
            chunks.append(mine if p == ch.me else reduce_in_order([pieces[j]], reduce_op))
            continue
        b = await ch.recv(p, 1)
        _check_block(what, ch.me, p, b, pieces[j], None)
        chunks.append(b)
    return _join(chunks, slots, 0).reshape(x.shape)


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
    slots = _slots(pieces[i], len(group), concat_axis)  # the members' chunks are usually alike
    _post(ch, group, 0, slots)
    for j, p in enumerate(group):
        if p != ch.me:
            await ch.send(p, 0, pieces[j])
    return _join(await _receive_all(ch, group, 0, pieces[i], what, concat_axis), slots, concat_axis)


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
            await ch.send(t, 0, x)
    if source is None:
        return np.zeros(tuple(shape), dtype=np.dtype(dtype))
    return np.array(x, copy=True) if source == me else await ch.recv(source, 0)


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


# -- ring variants (see the module docstring) -----------------------------------------------------


def _ring_neighbours(me: int, group: Sequence[int]) -> tuple[int, int, int]:
    """(my position, the member before me, the member after me) round the ring."""
    i = list(group).index(me)
    g = len(group)
    return i, group[(i - 1) % g], group[(i + 1) % g]


async def ring_all_gather(ch: Channel, x: np.ndarray, group: Sequence[int], axis: int) -> np.ndarray:
    """``all_gather`` round the ring: at step ``s`` send the block of member ``i - s`` to the next
    member and get the block of member ``i - s - 1`` from the previous one."""
    what = "all_gather"
    _index(ch.me, group, what)
    x = np.asarray(x)
    axis = _axis(axis, x.ndim, what)
    g = len(group)
    i, prev, nxt = _ring_neighbours(ch.me, group)
    blocks: list[np.ndarray | None] = [None] * g
    blocks[i] = x
    for s in range(g - 1):
        await ch.send(nxt, s, blocks[(i - s) % g])
        b = await ch.recv(prev, s)
        _check_block(what, ch.me, prev, b, x, axis)
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
            _check_block(what, ch.me, prev, got, mine, None)
            acc = op.combine(got, mine)
        if nxt is not None:
            await ch.send(nxt, c, acc)
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
    i = _index(ch.me, group, what)
    order = tuple(reduce_order) or tuple(group)
    if sorted(order) != sorted(group):
        raise CollectiveError(f"{what}: reduce order {order} is not a permutation of the group {tuple(group)}")
    if reduce_op not in REDUCE_OPS:
        reduce_in_order([x], reduce_op)  # raises the unknown-op error
    x = np.asarray(x)
    axis = _axis(axis, x.ndim, what)
    g = len(group)
    pieces = _split(x, axis, splits, g, what)
    done = await _chain_reduce(ch, pieces, order, reduce_op, what)
    last = order[-1]
    if ch.me == last:
        for j, p in enumerate(group):
            if p != last and pieces[j].shape[axis]:
                await ch.send(p, g + j, done[j])
        return done[i]
    if not pieces[i].shape[axis]:
        return reduce_in_order([pieces[i]], reduce_op)
    got = await ch.recv(last, g + i)
    _check_block(what, ch.me, last, got, pieces[i], None)
    return got


async def ring_all_reduce(ch: Channel, x: np.ndarray, group: Sequence[int], reduce_op: str = "sum") -> np.ndarray:
    """``all_reduce`` as an order-keeping chain (``g`` balanced chunks of the flattened buffer,
    steps ``0..g-1``) ending on the last member, which then pipelines the result on round the ring
    (steps ``g..2g-1``): ``g[-1] -> g0 -> g1 -> ... -> g[-2]``."""
    what = "all_reduce"
    _index(ch.me, group, what)
    if reduce_op not in REDUCE_OPS:
        reduce_in_order([x], reduce_op)
    x = np.asarray(x)
    g = len(group)
    sizes, pieces = _flat_chunks(x, g)
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
            _check_block(what, ch.me, prev, chunk, pieces[c], None)
        if nxt is not None:
            await ch.send(nxt, g + c, chunk)
        chunks.append(chunk)
    return np.concatenate(chunks).reshape(x.shape)


async def oneshot_all_reduce(ch: Channel, x: np.ndarray, group: Sequence[int], reduce_op: str = "sum") -> np.ndarray:
    """``all_reduce`` in one step: every member's whole buffer to every other member (one message
    each, step 0), then each reduces all ``g`` buffers in group order itself."""
    what = "all_reduce"
    _index(ch.me, group, what)
    x = np.asarray(x)
    flat = np.ascontiguousarray(x).reshape(-1)  # as direct does: a 0-d buffer travels as [1]
    if not flat.size:  # nothing to send: every member knows the shape from the tag
        return reduce_in_order([flat] * len(group), reduce_op).reshape(x.shape)
    for p in group:
        if p != ch.me:
            await ch.send(p, 0, flat)
    return reduce_in_order(await _receive_all(ch, group, 0, flat, what), reduce_op).reshape(x.shape)


# -- running a schedule instruction --------------------------------------------------------------


def signature(instr, dtype=None, shape=None) -> tuple:
    """What must be equal on every device that runs one collective instruction together (plain
    data: it travels with each message and is compared on receipt)."""
    body = SIGNATURES.get(instr.kind)
    if body is None:
        raise CollectiveError(f"{instr.kind} is not a collective")
    if instr.kind == "collective_permute":  # no dtype: a device that only receives holds no buffer
        return (instr.kind,) + body(instr, shape)
    return (instr.kind,) + body(instr, shape) + (None if dtype is None else np.dtype(dtype).str,)


# each collective kind's signature fields, (instruction, all-reduce shape) -> tuple
SIGNATURES = dispatch_table({
    "all_gather": lambda instr, shape: (tuple(instr.group), instr.axis),
    "reduce_scatter": lambda instr, shape: (tuple(instr.group), instr.axis, tuple(instr.splits), instr.reduce_op),
    "all_reduce": lambda instr, shape: (tuple(instr.group), instr.reduce_op,
                                        tuple(shape) if shape is not None else None),
    "all_to_all": lambda instr, shape: (tuple(instr.group), instr.split_axis, tuple(instr.splits), instr.concat_axis),
    "collective_permute": lambda instr, shape: (tuple(tuple(p) for p in instr.pairs),),
}, "runtime/collectives.py (signature)", COLLECTIVE_KINDS)


async def _run_all_gather(ch: Channel, instr, x, algorithm: str) -> np.ndarray:
    return await (ring_all_gather if algorithm == "ring" else all_gather)(ch, x, instr.group, instr.axis)


async def _run_reduce_scatter(ch: Channel, instr, x, algorithm: str) -> np.ndarray:
    return await (ring_reduce_scatter if algorithm == "ring" else reduce_scatter)(
        ch, x, instr.group, instr.axis, instr.splits, instr.reduce_op, getattr(instr, "reduce_order", ()))


async def _run_all_reduce(ch: Channel, instr, x, algorithm: str) -> np.ndarray:
    chosen = {"ring": ring_all_reduce, "oneshot": oneshot_all_reduce}.get(algorithm, all_reduce)
    return await chosen(ch, x, instr.group, instr.reduce_op)


async def _run_all_to_all(ch: Channel, instr, x, algorithm: str) -> np.ndarray:
    return await all_to_all(ch, x, instr.group, instr.split_axis, instr.splits, instr.concat_axis)


async def _run_collective_permute(ch: Channel, instr, x, algorithm: str) -> np.ndarray:
    return await collective_permute(ch, x, instr.pairs, instr.shape, instr.dtype)


# each collective kind run under an algorithm (all-to-all and permute run direct under any)
RUNS = dispatch_table({
    "all_gather": _run_all_gather, "reduce_scatter": _run_reduce_scatter, "all_reduce": _run_all_reduce,
    "all_to_all": _run_all_to_all, "collective_permute": _run_collective_permute,
}, "runtime/collectives.py (run_collective)", COLLECTIVE_KINDS)


async def run_collective(ch: Channel, instr, x: np.ndarray | None, algorithm: str = "direct") -> np.ndarray:
    """Run a schedule's collective instruction on this device's buffer ``x``."""
    check_algorithm(algorithm)
    run = RUNS.get(instr.kind)
    if run is None:
        raise CollectiveError(f"{instr.kind} is not a collective")
    return await run(ch, instr, x, algorithm)
