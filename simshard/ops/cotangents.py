"""Helpers of the derivative rules (``OpDef.vjp``): cotangents are written with numpy calls on
traced values, so each rule records ops of this table in the trace that differentiates.

A rule gets the result's cotangent ``ct``, the operands (traced values, or numpy scalars for
literals) and the result ``out``, and returns one entry per operand: ``None`` (no cotangent) or a
function of no arguments making it, called only for operands being differentiated.
"""

from __future__ import annotations

import numpy as np

from .registry import OPS


def call(op: str, *operands, **params):
    """Record ``op`` in the innermost trace (the trace differentiating)."""
    return OPS[op](*operands, **params)


def fit(g, x):
    """``g`` as the cotangent of operand ``x``: summed to a scalar where ``x`` was a rank-0
    operand of an element-wise op (the tracer broadcasts only rank 0 there), in ``x``'s dtype."""
    if np.ndim(x) == 0 and np.ndim(g) > 0:
        g = call("reduce_sum", g, axes=tuple(range(np.ndim(g))))
    dtype = np.dtype(x.dtype)
    if np.dtype(g.dtype) != dtype:
        g = call("convert", g, dtype=dtype)
    return g


def zeros(shape, dtype):
    return call("full", shape=tuple(shape), fill_value=0, dtype=np.dtype(dtype))


def expand(g, shape, axes):
    """``g`` (``shape`` with ``axes`` reduced away) broadcast back to ``shape``."""
    kept = tuple(d for d in range(len(shape)) if d not in axes)
    return call("broadcast_in_dim", g, shape=tuple(shape), broadcast_dimensions=kept)


def differentiable(dtype) -> bool:
    """Floats and complex carry cotangents; integers and bools do not (JAX's float0)."""
    return np.dtype(dtype).kind in "fc"
