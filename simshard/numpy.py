"""``simshard.numpy`` (import as ``snp``): jax.numpy's names and signatures, traced by simshard.

Inside ``ss.jit`` / ``ss.trace`` every function records ops (through ``simshard.tracing.lowering``);
outside a trace, functions of plain arrays just run numpy. Where ``jax.numpy`` has an
``out_sharding=`` argument, so do these: in explicit mode it fixes the result's sharding type (and
resolves what would otherwise be a trace-time ``ShardingTypeError``); in auto mode it becomes a
sharding constraint on the result.

Dtypes follow jax.numpy with 64-bit types disabled (JAX's default): ``zeros`` is float32,
``arange(16)`` and ``argmax`` are int32, Python and numpy 64-bit inputs become 32-bit, and the
functions of several operands promote them on JAX's lattice with weakly typed Python scalars
(``tracing/promotion.py``). numpy's own functions and operators on traced values (``np.sin(x)``,
``x + 1.5``) keep numpy's rules: docs/dtypes.md sets the two side by side.
"""

from __future__ import annotations

import operator

import numpy as _np

from .errors import TraceError
from .ir import trace_stack
from .tracing import committed as _committed, lowering as _lo
from .tracing.promotion import jax_ufunc, promote, strong
from .tracing.state import Tracer, bind, constant

# -- dtypes and constants ----------------------------------------------------------------------------
bool_ = _np.bool_
int8, int16, int32, int64 = _np.int8, _np.int16, _np.int32, _np.int64
uint8, uint16, uint32, uint64 = _np.uint8, _np.uint16, _np.uint32, _np.uint64
float16, float32, float64 = _np.float16, _np.float32, _np.float64
complex64, complex128 = _np.complex64, _np.complex128
dtype = _np.dtype
pi, e, inf, nan, newaxis = _np.pi, _np.e, _np.inf, _np.nan, None
ndarray = Tracer


def _tracing() -> bool:
    return trace_stack.current() is not None


def _canonical(dt) -> _np.dtype:
    """JAX's x64-disabled dtypes: 64-bit types become 32-bit."""
    dt = _np.dtype(dt)
    return {
        _np.dtype(_np.float64): _np.dtype(_np.float32),
        _np.dtype(_np.int64): _np.dtype(_np.int32),
        _np.dtype(_np.uint64): _np.dtype(_np.uint32),
        _np.dtype(_np.complex128): _np.dtype(_np.complex64),
    }.get(dt, dt)


def _default_dtype(value) -> _np.dtype:
    return _canonical(_np.asarray(value).dtype)


def _no_out_sharding_eager(out_sharding, fn: str) -> None:
    if out_sharding is not None:
        raise TraceError(f"snp.{fn}(..., out_sharding=...) works inside ss.jit / ss.trace (there is no eager sharded array)")


def _shape_tuple(shape) -> tuple[int, ...]:
    return (operator.index(shape),) if _np.ndim(shape) == 0 else tuple(operator.index(s) for s in shape)


# -- creation ------------------------------------------------------------------------------------------
def array(object, dtype=None, copy=True, order="K", ndmin=0, *, device=None, out_sharding=None):
    if isinstance(object, Tracer):
        x = object if dtype is None else _lo.astype(object, dtype)
        return _lo.apply_out(x, out_sharding, "array")
    arr = _np.array(object, dtype=dtype, ndmin=ndmin)
    if dtype is None:
        arr = arr.astype(_canonical(arr.dtype))
    if not _tracing():
        _no_out_sharding_eager(out_sharding, "array")
        return arr
    return _lo.apply_out(constant(arr), out_sharding, "array")


def asarray(a, dtype=None, order=None, *, copy=None, device=None, out_sharding=None):
    return array(a, dtype=dtype, out_sharding=out_sharding)


def full(shape, fill_value, dtype=None, *, device=None, out_sharding=None):
    shape = _shape_tuple(shape)
    dt = _np.dtype(dtype) if dtype is not None else _default_dtype(fill_value)
    if isinstance(fill_value, Tracer):
        return broadcast_to(_lo.astype(fill_value, dt), shape, out_sharding=out_sharding)
    if not _tracing():
        _no_out_sharding_eager(out_sharding, "full")
        return _np.full(shape, fill_value, dtype=dt)
    return _lo.full(shape, fill_value, dt, out_sharding=out_sharding)


def zeros(shape, dtype=None, *, device=None, out_sharding=None):
    return full(shape, 0, dtype or float32, out_sharding=out_sharding)


def ones(shape, dtype=None, *, device=None, out_sharding=None):
    return full(shape, 1, dtype or float32, out_sharding=out_sharding)


def empty(shape, dtype=None, *, device=None, out_sharding=None):
    return zeros(shape, dtype, out_sharding=out_sharding)


def _like(value_fn):
    def f(a, dtype=None, shape=None, *, device=None, out_sharding=None):
        x_shape = tuple(_np.shape(a)) if not isinstance(a, Tracer) else a.shape
        dt = dtype if dtype is not None else (a.dtype if hasattr(a, "dtype") else _default_dtype(a))
        value = value_fn()
        if not _tracing():
            _no_out_sharding_eager(out_sharding, "zeros_like")
            return _np.full(x_shape if shape is None else _shape_tuple(shape), value, dtype=dt)
        if out_sharding is None and shape is None and isinstance(a, Tracer):
            # jnp.*_like copies the input's sharding
            from .tracing.explicit.api import typeof

            t = typeof(a)
            if any(t.spec):
                out_sharding = t.sharding
        return full(x_shape if shape is None else shape, value, dt, out_sharding=out_sharding)

    return f


zeros_like = _like(lambda: 0)
ones_like = _like(lambda: 1)
empty_like = zeros_like


def full_like(a, fill_value, dtype=None, shape=None, *, device=None, out_sharding=None):
    return _like(lambda: fill_value)(a, dtype, shape, out_sharding=out_sharding)


def arange(start, stop=None, step=None, dtype=None, *, device=None, out_sharding=None):
    values = _np.arange(start, stop, step)
    dt = _np.dtype(dtype) if dtype is not None else _canonical(values.dtype)
    values = values.astype(dt)
    if not _tracing():
        _no_out_sharding_eager(out_sharding, "arange")
        return values
    if (start, stop, step) == (values.size, None, None) or (start == 0 and step in (None, 1) and stop is not None):
        return _lo.bind_out("iota", shape=values.shape, dimension=0, dtype=dt, out_sharding=out_sharding, api_name="arange")
    return _lo.apply_out(constant(values), out_sharding, "arange")


# -- elementwise: JAX's promotion (``tracing/promotion.py``) ---------------------------------------------
_float_ufuncs = (_np.exp, _np.log, _np.sqrt, _np.tanh, _np.sin, _np.cos, _np.reciprocal, _np.log1p, _np.expm1)
exp, log, sqrt, tanh, sin, cos, reciprocal, log1p, expm1 = (jax_ufunc(u, inexact=True) for u in _float_ufuncs)
abs = absolute = jax_ufunc(_np.absolute)
negative, sign, square, logical_not = map(jax_ufunc, (_np.negative, _np.sign, _np.square, _np.logical_not))
floor, ceil = (jax_ufunc(u, integers_kept=True) for u in (_np.floor, _np.ceil))
add, subtract, multiply = map(jax_ufunc, (_np.add, _np.subtract, _np.multiply))
divide = true_divide = jax_ufunc(_np.true_divide, inexact=True)
arctan2 = jax_ufunc(_np.arctan2, inexact=True)
floor_divide, power, maximum, minimum = map(jax_ufunc, (_np.floor_divide, _np.power, _np.maximum, _np.minimum))
remainder = mod = jax_ufunc(_np.remainder)
equal, not_equal, less, less_equal = map(jax_ufunc, (_np.equal, _np.not_equal, _np.less, _np.less_equal))
greater, greater_equal = jax_ufunc(_np.greater), jax_ufunc(_np.greater_equal)
logical_and, logical_or, logical_xor = map(jax_ufunc, (_np.logical_and, _np.logical_or, _np.logical_xor))


def _t(x):
    return x if isinstance(x, Tracer) else constant(_np.asarray(x))


def _dispatch(np_fn, lo_fn, *args, out_sharding=None, name="", **kwargs):
    args = tuple(strong(x) for x in args)  # numpy arrays as JAX takes them: 32-bit
    if _tracing():
        return lo_fn(*args, **kwargs) if out_sharding is None else lo_fn(*args, out_sharding=out_sharding, **kwargs)
    _no_out_sharding_eager(out_sharding, name)
    return np_fn(*args, **kwargs)


def astype(x, dtype, /, *, copy=False, device=None):
    return _lo.astype(x, dtype) if _tracing() else _np.asarray(x).astype(dtype)


def where(condition, x=None, y=None, /, *, size=None, fill_value=None):
    if x is None or y is None:
        raise TraceError("snp.where(condition) with one argument has a data-dependent shape and cannot be traced")
    return _dispatch(_np.where, _lo.where, condition, *promote(x, y), name="where")


def clip(arr, min=None, max=None):
    return _dispatch(_np.clip, _lo.clip, arr, min, max, name="clip")


# -- contractions --------------------------------------------------------------------------------------
def matmul(a, b, *, precision=None, preferred_element_type=None, out_sharding=None):
    return _dispatch(_np.matmul, _lo.matmul, *promote(a, b), out_sharding=out_sharding, name="matmul")


def dot(a, b, *, precision=None, preferred_element_type=None, out_sharding=None):
    return _dispatch(_np.dot, _lo.dot, *promote(a, b), out_sharding=out_sharding, name="dot")


def einsum(subscripts, *operands, out=None, optimize="auto", precision=None, preferred_element_type=None,
           out_sharding=None):
    operands = promote(*operands)
    if _tracing():
        return _lo.einsum(subscripts, *operands, out_sharding=out_sharding)
    _no_out_sharding_eager(out_sharding, "einsum")
    return _np.einsum(subscripts, *operands)


def tensordot(a, b, axes=2, *, precision=None, preferred_element_type=None):
    return _dispatch(_np.tensordot, _lo.tensordot, *promote(a, b), axes, name="tensordot")


# -- shapes ------------------------------------------------------------------------------------------
def reshape(a, shape=None, order="C", *, newshape=None, copy=None, out_sharding=None):
    shape = shape if shape is not None else newshape
    if _tracing():
        return _lo.reshape(a, shape, order, out_sharding=out_sharding)
    _no_out_sharding_eager(out_sharding, "reshape")
    return _np.reshape(a, shape, order=order)


def ravel(a, order="C", *, out_sharding=None):
    return reshape(a, (-1,), order, out_sharding=out_sharding)


def transpose(a, axes=None):
    return _dispatch(_np.transpose, _lo.transpose, a, axes, name="transpose")


def permute_dims(a, axes):
    return transpose(a, axes)


def swapaxes(a, axis1, axis2):
    return _dispatch(_np.swapaxes, _lo.swapaxes, a, axis1, axis2, name="swapaxes")


def moveaxis(a, source, destination):
    return _dispatch(_np.moveaxis, _lo.moveaxis, a, source, destination, name="moveaxis")


def expand_dims(a, axis):
    return _dispatch(_np.expand_dims, _lo.expand_dims, a, axis, name="expand_dims")


def squeeze(a, axis=None):
    return _dispatch(_np.squeeze, _lo.squeeze, a, axis, name="squeeze")


def broadcast_to(array, shape, *, out_sharding=None):
    if _tracing():
        return _lo.broadcast_to(array, _shape_tuple(shape), out_sharding=out_sharding)
    _no_out_sharding_eager(out_sharding, "broadcast_to")
    return _np.broadcast_to(array, shape)


def concatenate(arrays, axis=0, dtype=None):
    arrays = promote(*arrays) if dtype is None else arrays
    return _dispatch(_np.concatenate, _lo.concatenate, arrays, axis, name="concatenate", dtype=dtype)


def stack(arrays, axis=0, out=None, dtype=None):
    arrays = promote(*arrays) if dtype is None else arrays
    return _dispatch(_np.stack, _lo.stack, arrays, axis, name="stack", dtype=dtype)


def pad(array, pad_width, mode="constant", **kwargs):
    return _dispatch(_np.pad, _lo.pad, array, pad_width, mode, name="pad", **kwargs)


def take(a, indices, axis=None, out=None, mode=None, unique_indices=False, indices_are_sorted=False,
         fill_value=None):
    return _dispatch(_np.take, _lo.take, a, indices, axis, name="take")


def shape(a):
    return tuple(_np.shape(a)) if not isinstance(a, Tracer) else a.shape


def ndim(a):
    return len(shape(a))


def size(a, axis=None):
    s = shape(a)
    return int(_np.prod(s)) if axis is None else s[axis]


# -- reductions (JAX keeps int32 sums int32) --------------------------------------------------------
def _sum_dtype(a, dtype):
    if dtype is not None:
        return dtype
    dt = _np.dtype(a.dtype) if hasattr(a, "dtype") else _default_dtype(a)
    if dt.kind == "b":
        return int32
    if dt.kind in "iu":
        return dt if dt.itemsize >= 4 else (int32 if dt.kind == "i" else uint32)
    return None


def sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None, promote_integers=True):
    return _dispatch(_np.sum, _lo.numpy_sum, a, axis, _sum_dtype(a, dtype), None, keepdims, initial, where, name="sum")


def prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None, promote_integers=True):
    return _dispatch(_np.prod, _lo.numpy_prod, a, axis, _sum_dtype(a, dtype), None, keepdims, initial, where, name="prod")


def max(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    return _dispatch(_np.max, _lo.numpy_max, a, axis, None, keepdims, initial, where, name="max")


def min(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    return _dispatch(_np.min, _lo.numpy_min, a, axis, None, keepdims, initial, where, name="min")


amax, amin = max, min


def _float_dtype(a, dtype):
    if dtype is not None:
        return dtype
    dt = _np.dtype(a.dtype) if hasattr(a, "dtype") else _default_dtype(a)
    return None if dt.kind in "fc" else float32


def _np_mean(a, axis, dtype, out, keepdims, where):
    return _np.mean(a, axis, dtype, out, keepdims, where=True if where is None else where)


def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    return _dispatch(_np_mean, _lo.numpy_mean, strong(a), axis, _float_dtype(a, dtype), None, keepdims, where, name="mean")


def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, correction=None):
    if correction is not None:
        ddof = correction
    return _dispatch(_np.var, _lo.numpy_var, a, axis, _float_dtype(a, dtype), None, ddof, keepdims, name="var")


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, correction=None):
    if correction is not None:
        ddof = correction
    return _dispatch(_np.std, _lo.numpy_std, a, axis, _float_dtype(a, dtype), None, ddof, keepdims, name="std")


def _arg(kind: str):
    np_fn = getattr(_np, kind)

    def f(a, axis=None, out=None, keepdims=None):
        if not _tracing():
            return np_fn(a, axis=axis, keepdims=bool(keepdims)).astype(int32)
        x = _t(a)
        if axis is None:
            x, axis = _lo.reshape(x, (-1,)), 0
        ax = _lo.norm_axis(axis, x.ndim, f"snp.{kind}")

        r = bind(kind, x, axis=ax, index_dtype=_np.dtype(int32))
        return _lo.keep_dims(x, r, (ax,), bool(keepdims))

    f.__name__ = kind
    return f


argmax = _arg("argmax")
argmin = _arg("argmin")


def cumsum(a, axis=None, dtype=None, out=None):
    return _dispatch(_np.cumsum, _lo.numpy_cumsum, a, axis, _sum_dtype(a, dtype), name="cumsum")


def sort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False):
    if descending:
        raise TraceError("snp.sort(descending=True) is not supported")
    return _dispatch(_np.sort, _lo.numpy_sort, a, axis, name="sort")


def argsort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False):
    if descending:
        raise TraceError("snp.argsort(descending=True) is not supported")
    if not _tracing():
        return _np.argsort(a, axis=axis, kind="stable").astype(int32)

    x = _t(a)
    if axis is None:
        x, axis = _lo.reshape(x, (-1,)), 0
    return bind("argsort", x, axis=_lo.norm_axis(axis, x.ndim, "snp.argsort"), index_dtype=_np.dtype(int32))


# -- arrays committed to devices (``ss.device_put``'s): each function is one eager op on them ----------------
for _name, _fn in list(globals().items()):
    if (callable(_fn) and not isinstance(_fn, type) and not _name.startswith("_")
            and _name not in ("shape", "ndim", "size")
            and getattr(_fn, "__module__", None) in (__name__, jax_ufunc.__module__)):
        globals()[_name] = _committed.on_devices(_fn)
