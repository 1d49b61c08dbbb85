"""numpy's shape functions lowered to ops: reshape, transpose and its spellings, expand_dims,
squeeze, concatenate, stack, pad, full."""

from __future__ import annotations

import math

import numpy as np

from ..errors import TraceError
from .lowering_common import apply_out, as_tracer, astype, bind_out, norm_axes, norm_axis, reject_unsupported
from .state import bind


def reshape(a, newshape=None, order="C", *, shape=None, copy=None, out_sharding=None):
    if order != "C":
        raise TraceError("np.reshape: only order='C' is supported")
    x = as_tracer(a)
    new = shape if shape is not None else newshape
    new = (new,) if isinstance(new, (int, np.integer)) else tuple(int(n) for n in new)
    if new.count(-1) > 1:
        raise TraceError(f"np.reshape: can only specify one unknown dimension, got {new}")
    if -1 in new:
        known = math.prod(n for n in new if n != -1)
        if known == 0 or x.size % known:
            raise TraceError(f"np.reshape: cannot reshape array of size {x.size} into shape {new}")
        new = tuple(x.size // known if n == -1 else n for n in new)
    if math.prod(new) != x.size:
        raise TraceError(f"np.reshape: cannot reshape array of size {x.size} into shape {new}")
    if new == x.shape:
        return apply_out(x, out_sharding, "reshape")
    return bind_out("reshape", x, new_shape=new, out_sharding=out_sharding, api_name="reshape")


def transpose(a, axes=None):
    x = as_tracer(a)
    perm = tuple(reversed(range(x.ndim))) if axes is None else tuple(norm_axis(p, x.ndim, "np.transpose") for p in axes)
    if sorted(perm) != list(range(x.ndim)):
        raise TraceError(f"np.transpose: axes {axes} are not a permutation of the array's {x.ndim} dims")
    return x if perm == tuple(range(x.ndim)) else bind("transpose", x, perm=perm)


def swapaxes(a, axis1, axis2):
    x = as_tracer(a)
    perm = list(range(x.ndim))
    i, j = norm_axis(axis1, x.ndim, "np.swapaxes"), norm_axis(axis2, x.ndim, "np.swapaxes")
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(x, perm)


def moveaxis(a, source, destination):
    x = as_tracer(a)
    src = norm_axes(source, x.ndim, "np.moveaxis")
    dst = norm_axes(destination, x.ndim, "np.moveaxis")
    if len(src) != len(dst):
        raise TraceError("np.moveaxis: source and destination must have the same number of axes")
    order = [d for d in range(x.ndim) if d not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(x, order)


def expand_dims(a, axis):
    x = as_tracer(a)
    nd = x.ndim + (len(axis) if isinstance(axis, (tuple, list)) else 1)
    axes = norm_axes(axis, nd, "np.expand_dims")
    it = iter(x.shape)
    return reshape(x, tuple(1 if d in axes else next(it) for d in range(nd)))


def squeeze(a, axis=None):
    x = as_tracer(a)
    axes = tuple(d for d, n in enumerate(x.shape) if n == 1) if axis is None else norm_axes(axis, x.ndim, "np.squeeze")
    for d in axes:
        if x.shape[d] != 1:
            raise TraceError(f"np.squeeze: cannot select axis {d} of size {x.shape[d]} (not 1)")
    return reshape(x, tuple(n for d, n in enumerate(x.shape) if d not in axes))


def concatenate(arrays, axis=0, out=None, dtype=None, casting=None):
    reject_unsupported(out=out, fn="np.concatenate")
    xs = [as_tracer(a) for a in arrays]
    if not xs:
        raise TraceError("np.concatenate: need at least one array")
    if axis is None:
        xs, axis = [reshape(x, (-1,)) for x in xs], 0
    ax = norm_axis(axis, xs[0].ndim, "np.concatenate")
    dt = np.dtype(dtype) if dtype is not None else np.result_type(*[x.dtype for x in xs])
    xs = [astype(x, dt) for x in xs]
    for x in xs:
        if x.ndim != xs[0].ndim or any(n != m for d, (n, m) in enumerate(zip(x.shape, xs[0].shape)) if d != ax):
            raise TraceError(f"np.concatenate: shapes {[x.shape for x in xs]} differ outside axis {ax}")
    return xs[0] if len(xs) == 1 else bind("concatenate", *xs, axis=ax)


def stack(arrays, axis=0, out=None, dtype=None, casting=None):
    xs = [as_tracer(a) for a in arrays]
    if not xs:
        raise TraceError("np.stack: need at least one array")
    ax = norm_axis(axis, xs[0].ndim + 1, "np.stack")
    return concatenate([expand_dims(x, ax) for x in xs], axis=ax, dtype=dtype)


def pad(array, pad_width, mode="constant", constant_values=0):
    if mode != "constant":
        raise TraceError(f"np.pad: mode={mode!r} is not supported (only 'constant')")
    x = as_tracer(array)
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (x.ndim, 2))
    if np.ndim(constant_values) != 0:
        raise TraceError("np.pad: constant_values must be one scalar")
    value = np.asarray(constant_values).astype(x.dtype)[()]
    return bind("pad", x, padding_value=value, widths=tuple((int(lo), int(hi)) for lo, hi in widths))


def full(shape, fill_value, dtype=None, out_sharding=None):
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    dt = np.dtype(dtype) if dtype is not None else np.asarray(fill_value).dtype
    return bind_out("full", shape=shape, fill_value=np.asarray(fill_value, dtype=dt)[()], dtype=dt,
                     out_sharding=out_sharding)
