"""Ops on values laid out as only a placement list (or an index set) states: run where they lie.

A tensor-dimension sharding cuts each dim into contiguous blocks; DTensor's placements also
state nested uneven chunks (``[S(0), S(0)]`` on 10 rows over 2x4: 2,2,1,0 | 2,2,1,0), stripes
(``_StridedShard``) and user placements. A value so laid out keeps its exact ``Layout`` in the
partitioner, and an op runs on it without communication when the op is *functorial* over the
held indices: per device, every factor of the op's rule is held as one index set by all the
tensors carrying it, and the factors whose kind needs a whole dim (reduction, need-replication,
permutation) are held whole, in order. The local kernel then computes, on each device, the
result block at exactly the product of those index sets, whatever their order or stride: the
seed's "it is a batch dimension" case, for element-wise ops, batch dims, transposes and
reshapes alike. ``a.t().reshape(32)`` of a ``Shard(0)`` (8, 4) tensor is such a case: each
device holds column r of the transpose, and the merged dim's index set ``{r, r+8, r+16, r+24}``
is DTensor's ``_StridedShard`` output, with no byte moved.

A reduction factor (sum, prod, max, min) held in parts need not be whole: when the devices
that differ only along some mesh axes hold one result block and sum disjoint parts that cover
the whole reduction, each device reduces its part and the result is pending over those axes
(a sum over a flattened strided dim, seed 002: an all-reduce of partial sums, nothing gathered).

Where the op is not functorial over what a device holds (a sort dim, a cumulative sum, a max
some device holds no element of), the partitioner reshards the operand to a tensor-dimension
sharding with the planner's exchange, as for any other reshard.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..ops.factors import PASS_THROUGH, REDUCTION, FactorRule
from ..sharding.axes import AxisRef
from ..sharding.layout_model import Layout

SPLIT_REDUCTIONS = ("sum", "prod", "max", "min")  # reductions a device may run on its part, combined later


def functorial_layouts(rule: FactorRule, operands: Sequence[Layout | None], shapes: Sequence[Sequence[int]],
                       result_shapes: Sequence[Sequence[int]]) -> list[Layout] | None:
    """The layout of each result when every device runs the op on the blocks it holds under
    ``operands`` (None for a literal operand, held whole), or None when the op is not functorial
    over them (module docstring); results pending over the axes a split reduction's parts vary
    along. Pending (partial) operands are not run this way."""
    laid = [L for L in operands if L is not None]
    if not laid or any(L.unreduced for L in laid) or rule.inexact:
        return None
    mesh = laid[0].mesh
    if any(L.mesh.device_ids != mesh.device_ids for L in laid):
        return None
    sizes = rule.sizes
    kept = {f for dims in rule.results for fs in dims for f in fs}
    # held whole: factors whose kind needs the dim, and any the results drop (a size-1 dim
    # reshaped away: a device holding none of it holds none of the result either)
    whole = {f for f, _ in rule.factors if rule.kind(f) != PASS_THROUGH or f not in kept}
    summed = sorted(whole & set(rule.of_kind(REDUCTION))) if rule.reduce_op in SPLIT_REDUCTIONS else []
    whole -= set(summed)
    index_map = [{} for _ in result_shapes]
    contributed: dict[int, np.ndarray] = {}  # per device, the reduction indices it sums (flattened)
    for d in mesh.device_ids:
        held: dict[str, np.ndarray] = {}
        for L, dims, shape in zip(operands, rule.operands, shapes):
            blocks = L.indices(d) if L is not None else tuple(np.arange(n) for n in shape)
            for fs, ix in zip(dims, blocks):
                parts = _factor_sets(ix, [sizes[f] for f in fs])
                if parts is None:
                    return None
                for f, part in zip(fs, parts):
                    if f not in held:
                        held[f] = part
                    elif not np.array_equal(held[f], part):
                        return None
        for f in whole & held.keys():
            if not np.array_equal(held[f], np.arange(sizes[f])):
                return None
        contributed[d] = _product([held.get(f, np.arange(sizes[f])) for f in summed], [sizes[f] for f in summed])
        for r, dims in enumerate(rule.results):
            index_map[r][d] = tuple(_product([held.get(f, np.arange(sizes[f])) for f in fs], [sizes[f] for f in fs])
                                    for fs in dims)
    if not all(covers(m, shape) for m, shape in zip(index_map, result_shapes)):
        return None  # some result element no device computes (operands split on factors that do not meet)
    pending = _pending_axes(mesh, contributed, index_map, math.prod(sizes[f] for f in summed))
    if pending is None or (pending and rule.reduce_op != "sum" and any(len(c) == 0 for c in contributed.values())):
        return None  # a max / min over an empty block has no identity to stand for it
    return [Layout(mesh, tuple(int(n) for n in shape), _shared(m), pending, rule.reduce_op)
            for shape, m in zip(result_shapes, index_map)]


def _pending_axes(mesh, contributed: dict[int, np.ndarray], index_map, total: int) -> tuple[AxisRef, ...] | None:
    """The mesh axes over which devices hold pending contributions to one result block: those
    along which the reduction indices a device sums vary, provided every group of devices
    differing only along them holds one result block and sums disjoint parts covering the whole
    reduction (a partial sum over those axes). () when every device sums it all; None when the
    parts do not so tile it."""
    full = np.arange(total)
    if all(np.array_equal(c, full) for c in contributed.values()):
        return ()
    axes = [a for a in mesh.axis_names
            if any(len({contributed[d].tobytes() for d in g}) > 1 for g in mesh.groups_over([a]))]
    for g in mesh.groups_over(axes):
        if any(not all(np.array_equal(x, y) for x, y in zip(m[d], m[g[0]])) for m in index_map for d in g):
            return None
        if not np.array_equal(np.sort(np.concatenate([contributed[d] for d in g])), full):
            return None
    return tuple(AxisRef(a) for a in axes)


def _factor_sets(ix: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray] | None:
    """Split a dim's held indices into one index set per factor (major to minor), or None when
    they are not the product of such sets in lexicographic order (what the local kernel keeps
    when it reshapes the block)."""
    ix = np.asarray(ix)
    if not sizes:  # a dim with no factor has size 1
        return [] if np.array_equal(ix, [0]) else None
    if len(sizes) == 1:
        return [ix]
    digits, rest = [], ix
    for n in reversed(sizes):
        digits.append(rest % n)
        rest = rest // n
    digits.reverse()
    sets = [np.array(list(dict.fromkeys(dg.tolist())), dtype=np.int64) for dg in digits]
    if not np.array_equal(_product(sets, sizes), ix):
        return None
    return sets


def _product(sets: Sequence[np.ndarray], sizes: Sequence[int]) -> np.ndarray:
    """The indices of a dim made of factors ``sizes``, held as ``sets`` (lexicographic order)."""
    if not sets:
        return np.zeros(1, dtype=np.int64)
    out = np.zeros(1, dtype=np.int64)
    for s, n in zip(sets, sizes):
        out = (out[:, None] * n + np.asarray(s, dtype=np.int64)[None, :]).reshape(-1)
    return out


def covers(index_map: dict, shape: Sequence[int]) -> bool:
    """Whether the devices' blocks (products of per-dim index arrays) hold every element of an
    array of ``shape``. Per dim, the indices fall in classes by which distinct blocks hold them;
    the array is covered when every product of one class per dim has a block in common. (A
    matmul whose rows are split one way and whose columns another computes on each device only
    its rows by its columns: the rest of the result is nobody's.)"""
    blocks = list({tuple(ix.tobytes() for ix in b): b for b in index_map.values()}.values())
    reach = {(1 << len(blocks)) - 1}  # the blocks holding some cell of the dims seen so far
    words = (len(blocks) + 63) // 64
    for k, n in enumerate(shape):
        held = np.zeros((int(n), words), dtype=np.uint64)  # per index, the blocks holding it (bits)
        for j, b in enumerate(blocks):
            held[np.asarray(b[k], dtype=np.int64), j // 64] |= np.uint64(1 << (j % 64))
        classes = {int.from_bytes(row.tobytes(), "little") for row in np.unique(held, axis=0)}
        reach = {r & c for r in reach for c in classes}
        if 0 in reach:
            return False
    return True


def _shared(index_map: dict) -> dict:
    """Devices holding equal index arrays share one (read-only) array, as the layouts do."""
    seen: dict[bytes, np.ndarray] = {}
    out = {}
    for d, ixs in index_map.items():
        shared = []
        for ix in ixs:
            key = np.asarray(ix, dtype=np.int64).tobytes()
            if key not in seen:
                a = np.array(ix, dtype=np.int64)
                a.setflags(write=False)
                seen[key] = a
            shared.append(seen[key])
        out[d] = tuple(shared)
    return out


__all__ = ["functorial_layouts"]
