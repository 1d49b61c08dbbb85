"""Indexing lowered to ops: ``x[...]`` (basic and strided slicing, integers, None,
Ellipsis) as slice + reshape, one integer index array as ``np.take``."""

from __future__ import annotations

import operator
from typing import NamedTuple

import numpy as np

from ..errors import TraceError
from .explicit import api as explicit_api
from .explicit.mode import is_explicit
from .lowering_common import as_tracer, bind_out, is_traced, norm_axis, reject_unsupported
from .lowering_shapes import reshape
from .state import Tracer, bind


def take(a, indices, axis=None, out=None, mode=None, out_sharding=None):
    reject_unsupported(out=out, mode=mode, fn="np.take")
    x = as_tracer(a)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    ax = norm_axis(axis, x.ndim, "np.take")
    idx = indices if is_traced(indices) else np.asarray(indices)
    if not is_traced(idx):
        if idx.dtype.kind not in "iu":
            raise TraceError("np.take: indices must be integers")
        idx = np.where(idx < 0, idx + x.shape[ax], idx)
        if idx.size and (idx.min() < 0 or idx.max() >= x.shape[ax]):
            raise TraceError(f"np.take: index out of bounds for axis {ax} of size {x.shape[ax]}")
    return bind_out("take", x, as_tracer(idx), axis=ax, out_sharding=out_sharding)


def getitem(x: Tracer, index):
    """Basic and strided slicing, integers, None and Ellipsis; an integer array on one axis is np.take."""
    if not isinstance(index, tuple):
        index = (index,)
    if any(isinstance(i, (Tracer, np.ndarray, list)) for i in index):
        arrays = [k for k, i in enumerate(index) if isinstance(i, (Tracer, np.ndarray, list))]
        if len(arrays) != 1 or any(i is Ellipsis or i is None for i in index):
            raise TraceError("indexing with more than one index array (or with None/...) is not supported; use np.take")
        k = arrays[0]
        if any(not (isinstance(i, slice) and i == slice(None)) for j, i in enumerate(index) if j != k):
            raise TraceError("an index array may only be combined with ':' on other axes; use np.take")
        arr = index[k]
        if (arr.dtype if isinstance(arr, Tracer) else np.asarray(arr).dtype) == bool:
            raise TraceError("boolean mask indexing has a data-dependent shape and cannot be traced; use np.where")
        return take(x, arr, axis=k)
    n_real = sum(1 for i in index if i is not None and i is not Ellipsis)
    if n_real > x.ndim:
        raise TraceError(f"too many indices for an array of rank {x.ndim}")
    if sum(1 for i in index if i is Ellipsis) > 1:
        raise TraceError("an index can only have a single ellipsis")
    expanded = []
    for i in index:
        if i is Ellipsis:
            expanded += [slice(None)] * (x.ndim - n_real)
        else:
            expanded.append(i)
    expanded += [slice(None)] * (x.ndim - sum(1 for i in expanded if i is not None))
    start, limit, strides, out_shape, reversed_dims = _basic_slices(x, expanded)
    y = x
    if (tuple(start), tuple(limit), tuple(strides)) != ((0,) * x.ndim, x.shape, (1,) * x.ndim):
        y = bind("slice", x, start=tuple(start), limit=tuple(limit), strides=tuple(strides))
    for d in reversed_dims:  # a negative step: the dim read backwards (a take of the reversed positions),
        kept = explicit_api.typeof(y).sharding if is_explicit() else None  # typed as its operand (JAX's rev)
        y = take(y, np.arange(y.shape[d] - 1, -1, -1, dtype=np.int32), axis=d, out_sharding=kept)
    return reshape(y, tuple(out_shape))


class BasicSlices(NamedTuple):
    """A basic index as one strided slice: its start, limit and strides per dim, the result's
    shape (integers dropped, None added), and the dims read backwards (negative steps)."""

    start: list
    limit: list
    strides: list
    out_shape: list
    reversed_dims: list


def _basic_slices(x: Tracer, expanded) -> BasicSlices:
    """``expanded`` (one entry per dim, or None) as one positive-step slice of ``x``: a negative
    step reads the same elements by a positive one, its dim then reversed."""
    start, limit, strides, out_shape, reversed_dims = [], [], [], [], []
    d = 0
    for i in expanded:
        if i is None:
            out_shape.append(1)
            continue
        n = x.shape[d]
        if isinstance(i, slice):
            lo, hi, st = i.indices(n)
            picked = range(lo, hi, st)
            length = len(picked)
            if st < 0:  # the same elements by a positive step, then reversed along the dim
                lo, st = (picked[-1] if length else 0), -st
                if length > 1:
                    reversed_dims.append(d)
            start.append(lo)
            limit.append(lo + (length - 1) * st + 1 if length else lo)
            strides.append(st)
            out_shape.append(length)
        else:
            k = operator.index(i)
            if not -n <= k < n:
                raise TraceError(f"index {k} is out of bounds for axis {d} with size {n}")
            k %= n
            start.append(k)
            limit.append(k + 1)
            strides.append(1)
        d += 1
    return BasicSlices(start, limit, strides, out_shape, reversed_dims)
