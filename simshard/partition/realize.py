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

from functools import lru_cache
from typing import Sequence

import numpy as np

from ..sharding.layout_model import Layout
from ..sharding.mesh import Mesh
from ..sharding.reduce_ops import REDUCE_OPS
from ..sharding.rows import distinct_rows
from .atoms import atom_groups, sorted_atoms
from .builder import PerDevice
from .greedy import Move
from .plan import Step, axes_label, block_size, layout_of, shapes_of, span


def positions(outer: np.ndarray, inner: np.ndarray) -> np.ndarray | None:
    """Where each element of ``inner`` sits in ``outer`` (None if one is missing)."""
    if len(inner) == 0:
        return np.zeros(0, dtype=np.intp)
    if len(outer) == 0:
        return None
    if len(outer) < 2 or np.all(outer[1:] > outer[:-1]):
        q = np.searchsorted(outer, inner)
        if np.any(q >= len(outer)) or not np.array_equal(outer[np.minimum(q, len(outer) - 1)], inner):
            return None
        return q
    where = {int(v): i for i, v in enumerate(outer)}
    try:
        return np.array([where[int(v)] for v in inner], dtype=np.intp)
    except KeyError:
        return None


def _eq(a: np.ndarray, b: np.ndarray) -> bool:
    # layouts share one index array between devices holding the same block: identity first
    return a is b or (len(a) == len(b) and np.array_equal(a, b))


class _Compare:
    """``_eq`` remembered by the arrays' identities, for one move's checks: the layouts share
    index arrays between devices, so thousands of members compare a handful of distinct pairs."""

    def __init__(self):
        self.seen: dict[tuple[int, int], bool] = {}

    def __call__(self, a: np.ndarray, b: np.ndarray) -> bool:
        if a is b:
            return True
        key = (id(a), id(b))
        hit = self.seen.get(key)
        if hit is None:
            hit = self.seen[key] = len(a) == len(b) and bool(np.array_equal(a, b))
        return hit


def _same_block(L: Layout, d: int, L2: Layout, e: int, skip: Sequence[int] = (), eq=_eq) -> bool:
    return all(eq(x, y) for k, (x, y) in enumerate(zip(L.index_map[d], L2.index_map[e])) if k not in skip)


def realize(move: Move, before, after, shape, itemsize: int, mesh: Mesh) -> Step | None:
    L, L2 = layout_of(before, shape), layout_of(after, shape)
    fn = {
        "slice": _slice,
        "all_gather": _all_gather,
        "all_to_all": _all_to_all,
        "reduce_scatter": _reduce_scatter,
        "all_reduce": _all_reduce,
        "collective_permute": _permute,
        "embed": _embed,
        "unreduce": _unreduce,
    }[move.kind]
    return fn(move, before, after, L, L2, tuple(shape), itemsize, mesh)


@lru_cache(maxsize=64)
def _zero(devs: tuple[int, ...]) -> dict[int, int]:
    """Nothing sent or received, per device (shared between steps: never written)."""
    return dict.fromkeys(devs, 0)


def _slice(move, before, after, L, L2, shape, item, mesh):
    pos = slice_positions(L, L2)
    if pos is None:
        return None
    z = _zero(L.devices)
    return Step("slice", before, after, shape, item, dim=move.dim, sent=z, received=z, minimum=z, data=pos)


def slice_positions(L: Layout, L2: Layout) -> PerDevice | None:
    """Per device, the local positions of its ``L2`` block inside its ``L`` block (None where
    one is not inside the other)."""
    on_boxes = _slice_on_boxes(L, L2)
    if on_boxes is not None:
        return on_boxes
    pos = {}
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
        _, lo_o, hi_o, range_o = span(outer)
        _, lo_i, hi_i, range_i = span(inner)
        if range_o and range_i:
            if lo_i < lo_o or hi_i > hi_o:
                return None
            return range(lo_i - lo_o, hi_i - lo_o + 1)
    q = positions(outer, inner)
    return None if q is None else as_positions(q)


def as_positions(q: np.ndarray) -> range | tuple[int, ...]:
    """Local positions as a Slice keeps them: a range where they are one run, else a tuple."""
    if not len(q):
        return range(0)
    if int(q[-1]) - int(q[0]) == len(q) - 1 and bool(np.all(np.diff(q) == 1)):
        return range(int(q[0]), int(q[-1]) + 1)
    return tuple(int(i) for i in q)


def _groups(mesh: Mesh, atoms) -> tuple[tuple[tuple[int, ...], ...], np.ndarray]:
    """The device groups over ``atoms`` and the same as an int array [groups, members]."""
    groups = atom_groups(mesh, atoms)
    return groups, _as_array(groups)


@lru_cache(maxsize=512)
def _as_array(groups: tuple[tuple[int, ...], ...]) -> np.ndarray:
    return np.array(groups, dtype=np.int64).reshape(len(groups), -1)


def _all_gather(move, before, after, L, L2, shape, item, mesh):
    k = move.dim
    groups, G = _groups(mesh, move.atoms)
    if not (_gather_on_boxes(L, L2, k, G) or _gather_on_arrays(L, L2, k, groups)):
        return None
    sh = shapes_of(L)
    r = sh.rows(G)
    n = sh.elements[r]
    rec = sh.per_device((n.sum(axis=1, keepdims=True) - n) * item, G)
    return Step("all_gather", before, after, shape, item, tuple(groups), axes_label(mesh, move.atoms), dim=k,
                sent=sh.per_device(n * (G.shape[1] - 1) * item, G), received=rec, minimum=rec,
                data=PerDevice.by_rows(sh.ids, r, groups))


def _boxes(L, L2, G):
    """Both layouts' boxes and the rows of the groups' members in each, or None (a layout
    without boxes: its claims are checked on the index arrays)."""
    if L.boxes is None or L2.boxes is None:
        return None
    return L.boxes, L.boxes.rows(G), L2.boxes, L2.boxes.rows(G)


def _gather_on_boxes(L, L2, k, G) -> bool:
    """On boxes: each member's ``L2`` block is its ``L`` block with dim ``k`` the group's blocks
    one after another, and the members' blocks agree off ``k``."""
    if (got := _boxes(L, L2, G)) is None:
        return False
    a, r, b, r2 = got
    off = _other_dims(len(L.shape), (k,))
    return (_same(a, r, b, r2, off) and _same(a, r, a, r[:, :1], off)
            and _stacked(a, r, k, b, r2))


def _gather_on_arrays(L, L2, k, groups) -> bool:
    eq = _Compare()
    for G in groups:
        cat = np.concatenate([L.index_map[m][k] for m in G])
        for m in G:
            if not (eq(L2.index_map[m][k], cat) and _same_block(L, m, L2, m, (k,), eq)
                    and _same_block(L, G[0], L, m, (k,), eq)):
                return False
    return True


def _other_dims(rank: int, skip) -> list[int]:
    return [k for k in range(rank) if k not in skip]


def _same(a, ra, b, rb, dims) -> bool:
    """Boxes ``a`` at rows ``ra`` equal boxes ``b`` at rows ``rb`` (broadcast) on ``dims``.
    Equal ranges are equal index arrays; unequal ones may still be (both empty): the caller then
    asks the arrays."""
    if not dims:
        return True
    return bool((a.lo[ra][..., dims] == b.lo[rb][..., dims]).all() and (a.hi[ra][..., dims] == b.hi[rb][..., dims]).all())


def _stacked(a, ra, k, b, rb) -> bool:
    """Along dim ``k``, each group's blocks under ``a`` (rows ``ra``, [groups, members]) follow
    one another, and ``b``'s blocks at rows ``rb`` ([groups, any]) are their union."""
    lo, hi = a.lo[ra, k], a.hi[ra, k]
    return bool((lo[:, 1:] == hi[:, :-1]).all() and (b.lo[rb, k] == lo[:, :1]).all() and (b.hi[rb, k] == hi[:, -1:]).all())


def _all_to_all(move, before, after, L, L2, shape, item, mesh):
    i, j = move.dim, move.tgt_dim
    groups, G = _groups(mesh, move.atoms)
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
    if (got := _boxes(L, L2, G)) is None:
        return False
    a, r, b, r2 = got
    off = _other_dims(len(L.shape), (i, j))
    return (_stacked(b, r2, j, a, r[:, :1]) and _same(a, r, a, r[:, :1], [j]) and _stacked(a, r, i, b, r2)
            and _same(a, r, b, r2, off) and _same(a, r, a, r[:, :1], off))


def _split_over(L, L2, j, G) -> bool:
    """On the arrays: the members' ``L2`` blocks along dim ``j``, in order, are the first
    member's ``L`` block along it."""
    B = L.index_map[G[0]][j]
    return (sum(len(L2.index_map[m][j]) for m in G) == len(B)
            and _eq(np.concatenate([L2.index_map[m][j] for m in G]), B))


def _all_to_all_on_arrays(L, L2, i, j, groups) -> bool:
    for G in groups:
        if not _split_over(L, L2, j, G):
            return False
        B = L.index_map[G[0]][j]
        cat_i = np.concatenate([L.index_map[m][i] for m in G])
        for m in G:
            if not _eq(L.index_map[m][j], B) or not _eq(L2.index_map[m][i], cat_i):
                return False
            if not _same_block(L, m, L2, m, (i, j)) or not _same_block(L, G[0], L, m, (i, j)):
                return False
    return True


def _reduce_scatter(move, before, after, L, L2, shape, item, mesh):
    position = mesh._position
    return scatter_step(before, after, L, L2, move.dim, atom_groups(mesh, move.atoms), axes_label(mesh, move.atoms), item,
                        lambda G: tuple(sorted(G, key=position.__getitem__)))  # canonical: ascending mesh coordinate


def scatter_step(before, after, L, L2, j, groups, axes, item, reduce_order) -> Step | None:
    """A reduce-scatter over ``groups`` of dim ``j`` (each group combining in ``reduce_order(G)``),
    or None when ``L2`` is not that of ``L``."""
    G = _as_array(groups)
    if not (_scatter_on_boxes(L, L2, j, G) or _scatter_on_arrays(L, L2, j, groups)):
        return None
    sh, sh2 = shapes_of(L), shapes_of(L2)
    r = sh.rows(G)
    N = sh.elements[r[:, :1]]  # the whole buffer, the same on every member
    width = sh.dims[r[:, :1], j]
    sp = sh2.dims[sh2.rows(G), j]
    c = np.where(width > 0, N // np.maximum(width, 1), 0) * sp  # each member's chunk
    g = G.shape[1]
    per_group = [(members, row, reduce_order(members)) for row, members in zip(map(tuple, sp.tolist()), groups)]
    minimum = sh.per_device(np.broadcast_to((g - 1) / g * N * item, G.shape), G)
    return Step("reduce_scatter", before, after, tuple(L.shape), item, tuple(groups), axes, dim=j,
                reduce_op=L.reduce_op, sent=sh.per_device((N - c) * item, G), received=sh.per_device(c * (g - 1) * item, G),
                minimum=minimum, data=PerDevice.by_rows(sh.ids, r, per_group))  # (group, splits, reduce order)


def _scatter_on_boxes(L, L2, j, G) -> bool:
    """On boxes: the members hold one block, whose dim ``j`` ``L2`` splits over them in order."""
    if (got := _boxes(L, L2, G)) is None:
        return False
    a, r, b, r2 = got
    every = list(range(len(L.shape)))
    return (_stacked(b, r2, j, a, r[:, :1]) and _same(a, r, a, r[:, :1], every)
            and _same(a, r, b, r2, _other_dims(len(L.shape), (j,))))


def _scatter_on_arrays(L, L2, j, groups) -> bool:
    for G in groups:
        if not _split_over(L, L2, j, G):
            return False
        for m in G:
            if not _same_block(L, G[0], L, m) or not _same_block(L, m, L2, m, (j,)):
                return False
    return True


def _all_reduce(move, before, after, L, L2, shape, item, mesh):
    atoms = tuple(sorted_atoms(move.atoms, mesh))
    return all_reduce_step(before, after, L, L2, atom_groups(mesh, atoms), axes_label(mesh, atoms), item)


def all_reduce_step(before, after, L, L2, groups, axes, item) -> Step | None:
    """An all-reduce over ``groups`` (each combining in its own order), or None when the members
    of a group do not hold one block or ``L2`` is not ``L``."""
    G = _as_array(groups)
    if not (_reduce_on_boxes(L, L2, G) or _reduce_on_arrays(L, L2, groups)):
        return None
    sh = shapes_of(L)
    N = sh.elements[sh.rows(G[:, 0])]
    g = G.shape[1]
    base, extra = N // g, N % g
    cs = base[:, None] + (np.arange(g)[None, :] < extra[:, None])  # split_even(N, g) per group
    rec = sh.per_device((cs * (g - 1) + (N[:, None] - cs)) * item, G)
    minimum = sh.per_device(np.broadcast_to((2 * (g - 1) / g * N * item)[:, None], G.shape), G)
    return Step("all_reduce", before, after, tuple(L.shape), item, tuple(groups), axes, reduce_op=L.reduce_op,
                sent=rec, received=rec, minimum=minimum, data=PerDevice.by_rows(sh.ids, sh.rows(G), groups))


def _reduce_on_boxes(L, L2, G) -> bool:
    if (got := _boxes(L, L2, G)) is None:
        return False
    a, r, b, r2 = got
    every = list(range(len(L.shape)))
    return _same(a, r, a, r[:, :1], every) and _same(a, r, b, r2, every)


def _reduce_on_arrays(L, L2, groups) -> bool:
    return all(_same_block(L, G[0], L, m) and _same_block(L, m, L2, m) for G in groups for m in G)


def contribution_class(L: Layout, d: int) -> tuple:
    """Which contribution of a pending reduction device ``d`` holds (its digits on the pending axes)."""
    return tuple(L.mesh.axis_index(d, r) for r in L.unreduced)


def _key(L: Layout, d: int) -> tuple:
    return tuple(ix.tobytes() for ix in L.index_map[d])


def _permute(move, before, after, L, L2, shape, item, mesh):
    pairs = permute_pairs(L, L2)
    if pairs is None:
        return None
    sent, rec = dict.fromkeys(L.devices, 0), dict.fromkeys(L.devices, 0)
    for s, t in pairs:
        if s != t:
            n = block_size(L2, t) * item
            rec[t] += n
            sent[s] += n
    shapes = {d: L2.local_shape(d) for d in L.devices}
    return Step("collective_permute", before, after, shape, item, (), axes_label(mesh, move.atoms), pairs=pairs, sent=sent, received=rec,
                minimum=dict(rec), data=shapes)


def permute_pairs(L: Layout, L2: Layout) -> tuple[tuple[int, int], ...] | None:
    """(source, target) pairs giving every device of ``L2`` its block from a device of ``L`` that
    holds it (itself when it can; otherwise the least-loaded holder)."""
    holders: dict[tuple, list[int]] = {}
    for s in L.devices:
        holders.setdefault((contribution_class(L, s), _key(L, s)), []).append(s)
    load = {s: 0 for s in L.devices}
    pairs = []
    for t in L2.devices:
        key = (contribution_class(L2, t), _key(L2, t))
        hs = holders.get(key)
        if not hs:
            return None
        if t in hs:
            s = t
        else:
            s = min(hs, key=lambda h: (load[h], (h - t) % len(L.devices)))
            load[s] += 1
        pairs.append((s, t))
    return tuple(pairs)


def _embed(move, before, after, L, L2, shape, item, mesh):
    k = move.dim
    if REDUCE_OPS[L2.reduce_op].name == "avg":
        return None
    widths = {}
    for d in L.devices:
        if not _same_block(L, d, L2, d, (k,)):
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
    z = _zero(L.devices)
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
    z = _zero(L.devices)
    return Step("unreduce", before, after, shape, item, axes=axes_label(mesh, move.atoms), reduce_op=L2.reduce_op,
                sent=z, received=z, minimum=z, data=data)
