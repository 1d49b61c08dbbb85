"""numpy calls lowered to registry ops, with numpy's semantics (broadcasting, dtypes, axes).

The tracer dispatches ufuncs to ``ufunc`` and other numpy functions through ``HANDLERS``; a
numpy function missing from the table fails at trace time naming it. Composite functions
(mean, var, softmax-like code, matmul) become several primitive ops, chosen so the reference
evaluation matches plain numpy bit for bit.

The lowering is split by job: ``lowering_common`` (helpers the front ends share),
``lowering_shapes``, ``lowering_reductions``, ``lowering_contractions``, ``lowering_indexing``;
this module holds the ufuncs, ``where`` / ``clip``, the table of numpy functions and the
dispatch, and re-exports the other modules' public names, so a front end imports one module.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..errors import TraceError
from .explicit import broadcast
from .lowering_common import (  # noqa: F401  (re-exported: the lowering's public names)
    apply_out, as_tracer, astype, bind_out, broadcast_all, broadcast_to, dtype_of, explicit_mode, is_traced,
    keep_weak, norm_axes, norm_axis, promote_weak, reject_unsupported, shape_of,
)
from .lowering_contractions import dot, dot_general, einsum, matmul, tensordot  # noqa: F401  (re-exported)
from .lowering_indexing import getitem, take  # noqa: F401  (re-exported)
from .lowering_reductions import (  # noqa: F401  (re-exported)
    keep_dims, numpy_all, numpy_any, numpy_arg, numpy_count_nonzero, numpy_cumsum, numpy_max, numpy_mean, numpy_min,
    numpy_prod, numpy_sort, numpy_std, numpy_sum, numpy_var, reduce_axes,
)
from .lowering_shapes import (  # noqa: F401  (re-exported)
    concatenate, expand_dims, full, moveaxis, pad, reshape, squeeze, stack, swapaxes, transpose,
)
from .state import bind


# -- ufuncs ---------------------------------------------------------------------------------------
UFUNC_OPS: dict[np.ufunc, str] = {
    np.add: "add", np.subtract: "sub", np.multiply: "mul", np.true_divide: "div", np.power: "pow",
    np.maximum: "max", np.minimum: "min", np.equal: "eq", np.not_equal: "ne", np.less: "lt",
    np.less_equal: "le", np.greater: "gt", np.greater_equal: "ge", np.logical_and: "and",
    np.logical_or: "or", np.logical_xor: "xor", np.floor_divide: "floordiv", np.remainder: "rem",
    np.arctan2: "atan2", np.negative: "neg", np.absolute: "abs", np.exp: "exp", np.log: "log",
    np.sqrt: "sqrt", np.tanh: "tanh", np.sin: "sin", np.cos: "cos", np.sign: "sign", np.floor: "floor",
    np.ceil: "ceil", np.square: "square", np.reciprocal: "reciprocal", np.logical_not: "logical_not",
    np.log1p: "log1p", np.expm1: "expm1", np.bitwise_and: "bitwise_and", np.bitwise_or: "bitwise_or",
    np.bitwise_xor: "bitwise_xor", np.invert: "invert",
}


_REDUCE_UFUNCS = {np.add: "sum", np.multiply: "prod", np.maximum: "max", np.minimum: "min"}


def ufunc(uf: np.ufunc, method: str, inputs, kwargs):
    """A numpy ufunc call on Tracers (``__array_ufunc__``): its op, operands broadcast and weak
    types promoted; ``reduce`` of add / multiply / maximum / minimum as the reduction."""
    if kwargs.get("out") is not None:
        raise TraceError(f"np.{uf.__name__}(..., out=...): in-place output cannot be traced")
    if method == "reduce" and uf in _REDUCE_UFUNCS:
        return reduce_axes(_REDUCE_UFUNCS[uf], inputs[0], kwargs.get("axis", 0), kwargs.get("keepdims", False), f"np.{uf.__name__}.reduce")
    if method != "__call__":
        raise TraceError(f"np.{uf.__name__}.{method} is not supported by simshard's tracer")
    if uf is np.matmul:
        return matmul(*inputs)
    extra = {k: v for k, v in kwargs.items() if v is not None and k not in ("casting", "order", "subok")}
    if extra:
        raise TraceError(f"np.{uf.__name__}: keyword arguments {sorted(extra)} are not supported")
    op = UFUNC_OPS.get(uf)
    if op is None:
        raise TraceError(f"np.{uf.__name__} is not supported by simshard's tracer (no op for it)")
    if uf.nin == 1:
        x = as_tracer(inputs[0])
        return keep_weak(bind(op, x), [x])
    promoted = promote_weak(inputs)
    return keep_weak(bind(op, *broadcast_all(promoted, f"np.{uf.__name__}")), promoted)


def where(condition, x=None, y=None):
    if x is None or y is None:
        raise TraceError("np.where(condition) with one argument has a data-dependent shape and cannot be traced")
    dt = np.result_type(dtype_of(x) if is_traced(x) or np.ndim(x) else x, dtype_of(y) if is_traced(y) or np.ndim(y) else y)
    if explicit_mode():
        # jnp.where: broadcast all three to one shape *and* one sharding (consensus) first.
        condition, x, y = broadcast.broadcast_arrays_typed([condition, x, y])
    c, a, b = broadcast_all([condition, x, y], "np.where")
    c = astype(c, np.bool_) if is_traced(c) else bool(c)
    a = astype(a, dt) if is_traced(a) else np.asarray(a, dtype=dt)[()]
    b = astype(b, dt) if is_traced(b) else np.asarray(b, dtype=dt)[()]
    return bind("select", c, a, b)


def clip(a, a_min=None, a_max=None, out=None, **kw):
    reject_unsupported(out=out, fn="np.clip")
    x = as_tracer(a)
    if a_min is not None:
        x = np.maximum(x, a_min)
    if a_max is not None:
        x = np.minimum(x, a_max)
    return x


def _like(value):
    def f(a, dtype=None, order=None, subok=None, shape=None, **kw):
        x = as_tracer(a)
        return full(x.shape if shape is None else shape, value, dtype or x.dtype)

    return f


def _full_like(a, fill_value, dtype=None, order=None, subok=None, shape=None):
    x = as_tracer(a)
    return full(x.shape if shape is None else shape, fill_value, dtype or x.dtype)


def _astype_fn(x, dtype, copy=True, device=None):
    return astype(x, dtype)


def _ndim(a):
    return as_tracer(a).ndim


def _shape_fn(a):
    return as_tracer(a).shape


HANDLERS: dict[Callable, Callable] = {
    np.sum: numpy_sum, np.prod: numpy_prod, np.max: numpy_max, np.amax: numpy_max, np.min: numpy_min, np.amin: numpy_min,
    np.mean: numpy_mean, np.var: numpy_var, np.std: numpy_std, np.argmax: numpy_arg("argmax"), np.argmin: numpy_arg("argmin"),
    np.cumsum: numpy_cumsum, np.sort: numpy_sort, np.reshape: reshape, np.transpose: transpose,
    np.swapaxes: swapaxes, np.moveaxis: moveaxis, np.expand_dims: expand_dims, np.squeeze: squeeze,
    np.broadcast_to: broadcast_to, np.concatenate: concatenate, np.stack: stack, np.pad: pad,
    np.take: take, np.where: where, np.dot: dot, np.tensordot: tensordot, np.einsum: einsum,
    np.clip: clip, np.zeros_like: _like(0), np.ones_like: _like(1), np.full_like: _full_like,
    np.ndim: _ndim, np.shape: _shape_fn, np.ravel: lambda a, order="C": reshape(a, (-1,)),
    np.matmul: matmul, np.any: numpy_any, np.all: numpy_all, np.count_nonzero: numpy_count_nonzero,
}
if hasattr(np, "astype"):
    HANDLERS[np.astype] = _astype_fn


def array_function(func, args, kwargs):
    """A numpy function call on Tracers (``__array_function__``), by ``HANDLERS``."""
    handler = HANDLERS.get(func)
    if handler is None:
        module = getattr(func, "__module__", "numpy") or "numpy"
        where = "np" + module[len("numpy"):] if module.startswith("numpy") else module
        raise TraceError(
            f"{where}.{getattr(func, '__name__', func)} is not supported by simshard's tracer; "
            "supported: " + ", ".join(sorted({f"np.{f.__name__}" for f in HANDLERS}))
        )
    return handler(*args, **kwargs)
