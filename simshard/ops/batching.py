"""The batching rules of the built-in ops (``OpDef.batch``, read by ``vmap``), one per op.

A rule gets the operands (traced values; a batched one has the batch as its leading dim) and
which of them are batched, and records the op on them with its parameters shifted past the batch
dim, giving results batched at dim 0. They live together here because most are one line: the
element-wise ops all share one, the others shift an axis parameter.
"""

from __future__ import annotations

import numpy as np

from ..errors import TraceError
from ..sharding.dims import Sharding
from ..sharding.dim_sharding import DimSharding
from .cotangents import call
from .elementwise import BINARY, UNARY
from .registry import OPS, define_batch


def _size(operands, batched) -> int:
    return next(np.shape(x)[0] for x, b in zip(operands, batched) if b)


def _elementwise(op: str):
    def rule(operands, batched, **params):
        size = _size(operands, batched)
        out_rank = max(np.ndim(x) - (1 if b else 0) for x, b in zip(operands, batched))
        target = None
        for x, b in zip(operands, batched):
            if b and np.ndim(x) - 1 == out_rank:
                target = tuple(np.shape(x))
        fixed = []
        for x, b in zip(operands, batched):
            if b and np.ndim(x) == 1 and out_rank > 0:  # a per-example scalar: along the batch only
                x = call("broadcast_in_dim", x, shape=target, broadcast_dimensions=(0,))
            elif not b and np.ndim(x) > 0:
                x = call("broadcast_in_dim", x, shape=(size,) + tuple(np.shape(x)),
                         broadcast_dimensions=tuple(range(1, np.ndim(x) + 1)))
            fixed.append(x)
        return (call(op, *fixed, **params),)
    return rule


for _name in list(UNARY) + list(BINARY) + ["select", "convert", "stop_gradient", "propagation_barrier"]:
    define_batch(_name, _elementwise(_name))


def _shift(n):
    return tuple(int(a) + 1 for a in n)


def _one(op: str, shift):
    """An op of one batched operand whose parameters name its dims."""
    def rule(operands, batched, **params):
        (x,) = operands
        return (call(op, x, **shift(params, np.shape(x)[0])),)
    return rule


for _name in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod"):
    define_batch(_name, _one(_name, lambda p, n: {**p, "axes": _shift(p["axes"])}))
for _name in ("argmax", "argmin", "cumsum", "sort", "argsort"):
    if _name in OPS:
        define_batch(_name, _one(_name, lambda p, n: {**p, "axis": int(p["axis"]) + 1}))
define_batch("reshape", _one("reshape", lambda p, n: {**p, "new_shape": (n,) + tuple(p["new_shape"])}))
define_batch("transpose", _one("transpose", lambda p, n: {**p, "perm": (0,) + _shift(p["perm"])}))
define_batch("broadcast_in_dim", _one("broadcast_in_dim", lambda p, n: {
    **p, "shape": (n,) + tuple(p["shape"]), "broadcast_dimensions": (0,) + _shift(p["broadcast_dimensions"])}))
define_batch("slice", _one("slice", lambda p, n: {
    **p, "start": (0,) + tuple(p["start"]), "limit": (n,) + tuple(p["limit"]),
    "strides": (1,) + tuple(p.get("strides") or (1,) * len(p["start"]))}))
define_batch("pad", _one("pad", lambda p, n: {**p, "widths": ((0, 0),) + tuple(tuple(w) for w in p["widths"])}))


def _annotation(op: str):
    """A sharding annotation on a batched value: the batch dim is left open (propagation places it)."""
    def rule(operands, batched, *, sharding, **params):
        (x,) = operands
        s = Sharding(sharding.mesh, (DimSharding((), is_open=True),) + tuple(sharding.dims), sharding.replicated,
                     sharding.unreduced, sharding.reduce_op)
        return (call(op, x, sharding=s, **params),)
    return rule


define_batch("sharding_constraint", _annotation("sharding_constraint"))
define_batch("reshard", _annotation("reshard"))


def _concatenate(operands, batched, *, axis, **params):
    size = _size(operands, batched)
    fixed = [x if b else call("broadcast_in_dim", x, shape=(size,) + tuple(np.shape(x)),
                               broadcast_dimensions=tuple(range(1, np.ndim(x) + 1))) for x, b in zip(operands, batched)]
    return (call("concatenate", *fixed, axis=int(axis) + 1, **params),)


define_batch("concatenate", _concatenate)


def _dot_general(operands, batched, *, contracting, batch, **params):
    (lc, rc), (lb, rb) = contracting, batch
    lhs, rhs = operands
    bl, br = batched
    if bl and br:
        out = call("dot_general", lhs, rhs, contracting=(_shift(lc), _shift(rc)),
                   batch=((0,) + _shift(lb), (0,) + _shift(rb)), **params)
        return (out,)
    if bl:  # the batch is a free dim of lhs: first among its free dims, after the batch dims
        out = call("dot_general", lhs, rhs, contracting=(_shift(lc), tuple(rc)), batch=(_shift(lb), tuple(rb)), **params)
        at = len(lb)
    else:  # a free dim of rhs: after the batch dims and lhs's free dims
        out = call("dot_general", lhs, rhs, contracting=(tuple(lc), _shift(rc)), batch=(tuple(lb), _shift(rb)), **params)
        at = np.ndim(lhs) - len(lc)
    if at == 0:
        return (out,)
    rank = np.ndim(out)
    perm = (at,) + tuple(d for d in range(rank) if d != at)
    return (call("transpose", out, perm=perm),)


define_batch("dot_general", _dot_general)


def _take(operands, batched, *, axis, **params):
    x, indices = operands
    if batched[1]:
        raise TraceError("vmap: take / indexing with batched indices (a gather per example) is not supported yet")
    return (call("take", x, indices, axis=int(axis) + 1, **params),)


define_batch("take", _take)


def _starts_unbatched(op, batched, k):
    if any(batched[k:]):
        raise TraceError(f"vmap: {op} with batched start indices is not supported yet")


def _dynamic_slice(operands, batched, *, slice_sizes, **params):
    x, *starts = operands
    _starts_unbatched("dynamic_slice", batched, 1)
    zero = np.zeros((), np.asarray(starts[0]).dtype if starts and not hasattr(starts[0], "dtype") else
                    (starts[0].dtype if starts else np.int32))
    return (call("dynamic_slice", x, zero, *starts, slice_sizes=(np.shape(x)[0],) + tuple(slice_sizes), **params),)


def _dynamic_update_slice(operands, batched, **params):
    x, update, *starts = operands
    _starts_unbatched("dynamic_update_slice", batched, 2)
    size = _size(operands, batched)
    if not batched[0]:
        x = call("broadcast_in_dim", x, shape=(size,) + tuple(np.shape(x)), broadcast_dimensions=tuple(range(1, np.ndim(x) + 1)))
    if not batched[1]:
        update = call("broadcast_in_dim", update, shape=(size,) + tuple(np.shape(update)),
                      broadcast_dimensions=tuple(range(1, np.ndim(update) + 1)))
    zero = np.zeros((), starts[0].dtype if starts else np.int32)
    return (call("dynamic_update_slice", x, update, zero, *starts, **params),)


define_batch("dynamic_slice", _dynamic_slice)
define_batch("dynamic_update_slice", _dynamic_update_slice)


def _conv2d(operands, batched, **params):
    """A batch of inputs folds into the conv's own batch dim N; a batch of kernels does not fit
    one convolution (it would be a grouped one) and is refused by name."""
    x, w = operands
    if batched[1]:
        raise TraceError("vmap over conv2d's kernel (a batch of kernels) is not supported; vmap over its input, "
                         "or loop over the kernels")
    b, n = np.shape(x)[0], np.shape(x)[1]
    y = call("conv2d", call("reshape", x, new_shape=(b * n,) + tuple(np.shape(x)[2:])), w, **params)
    return (call("reshape", y, new_shape=(b, n) + tuple(np.shape(y)[1:])),)


define_batch("conv2d", _conv2d)
