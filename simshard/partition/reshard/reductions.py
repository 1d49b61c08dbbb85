"""``realize`` for the moves that combine or relabel blocks: reduce-scatter, all-reduce and
collective-permute (each checked on the layouts, ``Step`` or None)."""

from __future__ import annotations

import numpy as np

from ...sharding.layout import Layout
from ..builder import PerDevice
from .atoms import atom_groups, sorted_atoms
from .layout_checks import boxes_of, groups_array, other_dims, same_block, same_boxes, split_over, stacked
from .plan import Step, axes_label, block_size, shapes_of


def reduce_scatter_move(move, before, after, L, L2, shape, item, mesh):
    return scatter_step(before, after, L, L2, move.dim, atom_groups(mesh, move.atoms), axes_label(mesh, move.atoms), item,
                        lambda G: _canonical(mesh, G))


def scatter_step(before, after, L, L2, j, groups, axes, item, reduce_order) -> Step | None:
    """A reduce-scatter over ``groups`` of dim ``j`` (each group combining in ``reduce_order(G)``),
    or None when ``L2`` is not that of ``L``."""
    G = groups_array(groups)
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
    if (got := boxes_of(L, L2, G)) is None:
        return False
    a, r, b, r2 = got
    every = list(range(len(L.shape)))
    return (stacked(b, r2, j, a, r[:, :1]) and same_boxes(a, r, a, r[:, :1], every)
            and same_boxes(a, r, b, r2, other_dims(len(L.shape), (j,))))


def _scatter_on_arrays(L, L2, j, groups) -> bool:
    for G in groups:
        if not split_over(L, L2, j, G):
            return False
        for m in G:
            if not same_block(L, G[0], L, m) or not same_block(L, m, L2, m, (j,)):
                return False
    return True


def all_reduce_move(move, before, after, L, L2, shape, item, mesh):
    atoms = tuple(sorted_atoms(move.atoms, mesh))
    return all_reduce_step(before, after, L, L2, atom_groups(mesh, atoms), axes_label(mesh, atoms), item)


def all_reduce_step(before, after, L, L2, groups, axes, item) -> Step | None:
    """An all-reduce over ``groups`` (each combining in its own order), or None when the members
    of a group do not hold one block or ``L2`` is not ``L``."""
    G = groups_array(groups)
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
    if (got := boxes_of(L, L2, G)) is None:
        return False
    a, r, b, r2 = got
    every = list(range(len(L.shape)))
    return same_boxes(a, r, a, r[:, :1], every) and same_boxes(a, r, b, r2, every)


def _reduce_on_arrays(L, L2, groups) -> bool:
    return all(same_block(L, G[0], L, m) and same_block(L, m, L2, m) for G in groups for m in G)


def contribution_class(L: Layout, d: int) -> tuple:
    """Which contribution of a pending reduction device ``d`` holds (its digits on the pending axes)."""
    return tuple(L.mesh.axis_index(d, r) for r in L.unreduced)


def _key(L: Layout, d: int) -> tuple:
    """A device's block as bytes (devices with equal keys hold equal blocks)."""
    return tuple(ix.tobytes() for ix in L.index_map[d])


def permute_move(move, before, after, L, L2, shape, item, mesh):
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


def _canonical(mesh, group) -> tuple[int, ...]:
    """``group`` in canonical order: ascending position in the mesh's device order."""
    order = np.argsort(mesh.positions(np.asarray(group, dtype=np.int64)), kind="stable")
    return tuple(int(group[k]) for k in order)
