"""numpy's reductions lowered to ``reduce_*`` ops (sum, prod, max, min, any, all, mean, var,
std, count_nonzero, argmax / argmin), and cumsum and sort, with numpy's dtype rules (small
integers and bools sum in 64 bits; mean of integers is f64)."""

from __future__ import annotations

import math

import numpy as np

from ..errors import TraceError
from .explicit import api as explicit_api
from .explicit.errors import ShardingTypeError
from .lowering_common import as_tracer, astype, explicit_mode, norm_axes, norm_axis, reject_unsupported
from .lowering_shapes import reshape
from .state import bind


def keep_dims(x, result, axes, keepdims):
    """``result`` of reducing ``x`` over ``axes``, with those dims back as size 1 when ``keepdims``."""
    if not keepdims:
        return result
    shape = tuple(1 if d in axes else n for d, n in enumerate(x.shape))
    return reshape(result, shape)


def reduce_axes(kind: str, x, axis, keepdims, fn, dtype=None):
    """``reduce_<kind>`` of ``x`` over ``axis`` with numpy's dtype rules (bools and small ints
    sum and multiply in 64 bits); ``fn`` names the numpy call in errors."""
    x = as_tracer(x)
    if dtype is not None:
        x = astype(x, dtype)
    elif kind in ("sum", "prod") and x.dtype.kind == "b":
        x = astype(x, np.int64)
    elif kind in ("sum", "prod") and x.dtype.kind in "iu" and x.dtype.itemsize < 8:
        x = astype(x, np.int64 if x.dtype.kind == "i" else np.uint64)
    axes = norm_axes(axis, x.ndim, fn)
    if kind in ("max", "min") and any(x.shape[a] == 0 for a in axes):
        raise TraceError(f"{fn}: zero-size reduction over axis {axes} has no identity")
    result = bind(f"reduce_{kind}", x, axes=axes)
    return keep_dims(x, result, axes, keepdims)


def numpy_sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """``np.sum`` lowered (the front ends\' ``sum`` inside a trace)."""
    reject_unsupported(out=out, initial=initial, where=where, fn="np.sum")
    return reduce_axes("sum", a, axis, keepdims, "np.sum", dtype)


def numpy_prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """``np.prod`` lowered (the front ends\' ``prod`` inside a trace)."""
    reject_unsupported(out=out, initial=initial, where=where, fn="np.prod")
    return reduce_axes("prod", a, axis, keepdims, "np.prod", dtype)


def numpy_max(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    """``np.max`` lowered (the front ends\' ``max`` inside a trace)."""
    reject_unsupported(out=out, initial=initial, where=where, fn="np.max")
    return reduce_axes("max", a, axis, keepdims, "np.max")


def numpy_min(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    """``np.min`` lowered (the front ends\' ``min`` inside a trace)."""
    reject_unsupported(out=out, initial=initial, where=where, fn="np.min")
    return reduce_axes("min", a, axis, keepdims, "np.min")


def _truth(a):
    """``a != 0`` as bools (numpy's truth of each element)."""
    x = as_tracer(a)
    return x if x.dtype == np.bool_ else bind("ne", x, np.zeros((), x.dtype)[()])


def numpy_any(a, axis=None, out=None, keepdims=False, *, where=None):
    """``np.any`` lowered (the front ends\' ``any`` inside a trace)."""
    reject_unsupported(out=out, where=where, fn="np.any")
    return reduce_axes("max", _truth(a), axis, keepdims, "np.any")


def numpy_all(a, axis=None, out=None, keepdims=False, *, where=None):
    """``np.all`` lowered (the front ends\' ``all`` inside a trace)."""
    reject_unsupported(out=out, where=where, fn="np.all")
    return reduce_axes("min", _truth(a), axis, keepdims, "np.all")


def numpy_count_nonzero(a, axis=None, *, keepdims=False):
    """``np.count_nonzero`` lowered (the front ends\' ``count_nonzero`` inside a trace)."""
    return reduce_axes("sum", _truth(a), axis, keepdims, "np.count_nonzero", np.intp)


def _count(x, axes) -> int:
    return math.prod(x.shape[a] for a in axes)


def _mean_dtype(x, dtype):
    if dtype is not None:
        return np.dtype(dtype)
    return x.dtype if x.dtype.kind in "fc" else np.dtype(np.float64)


def numpy_mean(a, axis=None, dtype=None, out=None, keepdims=False, where=None):
    """``np.mean`` lowered (the front ends\' ``mean`` inside a trace)."""
    reject_unsupported(out=out, where=where, fn="np.mean")
    x = as_tracer(a)
    axes = norm_axes(axis, x.ndim, "np.mean")
    dt = _mean_dtype(x, dtype)
    total = reduce_axes("sum", x, axes, keepdims, "np.mean", dt)
    return total / np.asarray(_count(x, axes), dtype=dt)[()]


def numpy_var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None, correction=None):
    """``np.var`` lowered (the front ends\' ``var`` inside a trace)."""
    reject_unsupported(out=out, where=where, mean=mean, correction=correction, fn="np.var")
    x = as_tracer(a)
    axes = norm_axes(axis, x.ndim, "np.var")
    dt = _mean_dtype(x, dtype)
    n = _count(x, axes)
    # numpy: mean with keepdims, centre, square by multiplication, sum, divide by n - ddof.
    m = reduce_axes("sum", x, axes, True, "np.var", dt) / np.asarray(n, dtype=dt)[()]
    c = astype(x, dt) - m
    return reduce_axes("sum", c * c, axes, keepdims, "np.var") / np.asarray(max(n - ddof, 0), dtype=dt)[()]


def numpy_std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None, correction=None):
    """``np.std`` lowered (the front ends\' ``std`` inside a trace)."""
    return np.sqrt(numpy_var(a, axis, dtype, out, ddof, keepdims, where, mean, correction))


def numpy_arg(kind):
    """``np.argmax`` / ``np.argmin`` (``kind``) lowered."""
    def f(a, axis=None, out=None, *, keepdims=False):
        reject_unsupported(out=out, fn=f"np.{kind}")
        x = as_tracer(a)
        if axis is None:
            x = reshape(x, (-1,))
            axis = 0
        ax = norm_axis(axis, x.ndim, f"np.{kind}")
        if x.shape[ax] == 0:
            raise TraceError(f"np.{kind}: attempt to get {kind} of an empty sequence")
        r = bind(kind, x, axis=ax, index_dtype=np.dtype(np.intp))
        return keep_dims(x, r, (ax,), keepdims)

    return f


def numpy_cumsum(a, axis=None, dtype=None, out=None):
    """``np.cumsum`` lowered (the front ends\' ``cumsum`` inside a trace)."""
    reject_unsupported(out=out, fn="np.cumsum")
    x = as_tracer(a)
    if axis is None and explicit_mode():
        t = explicit_api.typeof(x)
        if any(t.spec):
            raise ShardingTypeError(
                f"The input should be fully replicated when axis is not specified to cumsum. Got input type={t}",
                op="cumsum",
            )
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    if dtype is not None:
        x = astype(x, dtype)
    elif x.dtype.kind in "biu" and x.dtype.itemsize < 8:
        x = astype(x, np.int64 if x.dtype.kind != "u" else np.uint64)
    return bind("cumsum", x, axis=norm_axis(axis, x.ndim, "np.cumsum"))


def numpy_sort(a, axis=-1, kind=None, order=None, stable=None):
    """``np.sort`` lowered (the front ends\' ``sort`` inside a trace)."""
    x = as_tracer(a)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    return bind("sort", x, axis=norm_axis(axis, x.ndim, "np.sort"))
