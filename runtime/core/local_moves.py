"""The data a device moves within its own memory: positions taken out of a buffer (a ``Slice``)
and a buffer padded at the end of each dim (a ``Pad``), checked against the buffer's shape."""

from __future__ import annotations

import numpy as np

from .diagnosis import aval


class OutOfBlock(ValueError):
    """Positions or a shape that do not fit the buffer (the executor names the device and instruction)."""


def take(x: np.ndarray, index) -> np.ndarray:
    """The positions ``index`` (per dim: a range of step 1, or positions) of ``x``, as a new array:
    a copy of a block where every dim is a run of positions, else numpy's fancy indexing."""
    if len(index) != x.ndim:
        raise OutOfBlock(f"slice index for {len(index)} dims of a {aval(x)} buffer")
    cuts = [_cut(x, k, ix) for k, ix in enumerate(index)]
    if all(isinstance(c, slice) for c in cuts):
        return np.array(x[tuple(cuts)], copy=True)
    return x[np.ix_(*[np.arange(c.start, c.stop) if isinstance(c, slice) else c for c in cuts])]


def _cut(x: np.ndarray, k: int, ix):
    """Dim ``k``'s positions as a slice where they run in steps of one, else as an index array."""
    if isinstance(ix, range) and ix.step == 1:  # a block's rows: a view, no index array
        if len(ix) and (ix.start < 0 or ix.stop > x.shape[k]):
            raise OutOfBlock(f"slice positions {ix.start}..{ix.stop - 1} outside dim {k} of a {aval(x)} buffer")
        return slice(ix.start, ix.stop) if len(ix) else slice(0, 0)
    ix = np.asarray(ix, dtype=np.intp).reshape(-1)
    if ix.size and (ix.min() < 0 or ix.max() >= x.shape[k]):
        raise OutOfBlock(f"slice positions {ix.min()}..{ix.max()} outside dim {k} of a {aval(x)} buffer")
    if ix.size and np.array_equal(ix, np.arange(ix[0], ix[0] + ix.size)):
        return slice(int(ix[0]), int(ix[0]) + ix.size)
    return slice(0, 0) if not ix.size else ix


def pad_to(x: np.ndarray, shape, value) -> np.ndarray:
    """``x`` padded at the end of each dim to ``shape`` with ``value`` (cast to ``x``'s dtype)."""
    shape = tuple(int(s) for s in shape)
    if len(shape) != x.ndim or any(s < n for s, n in zip(shape, x.shape)):
        raise OutOfBlock(f"cannot pad a {aval(x)} buffer to shape {list(shape)}")
    out = np.full(shape, value, dtype=x.dtype)
    out[tuple(slice(0, n) for n in x.shape)] = x
    return out
