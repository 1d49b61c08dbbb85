"""From proposed moves to checked steps: each move is verified on the layouts it connects.

A move proposed on atoms (``greedy.Move``) is only a claim that a collective over some device
groups turns one layout into the next. ``realize`` checks that claim on the layouts (uneven dims
do not always nest: 10 rows over 2 then over 8 devices are blocks of 5 and of 2, and the second
blocks do not sit inside the first) and, when it holds, returns the ``Step`` with its groups,
per-device emission data (``PerDevice``) and byte counts; None when it does not. The check runs
on the layouts' boxes (each block a range per dim) with numpy for all devices at once, and on
the index arrays where the boxes do not show the claim (an empty block's range can sit anywhere)
or a layout has none; bytes are counted from the local-shape arrays either way.
"""

from __future__ import annotations

import numpy as np

from ...sharding.layout import Layout
from ...sharding.mesh import Mesh
from ...sharding.reduce_ops import REDUCE_OPS
from ...sharding.rows import distinct_rows
from ..builder import PerDevice
from .greedy import Move
from .layout_checks import (
    ArrayCompare, as_positions, boxes_of, groups_of, no_bytes, other_dims, positions, same_array, same_block, same_boxes,
    split_over, stacked,
)
from .plan import Step, axes_label, layout_of, shapes_of, span
from .reductions import all_reduce_move, permute_move, reduce_scatter_move


def realize(move: Move, before, after, shape, itemsize: int, mesh: Mesh) -> Step | None:
    """The step ``move`` makes from ``before`` to ``after``, checked on their layouts (None
    where the move's claim does not hold)."""
    L, L2 = layout_of(before, shape), layout_of(after, shape)
    fn = {
        "slice": _slice,
        "all_gather": _all_gather,
        "all_to_all": _all_to_all,
        "reduce_scatter": reduce_scatter_move,
        "all_reduce": all_reduce_move,
        "collective_permute": permute_move,
        "embed": _embed,
        "unreduce": _unreduce,
    }[move.kind]
    return fn(move, before, after, L, L2, tuple(shape), itemsize, mesh)


def _slice(move, before, after, L, L2, shape, item, mesh):
    pos = slice_positions(L, L2)
    if pos is None:
        return None
    z = no_bytes(L.devices)
    return Step("slice", before, after, shape, item, dim=move.dim, sent=z, received=z, minimum=z, data=pos)


def slice_positions(L: Layout, L2: Layout) -> PerDevice | None:
    """Per device, the local positions of its ``L2`` block inside its ``L`` block (None where
    one is not inside the other)."""
    on_boxes = _slice_on_boxes(L, L2)
    if on_boxes is not None:
        return on_boxes
    pos = {}
    # by identity within this call, over arrays L and L2 hold (numpy arrays do not hash)
    seen: dict[tuple[int, int], tuple | None] = {}  # by index arrays: devices share them (flat_layout)
    blocks: dict[tuple[int, int], tuple | None] = {}  # by block tuples, which devices share too
    for d in L.devices:
        outer_block, inner_block = L.index_map[d], L2.index_map[d]
        bkey = (id(outer_block), id(inner_block))
        if bkey not in blocks:
            per = []
            for outer, inner in zip(outer_block, inner_block):
                key = (id(outer), id(inner))
                if key not in seen:
                    seen[key] = _positions_of(outer, inner)
                if seen[key] is None:
                    break
                per.append(seen[key])
            blocks[bkey] = tuple(per) if len(per) == len(outer_block) else None
        if blocks[bkey] is None:
            return None
        pos[d] = blocks[bkey]
    return PerDevice.of(sorted(pos), pos)


def _slice_on_boxes(L: Layout, L2: Layout) -> PerDevice | None:
    """``slice_positions`` from the boxes, once per distinct (outer start, inner block); None
    when a layout has no boxes or an inner block is not shown to lie inside its outer one."""
    a, b = L.boxes, L2.boxes
    if a is None or b is None or not np.array_equal(a.ids, b.ids):
        return None
    empty = b.lo == b.hi
    if not ((empty | ((a.lo <= b.lo) & (b.hi <= a.hi))).all()):
        return None
    start = np.where(empty, 0, b.lo - a.lo)
    distinct, _, inverse = distinct_rows(np.concatenate([start, b.sizes], axis=1))
    rank = start.shape[1]
    made = [tuple(range(row[k], row[k] + row[rank + k]) for k in range(rank)) for row in distinct.tolist()]
    return PerDevice(a.ids, inverse, made)


def _positions_of(outer: np.ndarray, inner: np.ndarray) -> range | tuple | None:
    """``positions`` as a range where they are one (two whole ranges, block layouts: without
    searching), else as a tuple of ints."""
    if len(inner) and len(outer):
        lo_o, hi_o, range_o = span(outer)
        lo_i, hi_i, range_i = span(inner)
        if range_o and range_i:
            if lo_i < lo_o or hi_i > hi_o:
                return None
            return range(lo_i - lo_o, hi_i - lo_o + 1)
    q = positions(outer, inner)
    return None if q is None else as_positions(q)


def _all_gather(move, before, after, L, L2, shape, item, mesh):
    k = move.dim
    groups, G = groups_of(mesh, move.atoms)
    if not (_gather_on_boxes(L, L2, k, G) or _gather_on_arrays(L, L2, k, groups)):
        return None
    sh = shapes_of(L)
    r = sh.rows(G)
    n = sh.elements[r]
    rec = sh.per_device((n.sum(axis=1, keepdims=True) - n) * item, G)
    return Step("all_gather", before, after, shape, item, tuple(groups), axes_label(mesh, move.atoms), dim=k,
                sent=sh.per_device(n * (G.shape[1] - 1) * item, G), received=rec, minimum=rec,
                data=PerDevice.by_rows(sh.ids, r, groups))


def _gather_on_boxes(L, L2, k, G) -> bool:
    """On boxes: each member's ``L2`` block is its ``L`` block with dim ``k`` the group's blocks
    one after another, and the members' blocks agree off ``k``."""
    if (got := boxes_of(L, L2, G)) is None:
        return False
    a, r, b, r2 = got
    off = other_dims(len(L.shape), (k,))
    return (same_boxes(a, r, b, r2, off) and same_boxes(a, r, a, r[:, :1], off)
            and stacked(a, r, k, b, r2))


def _gather_on_arrays(L, L2, k, groups) -> bool:
    eq = ArrayCompare()
    for G in groups:
        cat = np.concatenate([L.index_map[m][k] for m in G])
        for m in G:
            if not (eq(L2.index_map[m][k], cat) and same_block(L, m, L2, m, (k,), eq)
                    and same_block(L, G[0], L, m, (k,), eq)):
                return False
    return True


def _all_to_all(move, before, after, L, L2, shape, item, mesh):
    i, j = move.dim, move.tgt_dim
    groups, G = groups_of(mesh, move.atoms)
    if not (_all_to_all_on_boxes(L, L2, i, j, G) or _all_to_all_on_arrays(L, L2, i, j, groups)):
        return None
    # chunk q -> m is q's block with dim j cut to m's split: other(q) * sp[m] elements, with
    # other(q) the elements of q's block per index of dim j (sums in O(g), not a g x g table)
    sh, sh2 = shapes_of(L), shapes_of(L2)
    r = sh.rows(G)
    width = sh.dims[r[:, :1], j]  # the group's dim j, whole on every member
    other = np.where(width > 0, sh.elements[r] // np.maximum(width, 1), 0)
    sp = sh2.dims[sh2.rows(G), j]
    rec = sp * (other.sum(axis=1, keepdims=True) - other) * item
    sent = other * (sp.sum(axis=1, keepdims=True) - sp) * item
    data = PerDevice.by_rows(sh.ids, r, list(zip(groups, map(tuple, sp.tolist()))))  # (group, splits)
    return Step("all_to_all", before, after, shape, item, tuple(groups), axes_label(mesh, move.atoms), dim=i, tgt_dim=j,
                sent=sh.per_device(sent, G), received=sh.per_device(rec, G), minimum=sh.per_device(sent, G), data=data)


def _all_to_all_on_boxes(L, L2, i, j, G) -> bool:
    """On boxes: dim ``j`` of the group's first block is split over the members in order, dim
    ``i`` gathers the members' blocks in order, the rest agrees."""
    if (got := boxes_of(L, L2, G)) is None:
        return False
    a, r, b, r2 = got
    off = other_dims(len(L.shape), (i, j))
    return (stacked(b, r2, j, a, r[:, :1]) and same_boxes(a, r, a, r[:, :1], [j]) and stacked(a, r, i, b, r2)
            and same_boxes(a, r, b, r2, off) and same_boxes(a, r, a, r[:, :1], off))


def _all_to_all_on_arrays(L, L2, i, j, groups) -> bool:
    for G in groups:
        if not split_over(L, L2, j, G):
            return False
        B = L.index_map[G[0]][j]
        cat_i = np.concatenate([L.index_map[m][i] for m in G])
        for m in G:
            if not same_array(L.index_map[m][j], B) or not same_array(L2.index_map[m][i], cat_i):
                return False
            if not same_block(L, m, L2, m, (i, j)) or not same_block(L, G[0], L, m, (i, j)):
                return False
    return True


def _embed(move, before, after, L, L2, shape, item, mesh):
    k = move.dim
    if REDUCE_OPS[L2.reduce_op].name == "avg":
        return None
    widths = {}
    for d in L.devices:
        if not same_block(L, d, L2, d, (k,)):
            return None
        q = positions(L2.index_map[d][k], L.index_map[d][k])
        if q is None:
            return None
        n, n2 = len(L.index_map[d][k]), len(L2.index_map[d][k])
        lo = int(q[0]) if n else 0
        if n and not np.array_equal(q, np.arange(lo, lo + n)):
            return None
        w = [(0, 0)] * len(shape)
        w[k] = (lo, n2 - lo - n)
        widths[d] = tuple(w)
    z = no_bytes(L.devices)
    return Step("embed", before, after, shape, item, axes=axes_label(mesh, move.atoms), dim=k, reduce_op=L2.reduce_op,
                sent=z, received=z, minimum=z, data=widths)


def _unreduce(move, before, after, L, L2, shape, item, mesh):
    """Keep the value on the first device of each group over the atoms (every device for an
    idempotent op), the identity elsewhere: data (keep, local shape) per device."""
    if not L.same_blocks(L2):
        return None
    sh = shapes_of(L)
    keep = np.ones(len(sh.ids), dtype=np.int64)
    if not REDUCE_OPS[L2.reduce_op].idempotent:
        order = np.argsort(np.asarray(mesh.device_ids), kind="stable")  # device_ids order -> ascending ids
        for a in move.atoms:
            keep &= mesh.axis_indices(a)[order] == 0
    data = PerDevice.of_table(sh.ids, np.concatenate([keep[:, None], sh.dims], axis=1), lambda row: (bool(row[0]), row[1:]))
    z = no_bytes(L.devices)
    return Step("unreduce", before, after, shape, item, axes=axes_label(mesh, move.atoms), reduce_op=L2.reduce_op,
                sent=z, received=z, minimum=z, data=data)
