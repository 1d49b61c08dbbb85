"""``x.at[idx]``: ``.get(out_sharding=...)``, and ``.set(v)`` / ``.add(v)`` for basic indices
(ints, unit-step slices, ``...``).

Lowered to ``dynamic_update_slice`` (``add`` reads the window first). In explicit mode the result
is typed as JAX types a scatter: a dim the update covers whole takes the consensus of the operand's
and the update's sharding; a dim it only partly covers must be unsharded in both (otherwise a
``ShardingTypeError`` asks for ``out_sharding``). Both operand and update are given that type
before the update.
"""

from __future__ import annotations

import operator

import numpy as np

from ..errors import TraceError
from .explicit import mode
from .explicit.broadcast import retype
from .explicit.errors import ShardingTypeError
from .explicit.rules import consensus
from .explicit.types import Spec, type_str
from .lowering_common import apply_out, astype, broadcast_to
from .lowering_indexing import getitem, take
from .lowering_shapes import reshape
from .state import Tracer, as_tracer, bind


class IndexUpdateHelper:
    """``x.at``: ``x.at[idx].get(out_sharding=...)``, ``.set(v)``, ``.add(v)`` (functional updates)."""

    def __init__(self, x):
        self.x = x

    def __getitem__(self, index):
        return _IndexUpdateRef(self.x, index)


class _IndexUpdateRef:
    def __init__(self, x, index):
        self.x, self.index = x, index

    def get(self, *, indices_are_sorted=False, unique_indices=False, mode=None, fill_value=None, out_sharding=None):
        index = self.index if isinstance(self.index, tuple) else (self.index,)
        arrays = [k for k, i in enumerate(index) if isinstance(i, (Tracer, np.ndarray, list))]
        full = all(isinstance(i, slice) and i == slice(None) for k, i in enumerate(index) if k not in arrays)
        if len(arrays) == 1 and full:
            return take(self.x, index[arrays[0]], axis=arrays[0], out_sharding=out_sharding)
        return apply_out(getitem(self.x, self.index), out_sharding, "get")

    def set(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None, out_sharding=None):
        return update_slice(self.x, self.index, values, "set", out_sharding)

    def add(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None, out_sharding=None):
        return update_slice(self.x, self.index, values, "add", out_sharding)


def _window(shape, index) -> tuple[list[int], list[int], list[int]]:
    """start, size per dim, and which dims an integer index removes."""
    index = index if isinstance(index, tuple) else (index,)
    if any(i is None or isinstance(i, (list, np.ndarray)) or hasattr(i, "aval") for i in index):
        raise TraceError("x.at[...].set/add supports integers, unit-step slices and ... only")
    n_real = sum(1 for i in index if i is not Ellipsis)
    expanded = []
    for i in index:
        expanded += [slice(None)] * (len(shape) - n_real) if i is Ellipsis else [i]
    expanded += [slice(None)] * (len(shape) - len(expanded))
    if len(expanded) != len(shape):
        raise TraceError(f"too many indices for an array of rank {len(shape)}")
    start, size, dropped = [], [], []
    for d, (i, n) in enumerate(zip(expanded, shape)):
        if isinstance(i, slice):
            lo, hi, st = i.indices(n)
            if st != 1:
                raise TraceError("x.at[...] with a strided slice is not supported")
            start.append(lo)
            size.append(max(hi - lo, 0))
        else:
            k = operator.index(i)
            if not -n <= k < n:
                raise TraceError(f"index {k} is out of bounds for axis {d} with size {n}")
            start.append(k % n)
            size.append(1)
            dropped.append(d)
    return start, size, dropped


def update_slice(x, index, values, how: str, out_sharding=None):
    x = as_tracer(x)
    start, size, dropped = _window(x.shape, index)
    window = tuple(size)
    kept = tuple(n for d, n in enumerate(size) if d not in dropped)
    v = values
    if hasattr(v, "shape") and tuple(v.shape) not in (window,):
        v = reshape(broadcast_to(v, kept), window) if tuple(v.shape) != kept else reshape(v, window)
    elif not hasattr(v, "shape"):
        v = np.asarray(v, dtype=x.dtype)
        v = broadcast_to(v, window) if v.ndim == 0 else reshape(broadcast_to(v, kept), window)
    v = astype(v, x.dtype)
    starts = [np.asarray(s, dtype=np.int32)[()] for s in start]
    if mode.is_explicit() and out_sharding is None:
        x, v = _typed_operands(x, v, window, dropped, not hasattr(values, "shape") or np.ndim(values) == 0)
    if how == "add":
        cur = bind("dynamic_slice", x, *starts, slice_sizes=window)
        v = cur + v
    out = bind("dynamic_update_slice", x, v, *starts)
    return apply_out(out, out_sharding, "at[...].set")


def _typed_operands(x, v, window, dropped, from_scalar: bool):
    xs, _ = mode.type_spec(x, x.ndim)
    vs, _ = mode.type_spec(v, v.ndim)
    spec = []
    for d, (n, k) in enumerate(zip(x.shape, window)):
        if n == k:
            c = consensus([xs[d], vs[d]])
        else:
            c = () if not xs[d] and not vs[d] else None
        if c is None:
            # shown as JAX's scatter sees it: integer-indexed dims dropped from the updates
            kept = [k for k in range(x.ndim) if k not in dropped]
            ushape = tuple(window[k] for k in kept)
            uspec = tuple(xs[k] if from_scalar else vs[k] for k in kept)
            raise ShardingTypeError(
                "Use `.at[...].set/add/mul/...(out_sharding=)` to provide output PartitionSpec for the scatter "
                "update as out sharding could not be resolved unambiguously (or would require collectives on "
                f"inputs). Got operand=ShapedArray({type_str(x.shape, x.dtype, xs)}), "
                f"indices=ShapedArray(int32[{len(dropped)}]), updates=ShapedArray({type_str(ushape, v.dtype, uspec)})",
                op="scatter",
            )
        spec.append(c)
    spec_t: Spec = tuple(spec)
    if xs != spec_t:
        x = retype(x, tuple(x.shape), spec_t)
    if vs != spec_t:
        v = retype(v, tuple(v.shape), spec_t)
    return x, v
