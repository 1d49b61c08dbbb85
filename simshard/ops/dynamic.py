"""``dynamic_slice`` and ``dynamic_update_slice`` (``jax.lax``'s), with run-time start indices.

Start indices are rank-0 integer operands after the array operand(s); like XLA, each start is
clamped so the window fits (``0 <= start <= n - size``). A dim the window covers whole is a
pass-through factor; a dim it cuts is one permutation factor of the operand's size shared by
operand, update and result (data may come from any device), ``inexact`` where it does not
multiply to the dim size:

    dynamic_slice 8x16 -> 4x16:  ([a, b], [], [])->([a, b]) {a=8, b=16} permutation={a}
"""

from __future__ import annotations

import numpy as np

from ..ir.program import Aval
from . import preconditions
from .builder import RuleBuilder
from .factors import PASS_THROUGH, PERMUTATION
from .cotangents import call, zeros
from .registry import define_vjp, local_result_shape, register_op


def _check_starts(op: str, x: Aval, starts) -> None:
    if len(starts) != x.ndim:
        raise ValueError(f"{op}: {len(starts)} start indices for an operand of rank {x.ndim}")
    for k, s in enumerate(starts):
        if s.ndim != 0 or s.dtype.kind not in "iu":
            raise ValueError(f"{op}: start index {k} must be an integer scalar, got {s}")


def _clamped(starts, shape, sizes) -> tuple[slice, ...]:
    out = []
    for s, n, k in zip(starts, shape, sizes):
        lo = int(min(max(int(np.asarray(s)), 0), n - k))
        out.append(slice(lo, lo + k))
    return tuple(out)


# -- dynamic_slice -------------------------------------------------------------------------------
def _ds_eval(x: Aval, *starts: Aval, slice_sizes, **_):
    _check_starts("dynamic_slice", x, starts)
    sizes = preconditions.int_tuple("dynamic_slice", "slice_sizes", slice_sizes, x.ndim)
    for d, (k, n) in enumerate(zip(sizes, x.shape)):
        if not 0 <= k <= n:
            raise ValueError(f"dynamic_slice: slice size {k} of dim {d} must be in 0..{n}")
    return (Aval(sizes, x.dtype),)


def _ds_kernel(x, *starts, slice_sizes, **_):
    return (np.array(np.asarray(x)[_clamped(starts, np.shape(x), slice_sizes)]),)


def _ds_rule(in_avals, out_avals, **_):
    x, out = in_avals[0], out_avals[0]
    b = RuleBuilder([a.shape for a in in_avals], [out.shape])
    none = [None] * (len(in_avals) - 1)
    for d, n in enumerate(x.shape):
        b.add([d] + none, [d], n, PASS_THROUGH if out.shape[d] == n else PERMUTATION)
    return b.build()


# -- dynamic_update_slice -------------------------------------------------------------------------
def _dus_eval(x: Aval, update: Aval, *starts: Aval, **_):
    _check_starts("dynamic_update_slice", x, starts)
    if update.ndim != x.ndim or any(u > n for u, n in zip(update.shape, x.shape)):
        raise ValueError(f"dynamic_update_slice: update of shape {update.shape} does not fit in operand {x.shape}")
    return (Aval(x.shape, x.dtype),)


def update_into(x: np.ndarray, update, *starts) -> None:
    """``dynamic_update_slice`` written into ``x`` itself (starts clamped so the update fits):
    the kernel on a copy, or an executor updating a buffer it owns in place."""
    x[_clamped(starts, x.shape, np.shape(update))] = np.asarray(update, dtype=x.dtype)


def _dus_kernel(x, update, *starts, **_):
    out = np.array(x, copy=True)
    update_into(out, update, *starts)
    return (out,)


def _dus_rule(in_avals, out_avals, **_):
    x, update = in_avals[0], in_avals[1]
    b = RuleBuilder([a.shape for a in in_avals], [out_avals[0].shape])
    none = [None] * (len(in_avals) - 2)
    for d, n in enumerate(x.shape):
        b.add([d, d] + none, [d], n, PASS_THROUGH if update.shape[d] == n else PERMUTATION)
    return b.build()


register_op(
    "dynamic_slice",
    _ds_eval,
    _ds_kernel,
    _ds_rule,
    local_params=local_result_shape("slice_sizes"),
    doc="x[start:start+size] per dim with run-time starts (clamped); cut dims are permutation factors",
)
register_op(
    "dynamic_update_slice",
    _dus_eval,
    _dus_kernel,
    _dus_rule,
    doc="x with `update` written at run-time starts (clamped); cut dims are permutation factors",
)


# -- derivatives: a window read is written back into zeros; a window write routes around it ------
def _ds_vjp(ct, x, *starts, out, slice_sizes, **_):
    return (lambda: call("dynamic_update_slice", zeros(x.shape, ct.dtype), ct, *starts),) + (None,) * len(starts)


def _dus_vjp(ct, x, update, *starts, out, **_):
    return (lambda: call("dynamic_update_slice", ct, zeros(update.shape, ct.dtype), *starts),
            lambda: call("dynamic_slice", ct, *starts, slice_sizes=tuple(update.shape))) + (None,) * len(starts)


define_vjp("dynamic_slice", _ds_vjp)
define_vjp("dynamic_update_slice", _dus_vjp)
