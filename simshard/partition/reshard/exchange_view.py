"""The view an exchange is planned in: dims split where blocks are strided, so cells are whole.

A layout made by a reshape (a sequence-first flatten of a batch-sharded array, say) holds along
a dim not one run of indices but several at a regular stride: rows ``s * 256 + b`` for every
``s`` and ``b`` in ``[2 i, 2 i + 2)``. Cut along that dim, every block falls into many cells
(16 runs of 2 rows each, above), each its own transfer and round. Seen as ``(16, 256)`` instead,
each block is a product of index arrays, ``(range(16), [2 i, 2 i + 1])``, whose cells are whole,
and gathering it is one transfer per pair of devices.

``viewed`` finds such a view: each dim split into ``(size / inner, inner)`` where every device's
indices, in both layouts, are an outer array times an inner one in outer-major order (so a
device's local block is its view block reshaped, element for element). Where no dim needs a
split, or some block is no such product, there is no view and the exchange is planned as it is.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...sharding.layout_model import Layout


class View(NamedTuple):
    """An exchange's view: its shape, each original dim's inner size (None: not split), and per
    device its source block's shape in the view (its block is reshaped to it first) and its
    target block's shape as the layout has it (the block assembled in the view is reshaped to it)."""

    shape: tuple[int, ...]
    inner: tuple[int | None, ...]
    source_shapes: dict
    target_shapes: dict


def viewed(L: Layout, L2: Layout, shape: tuple[int, ...]) -> tuple[Layout, Layout, View] | None:
    """``L`` and ``L2`` in the view where their blocks are products of runs (module docstring),
    and the view; None where no dim needs splitting or one cannot be split so."""
    inner = tuple(_inner_size([L.index_map[d][k] for d in L.devices] + [L2.index_map[d][k] for d in L2.devices],
                              shape[k]) for k in range(len(shape)))
    if all(m is None for m in inner) or any(m == 0 for m in inner) or any(any(L.padding(d)) for d in L.devices):
        return None
    view_shape = tuple(n for k, size in enumerate(shape)
                       for n in ((size,) if inner[k] is None else (size // inner[k], inner[k])))
    Lv, L2v = _split_layout(L, view_shape, inner), _split_layout(L2, view_shape, inner)
    view = View(view_shape, inner, {d: Lv.local_shape(d) for d in Lv.devices},
                {d: L2.local_shape(d) for d in L2.devices})
    return Lv, L2v, view


def in_view(L: Layout, L2: Layout, shape: tuple[int, ...]) -> tuple[Layout, Layout, tuple[int, ...], View | None]:
    """``viewed``'s layouts, shape and view where there is a view, else the given ones and None."""
    found = viewed(L, L2, shape)
    return (L, L2, shape, None) if found is None else (found[0], found[1], found[2].shape, found[2])


def _inner_size(arrays: list[np.ndarray], size: int) -> int | None:
    """The inner size splitting a dim of ``size`` so that every array is an outer array times an
    inner one (None: every array is one run already, nothing to split; 0: no size does)."""
    distinct = {a.tobytes(): a for a in arrays}.values()
    strided = [a for a in distinct if len(a) > 1 and not np.all(np.diff(a) == 1)]
    if not strided:
        return None
    a = strided[0]
    breaks = np.flatnonzero(np.diff(a) != 1) + 1
    stride = int(a[breaks[0]] - a[0])  # from the first run's start to the second's
    if stride <= 0 or size % stride:
        return 0
    return stride if all(_split(b, stride) is not None for b in distinct) else 0


def _split(a: np.ndarray, inner: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``a`` as (outer, inner) arrays with ``a == (outer[:, None] * inner + inner_ix).ravel()``;
    None where it is no such product."""
    if len(a) == 0:
        return None
    outer = a // inner
    firsts = np.flatnonzero(np.concatenate([[True], outer[1:] != outer[:-1]]))
    per = len(a) // len(firsts)
    if per * len(firsts) != len(a):
        return None
    o, j = outer[firsts], a[:per] % inner
    if not np.array_equal((o[:, None] * inner + j[None, :]).ravel(), a):
        return None
    return o, j


def _split_layout(L: Layout, view_shape: tuple[int, ...], inner: tuple[int | None, ...]) -> Layout:
    """``L`` in the view: each split dim's index array as its outer and inner arrays. Devices
    that share a block tuple share its view tuple (the exchange groups devices by it)."""
    made: dict[int, tuple] = {}
    index_map = {}
    for d in L.devices:
        block = L.index_map[d]
        if id(block) not in made:
            parts = []
            for k, ix in enumerate(block):
                parts.extend((ix,) if inner[k] is None else _split(ix, inner[k]))
            made[id(block)] = tuple(parts)
        index_map[d] = made[id(block)]
    return Layout(L.mesh, view_shape, index_map, L.unreduced, L.reduce_op)


__all__ = ["View", "in_view", "viewed"]
