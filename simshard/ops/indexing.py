"""Static slicing, padding and ``take`` along an axis (shardy.md a.10, a.12).

* ``slice`` / ``pad``: a dim kept whole is a pass-through factor shared by operand and result; a
  sliced or padded dim is one permutation factor of the OPERAND's size shared by both (Shardy's
  rule: sharding still propagates through it, but running it sharded needs data from other
  devices). In the result that factor does not multiply to the dim size: it is ``inexact``.

      slice 32x4x8 -> 32x1x2:  ([a, b, c])->([a, b, c]) {a=32, b=4, c=8} permutation={b, c}

* ``take(x, indices, axis)``: result = ``x.shape[:axis] + indices.shape + x.shape[axis+1:]``.
  x's other dims and the indices' dims pass through to the result; x's ``axis`` (every index may
  read any position of it) is a need-replication factor added last:

      take 4x5, indices 3, axis=0:  ([c, b], [a])->([a, b]) {a=3, b=5, c=4} need_replication={c}
"""

from __future__ import annotations

import numpy as np

from ..ir.program import Aval
from . import preconditions
from .builder import RuleBuilder
from .factors import NEED_REPLICATION, PASS_THROUGH, PERMUTATION
from .cotangents import call, fit, zeros
from .registry import define_vjp, register_op
from .windows import Window


def _mismatch_rule(in_avals, out_avals):
    """One factor of the operand's size per dim; permutation where operand and result differ."""
    x, out = in_avals[0], out_avals[0]
    b = RuleBuilder([a.shape for a in in_avals], [out.shape])
    for d, n in enumerate(x.shape):
        dims = [d] + [None] * (len(in_avals) - 1)
        b.add(dims, [d], n, PASS_THROUGH if n == out.shape[d] else PERMUTATION)
    return b.build()


# -- slice -------------------------------------------------------------------------------------
def _slice_params(op: str, x: Aval, start, limit, strides):
    start = preconditions.int_tuple(op, "start", start, x.ndim)
    limit = preconditions.int_tuple(op, "limit", limit, x.ndim)
    strides = (1,) * x.ndim if strides is None else preconditions.int_tuple(op, "strides", strides, x.ndim)
    for d, (s, l, st, n) in enumerate(zip(start, limit, strides, x.shape)):
        if not 0 <= s <= l <= n:
            raise ValueError(f"{op}: dim {d} of size {n}: need 0 <= start ({s}) <= limit ({l}) <= {n}")
        if st < 1:
            raise ValueError(f"{op}: dim {d}: stride {st} must be >= 1")
    return start, limit, strides


def _slice_eval(*avals, start, limit, strides=None, **_):
    preconditions.arity("slice", avals, 1)
    (x,) = avals
    start, limit, strides = _slice_params("slice", x, start, limit, strides)
    shape = tuple(-(-(l - s) // st) for s, l, st in zip(start, limit, strides))
    return (Aval(shape, x.dtype),)


def _slice_kernel(x, *, start, limit, strides=None, **_):
    strides = strides or (1,) * np.ndim(x)
    return (np.array(x[tuple(slice(s, l, st) for s, l, st in zip(start, limit, strides))]),)


def _slice_local(params: dict, in_shapes, out_shapes) -> dict:
    """A dim kept whole (start 0, every element kept: stride 1, or a dim of one element whatever
    the stride) may be sharded: on a device its limit is the local block's length, not the
    global one."""
    (x,), (out,) = in_shapes, out_shapes
    ndim = len(x)
    strides = params.get("strides") or (1,) * ndim
    limit = tuple(n if s == 0 and n == o and (st == 1 or l <= 1) else l  # l <= 1: one element covered
                  for s, l, st, n, o in zip(params["start"], params["limit"], strides, x, out))
    return {**params, "limit": limit}


def _slice_windows(in_avals, out_avals, *, start, limit, strides=None, **_):
    """A sliced dim: result row ``o`` reads operand row ``start + o * stride``."""
    x, out = in_avals[0], out_avals[0]
    strides = strides or (1,) * x.ndim
    return tuple(Window(0, d, d, 1, int(st), int(s))
                 for d, (s, st, n, m) in enumerate(zip(start, strides, x.shape, out.shape)) if n != m)


def _slice_window_params(params: dict, in_shapes, out_shapes, local) -> dict:
    """On a row block holding exactly the rows it keeps: all of them."""
    x = in_shapes[0]
    start, limit = list(params["start"]), list(params["limit"])
    strides = list(params.get("strides") or (1,) * len(x))
    for d in local:
        start[d], limit[d], strides[d] = 0, x[d], 1
    return {**params, "start": tuple(start), "limit": tuple(limit), "strides": tuple(strides)}


register_op(
    "slice",
    _slice_eval,
    _slice_kernel,
    lambda in_avals, out_avals, **_: _mismatch_rule(in_avals, out_avals),
    local_params=_slice_local,
    windows=_slice_windows,
    window_params=_slice_window_params,
    doc="x[start:limit:strides] per dim; sliced dims are permutation factors",
)


# -- pad ---------------------------------------------------------------------------------------
def _widths(op: str, x: Aval, widths):
    try:
        pairs = tuple(tuple(int(v) for v in w) for w in widths)
    except TypeError:
        raise ValueError(f"{op}: widths must be a sequence of (lo, hi) pairs, got {widths!r}") from None
    if len(pairs) != x.ndim or any(len(p) != 2 for p in pairs):
        raise ValueError(f"{op}: widths {widths!r} must give one (lo, hi) pair per dim of a rank-{x.ndim} operand")
    if any(v < 0 for p in pairs for v in p):
        raise ValueError(f"{op}: widths {pairs} must be non-negative")
    return pairs


def _pad_eval(*avals, padding_value, widths, **_):
    preconditions.arity("pad", avals, 1)
    (x,) = avals
    pairs = _widths("pad", x, widths)
    if np.ndim(padding_value) != 0:
        raise ValueError(f"pad: padding_value must be a scalar, got shape {np.shape(padding_value)}")
    return (Aval(tuple(n + lo + hi for n, (lo, hi) in zip(x.shape, pairs)), x.dtype),)


def _pad_kernel(x, *, padding_value, widths, **_):
    x = np.asarray(x)
    if x.ndim == 0:
        return (x.copy(),)
    return (np.pad(x, tuple(tuple(w) for w in widths), mode="constant", constant_values=padding_value),)


def _pad_windows(in_avals, out_avals, *, widths, **_):
    """A padded dim: result row ``o`` reads operand row ``o - lo`` (a shift: a halo of ``lo`` rows)."""
    x, out = in_avals[0], out_avals[0]
    return tuple(Window(0, d, d, 1, 1, -int(widths[d][0])) for d, (n, m) in enumerate(zip(x.shape, out.shape)) if n != m)


def _pad_window_params(params: dict, in_shapes, out_shapes, local) -> dict:
    """On a row block: the block's own padding (none inside the tensor) on windowed dims."""
    widths = [tuple(w) for w in params["widths"]]
    for d, lw in local.items():
        widths[d] = (lw.lo, lw.hi)
    return {**params, "widths": tuple(widths)}


register_op(
    "pad",
    _pad_eval,
    _pad_kernel,
    lambda in_avals, out_avals, **_: _mismatch_rule(in_avals, out_avals),
    windows=_pad_windows,
    window_params=_pad_window_params,
    doc="pad each dim with (lo, hi) copies of `padding_value`; padded dims are permutation factors",
)


# -- take --------------------------------------------------------------------------------------
def _take_eval(*avals, axis, **_):
    preconditions.arity("take", avals, 2)
    x, indices = avals
    if x.ndim == 0:
        raise ValueError("take: x must have rank >= 1")
    axis = preconditions.axis("take", axis, x.ndim)
    if indices.dtype.kind not in "iu":
        raise ValueError(f"take: indices must have an integer dtype, got {indices.dtype}")
    if x.shape[axis] == 0 and indices.size:
        raise ValueError(f"take: cannot take from the empty axis {axis} of shape {x.shape}")
    return (Aval(x.shape[:axis] + indices.shape + x.shape[axis + 1 :], x.dtype),)


def take_rule(in_avals, out_avals, *, axis, **_):
    x, indices = in_avals
    b = RuleBuilder([x.shape, indices.shape], [out_avals[0].shape])
    o = 0
    for d in range(axis):
        b.add([d, None], [o], x.shape[d])
        o += 1
    for k, n in enumerate(indices.shape):
        b.add([None, k], [o], n)
        o += 1
    for d in range(axis + 1, x.ndim):
        b.add([d, None], [o], x.shape[d])
        o += 1
    b.add([axis, None], [None], x.shape[axis], NEED_REPLICATION)
    return b.build()


register_op(
    "take",
    _take_eval,
    lambda x, indices, *, axis, **_: (np.take(x, indices, axis=axis),),
    take_rule,
    doc="np.take(x, indices, axis); x's axis needs replication, indices dims pass through",
)


# -- derivatives ---------------------------------------------------------------------------------
def _slice_vjp(ct, x, *, out, start, limit, strides=None, **_):
    return (lambda: place(ct, x.shape, start, strides),)


def place(g, shape, start, strides=None):
    """``g`` where a slice from ``start`` with ``strides`` of an array of ``shape`` took it, zeros
    elsewhere (a slice's transpose): spread out by the strides (``_interleave``), then padded."""
    widths = []
    for d, (s, n) in enumerate(zip(start, shape)):
        k = 1 if strides is None else int(strides[d])
        m = g.shape[d]
        if k > 1 and m > 1:
            g = _interleave(g, d, k)
        extent = (m - 1) * k + 1 if m else 0
        widths.append((int(s), int(n - s - extent)))
    return call("pad", g, widths=tuple(widths), padding_value=np.zeros((), g.dtype))


def _interleave(g, d: int, k: int):
    """``k - 1`` zeros after each element along dim ``d`` but the last: [a, b] -> [a, 0, .., b]."""
    shape, m = tuple(g.shape), g.shape[d]
    g = call("reshape", g, new_shape=shape[:d + 1] + (1,) + shape[d + 1:])
    gap = zeros(shape[:d + 1] + (k - 1,) + shape[d + 1:], g.dtype)
    g = call("concatenate", g, gap, axis=d + 1)
    g = call("reshape", g, new_shape=shape[:d] + (m * k,) + shape[d + 1:])
    limit = shape[:d] + ((m - 1) * k + 1,) + shape[d + 1:]
    return call("slice", g, start=(0,) * len(shape), limit=limit)


def _pad_vjp(ct, x, *, out, widths, **_):
    start = tuple(int(lo) for lo, _ in widths)
    limit = tuple(int(lo) + n for (lo, _), n in zip(widths, x.shape))
    return (lambda: call("slice", ct, start=start, limit=limit),)


def _take_vjp(ct, x, indices, *, out, axis, **_):
    """Scatter-add as a contraction with the one-hot of the indices: exact for integer values."""
    def make():
        k, n = np.ndim(indices), x.shape[axis]
        onehot = (np.expand_dims(indices, -1) == np.arange(n)).astype(ct.dtype)  # indices.shape + (n,)
        idx_dims = tuple(range(axis, axis + k))
        g = call("dot_general", ct, onehot, contracting=(idx_dims, tuple(range(k))), batch=((), ()))
        # g: [x dims before axis, x dims after axis, n]: move n back to ``axis``
        rank = np.ndim(x)
        perm = tuple(range(axis)) + (rank - 1,) + tuple(range(axis, rank - 1))
        if perm != tuple(range(rank)):
            g = call("transpose", g, perm=perm)
        return fit(g, x)
    return (make, None)


define_vjp("slice", _slice_vjp)
define_vjp("pad", _pad_vjp)
define_vjp("take", _take_vjp)
