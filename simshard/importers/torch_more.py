"""More core ATen ops for ``torch_aten.ATEN``: ``arange``, ``clamp``, ``max.dim`` / ``min.dim``,
``index_select``, ``cumsum``, ``bitwise_not`` (what position ids, causal masks and the usual
reductions of a GPT-style model export to)."""

from __future__ import annotations

import numpy as np

from ..tracing.lowering_common import astype
from ..tracing.state import as_tracer, bind


def _arange(node, *args, dtype=None, **_):
    """``arange(end)``, ``arange(start, end)``, ``arange(start, end, step)``: an iota, scaled and shifted."""
    t = node.out_types[0]
    start, step = (args[0], args[2] if len(args) > 2 else 1) if len(args) > 1 else (0, 1)
    out = bind("iota", shape=t.shape, dimension=0, dtype=t.dtype)
    if step != 1:
        out = bind("mul", out, np.asarray(step, t.dtype))
    return bind("add", out, np.asarray(start, t.dtype)) if start != 0 else out


def _clamp(node, x, lo=None, hi=None):
    x = as_tracer(x)
    if lo is not None:
        x = bind("max", x, np.asarray(lo, x.dtype) if np.ndim(lo) == 0 and not hasattr(lo, "shape") else lo)
    if hi is not None:
        x = bind("min", x, np.asarray(hi, x.dtype) if np.ndim(hi) == 0 and not hasattr(hi, "shape") else hi)
    return x


def _extreme(reduce: str, arg: str):
    """``max.dim`` / ``min.dim``: the values and their indices along ``dim``."""

    def rule(node, x, dim, keepdim=False):
        x = as_tracer(x)
        d = dim % x.ndim
        values = bind(reduce, x, axes=(d,))
        index = bind(arg, x, axis=d, index_dtype=node.out_types[1].dtype)
        if keepdim:
            values, index = (bind("reshape", v, new_shape=t.shape) for v, t in zip((values, index), node.out_types))
        return [values, index]

    return rule


def _index_select(node, x, dim, index):
    x = as_tracer(x)
    return bind("take", x, index, axis=dim % x.ndim)


def _cumsum(node, x, dim, dtype=None):
    x = as_tracer(x)
    target = node.out_types[0].dtype
    return bind("cumsum", x if np.dtype(x.dtype) == target else astype(x, target), axis=dim % x.ndim)


def _bitwise_not(node, x):
    return bind("logical_not" if np.dtype(x.dtype) == np.bool_ else "invert", as_tracer(x))


MORE = {
    "arange.default": _arange, "arange.start": _arange, "arange.start_step": _arange,
    "clamp.default": _clamp, "clamp_min.default": lambda node, x, lo: _clamp(node, x, lo),
    "clamp_max.default": lambda node, x, hi: _clamp(node, x, None, hi),
    "max.dim": _extreme("reduce_max", "argmax"), "min.dim": _extreme("reduce_min", "argmin"),
    "index_select.default": _index_select, "cumsum.default": _cumsum, "bitwise_not.default": _bitwise_not,
}
