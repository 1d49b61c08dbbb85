"""From proposed moves to checked steps: each move is verified on the layouts it connects.

A move proposed on atoms (``greedy.Move``) is only a claim that a collective over some device
groups turns one layout into the next. ``realize`` checks that claim on the layouts' index sets
(uneven dims do not always nest: 10 rows over 2 then over 8 devices are blocks of 5 and of 2,
and the second blocks do not sit inside the first) and, when it holds, returns the ``Step`` with
its groups, per-device emission data and byte counts; None when it does not.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..sharding.layout import Layout
from ..sharding.mesh import Mesh
from ..sharding.reduce_ops import REDUCE_OPS
from .atoms import atom_groups, sorted_atoms
from .greedy import Move
from .plan import Step, span, axes_label, block_size, layout_of, split_even


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


def _zero(devs) -> dict[int, int]:
    return {d: 0 for d in devs}


def _slice(move, before, after, L, L2, shape, item, mesh):
    pos = slice_positions(L, L2)
    if pos is None:
        return None
    z = _zero(L.devices)
    return Step("slice", before, after, shape, item, dim=move.dim, sent=z, received=z, minimum=z, data=pos)


def slice_positions(L: Layout, L2: Layout) -> dict | None:
    """Per device, the local positions of its ``L2`` block inside its ``L`` block (None where
    one is not inside the other)."""
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
    return pos


def _positions_of(outer: np.ndarray, inner: np.ndarray) -> tuple | None:
    """``positions`` as a tuple of ints; for two whole ranges (block layouts) without searching."""
    if len(inner) and len(outer):
        _, lo_o, hi_o, range_o = span(outer)
        _, lo_i, hi_i, range_i = span(inner)
        if range_o and range_i:
            if lo_i < lo_o or hi_i > hi_o:
                return None
            return tuple(range(lo_i - lo_o, hi_i - lo_o + 1))
    q = positions(outer, inner)
    return None if q is None else tuple(int(i) for i in q)


def _all_gather(move, before, after, L, L2, shape, item, mesh):
    k = move.dim
    groups = atom_groups(mesh, move.atoms)
    gof, sent, rec, mn = {}, {}, {}, {}
    eq = _Compare()
    for G in groups:
        cat = np.concatenate([L.index_map[m][k] for m in G])
        sizes = [block_size(L, m) for m in G]
        total = sum(sizes)
        for m, n in zip(G, sizes):
            if not (eq(L2.index_map[m][k], cat) and _same_block(L, m, L2, m, (k,), eq)
                    and _same_block(L, G[0], L, m, (k,), eq)):
                return None
            gof[m] = G
            rec[m] = (total - n) * item
            sent[m] = n * (len(G) - 1) * item
            mn[m] = (total - n) * item
    return Step("all_gather", before, after, shape, item, tuple(groups), axes_label(mesh, move.atoms), dim=k,
                sent=sent, received=rec, minimum=mn, data=gof)


def _all_to_all(move, before, after, L, L2, shape, item, mesh):
    i, j = move.dim, move.tgt_dim
    groups = atom_groups(mesh, move.atoms)
    gof, splits, sent, rec, mn = {}, {}, {}, {}, {}
    for G in groups:
        B = L.index_map[G[0]][j]
        sp = [len(L2.index_map[m][j]) for m in G]
        if sum(sp) != len(B) or not _eq(np.concatenate([L2.index_map[m][j] for m in G]), B):
            return None
        cat_i = np.concatenate([L.index_map[m][i] for m in G])
        for m in G:
            if not _eq(L.index_map[m][j], B) or not _eq(L2.index_map[m][i], cat_i):
                return None
            if not _same_block(L, m, L2, m, (i, j)) or not _same_block(L, G[0], L, m, (i, j)):
                return None
        # chunk q -> m is q's block with dim j cut to m's split: other(q) * sp[m] elements, with
        # other(q) the elements of q's block per index of dim j (sums in O(g), not a g x g table)
        other = {q: (block_size(L, q) // len(B) if len(B) else 0) for q in G}
        others, total_sp, shared_sp = sum(other.values()), sum(sp), tuple(sp)
        for idx, m in enumerate(G):
            gof[m] = G
            splits[m] = shared_sp
            rec[m] = sp[idx] * (others - other[m]) * item
            sent[m] = other[m] * (total_sp - sp[idx]) * item
            mn[m] = sent[m]
    return Step("all_to_all", before, after, shape, item, tuple(groups), axes_label(mesh, move.atoms), dim=i, tgt_dim=j,
                sent=sent, received=rec, minimum=mn, data=(gof, splits))


def _reduce_scatter(move, before, after, L, L2, shape, item, mesh):
    j = move.dim
    op = L.reduce_op
    groups = atom_groups(mesh, move.atoms)
    gof, splits, order, sent, rec, mn = {}, {}, {}, {}, {}, {}
    position = {d: k for k, d in enumerate(mesh.device_ids)}
    for G in groups:
        B = L.index_map[G[0]][j]
        sp = [len(L2.index_map[m][j]) for m in G]
        if sum(sp) != len(B) or not _eq(np.concatenate([L2.index_map[m][j] for m in G]), B):
            return None
        for m in G:
            if not _same_block(L, G[0], L, m) or not _same_block(L, m, L2, m, (j,)):
                return None
        N = block_size(L, G[0])
        other = N // len(B) if len(B) else 0
        g = len(G)
        canonical = tuple(sorted(G, key=position.__getitem__))  # ascending mesh coordinate
        shared_sp = tuple(sp)
        for idx, m in enumerate(G):
            c = other * sp[idx]
            gof[m] = G
            order[m] = canonical
            splits[m] = shared_sp
            rec[m] = c * (g - 1) * item
            sent[m] = (N - c) * item
            mn[m] = (g - 1) / g * N * item
    return Step("reduce_scatter", before, after, shape, item, tuple(groups), axes_label(mesh, move.atoms), dim=j,
                reduce_op=op, sent=sent, received=rec, minimum=mn, data=(gof, splits, order))


def _all_reduce(move, before, after, L, L2, shape, item, mesh):
    op = L.reduce_op
    atoms = tuple(sorted_atoms(move.atoms, mesh))
    groups = atom_groups(mesh, atoms)
    gof, sent, rec, mn = {}, {}, {}, {}
    for G in groups:
        N = block_size(L, G[0])
        cs = split_even(N, len(G))
        g = len(G)
        for idx, m in enumerate(G):
            if not _same_block(L, G[0], L, m) or not _same_block(L, m, L2, m):
                return None
            gof[m] = G
            rec[m] = (cs[idx] * (g - 1) + (N - cs[idx])) * item
            sent[m] = rec[m]
            mn[m] = 2 * (g - 1) / g * N * item
    return Step("all_reduce", before, after, shape, item, tuple(groups), axes_label(mesh, atoms), reduce_op=op,
                sent=sent, received=rec, minimum=mn, data=gof)


def contribution_class(L: Layout, d: int) -> tuple:
    """Which contribution of a pending reduction device ``d`` holds (its digits on the pending axes)."""
    return tuple(L.mesh.axis_index(d, r) for r in L.unreduced)


def _key(L: Layout, d: int) -> tuple:
    return tuple(ix.tobytes() for ix in L.index_map[d])


def _permute(move, before, after, L, L2, shape, item, mesh):
    pairs = permute_pairs(L, L2)
    if pairs is None:
        return None
    sent, rec = _zero(L.devices), _zero(L.devices)
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
    for d in L.devices:
        if not _same_block(L, d, L2, d):
            return None
    idem = REDUCE_OPS[L2.reduce_op].idempotent
    keep = {d: idem or all(mesh.axis_index(d, a) == 0 for a in move.atoms) for d in L.devices}
    shapes = {d: L.local_shape(d) for d in L.devices}
    z = _zero(L.devices)
    return Step("unreduce", before, after, shape, item, axes=axes_label(mesh, move.atoms), reduce_op=L2.reduce_op,
                sent=z, received=z, minimum=z, data=(keep, shapes))
