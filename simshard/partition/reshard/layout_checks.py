"""Checks shared by ``realize``'s moves: block positions, index arrays and boxes compared.

The layouts share one index array between devices holding the same block, so array comparisons
go by identity first (``same_array``, ``ArrayCompare``); boxes (a range per dim per device) are
compared for all members of all groups at once with numpy (``same_boxes``, ``stacked``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np

from ...sharding.layout import Layout
from ...sharding.mesh import Mesh
from .atoms import atom_groups


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


def same_array(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two index arrays are equal."""
    # layouts share one index array between devices holding the same block: identity first
    return a is b or (len(a) == len(b) and np.array_equal(a, b))


class ArrayCompare:
    """``same_array`` remembered by the arrays' identities, for one move's checks: the layouts share
    index arrays between devices, so thousands of members compare a handful of distinct pairs.
    Keyed by bare ids: make one per check, over layouts that stay alive while it is used."""

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


def same_block(L: Layout, d: int, L2: Layout, e: int, skip: Sequence[int] = (), eq=same_array) -> bool:
    """Whether ``d``'s block of ``L`` and ``e``'s of ``L2`` are equal on every dim but ``skip``."""
    return all(eq(x, y) for k, (x, y) in enumerate(zip(L.index_map[d], L2.index_map[e])) if k not in skip)


@lru_cache(maxsize=64)
def no_bytes(devs: tuple[int, ...]) -> dict[int, int]:
    """Nothing sent or received, per device (shared between steps: never written)."""
    return dict.fromkeys(devs, 0)


def as_positions(q: np.ndarray) -> range | tuple[int, ...]:
    """Local positions as a Slice keeps them: a range where they are one run, else a tuple."""
    if not len(q):
        return range(0)
    if int(q[-1]) - int(q[0]) == len(q) - 1 and bool(np.all(np.diff(q) == 1)):
        return range(int(q[0]), int(q[-1]) + 1)
    return tuple(int(i) for i in q)


def groups_of(mesh: Mesh, atoms) -> tuple[tuple[tuple[int, ...], ...], np.ndarray]:
    """The device groups over ``atoms`` and the same as an int array [groups, members]."""
    groups = atom_groups(mesh, atoms)
    return groups, groups_array(groups)


@lru_cache(maxsize=512)
def groups_array(groups: tuple[tuple[int, ...], ...]) -> np.ndarray:
    """Device groups as an int array [groups, members] (cached: moves share groups)."""
    return np.array(groups, dtype=np.int64).reshape(len(groups), -1)


def boxes_of(L, L2, G):
    """Both layouts' boxes and the rows of the groups' members in each, or None (a layout
    without boxes: its claims are checked on the index arrays)."""
    if L.boxes is None or L2.boxes is None:
        return None
    return L.boxes, L.boxes.rows(G), L2.boxes, L2.boxes.rows(G)


def other_dims(rank: int, skip) -> list[int]:
    """The dims of a rank-``rank`` array but ``skip``."""
    return [k for k in range(rank) if k not in skip]


def same_boxes(a, ra, b, rb, dims) -> bool:
    """Boxes ``a`` at rows ``ra`` equal boxes ``b`` at rows ``rb`` (broadcast) on ``dims``.
    Equal ranges are equal index arrays; unequal ones may still be (both empty): the caller then
    asks the arrays."""
    if not dims:
        return True
    return bool((a.lo[ra][..., dims] == b.lo[rb][..., dims]).all() and (a.hi[ra][..., dims] == b.hi[rb][..., dims]).all())


def stacked(a, ra, k, b, rb) -> bool:
    """Along dim ``k``, each group's blocks under ``a`` (rows ``ra``, [groups, members]) follow
    one another, and ``b``'s blocks at rows ``rb`` ([groups, any]) are their union."""
    lo, hi = a.lo[ra, k], a.hi[ra, k]
    return bool((lo[:, 1:] == hi[:, :-1]).all() and (b.lo[rb, k] == lo[:, :1]).all() and (b.hi[rb, k] == hi[:, -1:]).all())


def split_over(L, L2, j, G) -> bool:
    """On the arrays: the members' ``L2`` blocks along dim ``j``, in order, are the first
    member's ``L`` block along it."""
    B = L.index_map[G[0]][j]
    return (sum(len(L2.index_map[m][j]) for m in G) == len(B)
            and same_array(np.concatenate([L2.index_map[m][j] for m in G]), B))
