"""numpy calls lowered to registry ops, with numpy's semantics (broadcasting, dtypes, axes).

The tracer dispatches ufuncs to ``ufunc`` and other numpy functions through ``HANDLERS``; a
numpy function missing from the table fails at trace time naming it. Composite functions
(mean, var, softmax-like code, matmul) become several primitive ops, chosen so the reference
evaluation matches plain numpy bit for bit.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import TraceError
from .explicit import api as explicit_api
from .explicit import broadcast
from .explicit.errors import ShardingTypeError
from .explicit.mode import is_explicit
from .state import Tracer, as_tracer, bind, is_python_scalar


def _explicit() -> bool:
    """True when the current mesh has Explicit axes (explicit mode types every value)."""
    return is_explicit()


def _bind_out(op: str, *inputs, out_sharding=None, api_name=None, **params):
    """``bind`` with ``out_sharding`` (explicit mode: the result's type; auto mode: a constraint)."""
    if out_sharding is None:
        return bind(op, *inputs, **params)
    return explicit_api.bind_out(op, *inputs, out_sharding=out_sharding, api_name=api_name, **params)


def _apply_out(x, out_sharding, api_name: str):
    if out_sharding is None:
        return x
    return explicit_api.apply_out(x, out_sharding, api_name)

# -- helpers ------------------------------------------------------------------------------------
def _is_traced(x) -> bool:
    return isinstance(x, Tracer)


_as_tracer = as_tracer


def _dtype(x):
    return x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype


def _shape(x) -> tuple[int, ...]:
    return tuple(x.shape) if hasattr(x, "shape") else np.shape(x)


def _norm_axis(axis: int, ndim: int, fn: str) -> int:
    a = operator.index(axis)
    if not -ndim <= a < max(ndim, 1):
        raise TraceError(f"{fn}: axis {axis} is out of bounds for an array of rank {ndim}")
    return a % ndim if ndim else 0


def _norm_axes(axis, ndim: int, fn: str) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list)):
        axes = tuple(_norm_axis(a, ndim, fn) for a in axis)
    else:
        axes = (_norm_axis(axis, ndim, fn),)
    if len(set(axes)) != len(axes):
        raise TraceError(f"{fn}: repeated axis in {axis}")
    return axes


def broadcast_to(x, shape, out_sharding=None):
    """numpy broadcasting of ``x`` to ``shape`` as one broadcast_in_dim (no-op when equal).

    ``out_sharding`` (explicit mode, as ``jnp.broadcast_to``): the result's sharding; each operand
    dim must be unsharded or already sharded that way."""
    x = as_tracer(x)
    shape = tuple(int(s) for s in shape)
    if out_sharding is not None:
        return broadcast.broadcast_to_sharded(x, shape, out_sharding)
    return broadcast.broadcast_plain(x, shape)


def _broadcast_all(args: Sequence[Any], fn: str) -> list:
    """Broadcast array operands to one shape; Python / 0-d scalars stay scalars (literals)."""
    shapes = [_shape(a) for a in args]
    try:
        out = np.broadcast_shapes(*shapes)
    except ValueError:
        raise TraceError(f"{fn}: operands of shapes {shapes} do not broadcast together") from None
    res = []
    for a, s in zip(args, shapes):
        if s == () and not _is_traced(a):
            res.append(a)  # stays a literal scalar
        elif s == out:
            res.append(a if _is_traced(a) else _as_tracer(a))
        else:
            res.append(broadcast_to(a, out))
    return res


# -- weak types (NEP 50) ------------------------------------------------------------------------------
_WEAK_VALUE = {"b": False, "i": 0, "u": 0, "f": 0.0, "c": 0j}  # a Python scalar of each kind


def _is_weak(x) -> bool:
    """A Python scalar, or a Tracer of one (a scalar argument of the traced function)."""
    return (isinstance(x, Tracer) and x.weak) or is_python_scalar(x)


def _promote_weak(args: Sequence[Any]) -> list:
    """numpy's NEP 50 for weakly typed Tracers: where one meets a strongly typed operand, it takes
    the dtype a Python scalar of its kind would (``f32 * 3.0`` is f32, ``i32 * 3.0`` is f64)."""
    if not any(isinstance(a, Tracer) and a.weak for a in args):
        return list(args)
    strong = [_dtype(a) for a in args if not _is_weak(a)]
    if not strong:
        return list(args)
    weak = [_WEAK_VALUE[_dtype(a).kind] if isinstance(a, Tracer) else a for a in args if _is_weak(a)]
    target = np.result_type(*strong, *weak)
    return [astype(a, target) if isinstance(a, Tracer) and a.weak else a for a in args]


def _keep_weak(out, operands: Sequence[Any]):
    """An op on weak operands only (no array) gives a weak result, as in numpy and JAX."""
    traced = [a for a in operands if isinstance(a, Tracer)]
    if traced and all(_is_weak(a) for a in operands) and isinstance(out, Tracer):
        out.weak = True
    return out


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
    if kwargs.get("out") is not None:
        raise TraceError(f"np.{uf.__name__}(..., out=...): in-place output cannot be traced")
    if method == "reduce" and uf in _REDUCE_UFUNCS:
        return _reduce(_REDUCE_UFUNCS[uf], inputs[0], kwargs.get("axis", 0), kwargs.get("keepdims", False), f"np.{uf.__name__}.reduce")
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
        x = _as_tracer(inputs[0])
        return _keep_weak(bind(op, x), [x])
    promoted = _promote_weak(inputs)
    return _keep_weak(bind(op, *_broadcast_all(promoted, f"np.{uf.__name__}")), promoted)


def astype(x, dtype):
    dtype = np.dtype(dtype)
    x = _as_tracer(x)
    return x if x.dtype == dtype else bind("convert", x, dtype=dtype)


# -- contractions ---------------------------------------------------------------------------------
def dot_general(lhs, rhs, contracting, batch=((), ()), preferred_dtype=None, algorithm="matmul", out_sharding=None):
    params = dict(contracting=tuple(map(tuple, contracting)), batch=tuple(map(tuple, batch)))
    if algorithm != "matmul":
        params["algorithm"] = algorithm
    if preferred_dtype is not None:
        params["preferred_dtype"] = np.dtype(preferred_dtype)
    return _bind_out("dot_general", _as_tracer(lhs), _as_tracer(rhs), out_sharding=out_sharding, **params)


def matmul(a, b, out_sharding=None):
    a, b = _as_tracer(a), _as_tracer(b)
    if a.ndim == 0 or b.ndim == 0:
        raise TraceError("np.matmul: operands must not be scalars")
    if a.ndim == 1 and b.ndim == 1:
        return dot_general(a, b, ((0,), (0,)), out_sharding=out_sharding)
    if a.ndim == 1:
        if b.ndim == 2:
            return dot_general(a, b, ((0,), (b.ndim - 2,)), out_sharding=out_sharding)
        return _apply_out(matmul(expand_dims(a, 0), b)[..., 0, :], out_sharding, "matmul")
    if b.ndim == 1:
        return dot_general(a, b, ((a.ndim - 1,), (0,)), out_sharding=out_sharding)
    if a.ndim == 2 and b.ndim == 2:
        return dot_general(a, b, ((1,), (0,)), out_sharding=out_sharding)
    # Batched: broadcast the batch dims, then one dot_general with batch dims.
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    if _explicit():
        a, b = broadcast.matmul_batch_operands(a, b, batch)
    else:
        a = broadcast_to(a, batch + a.shape[-2:])
        b = broadcast_to(b, batch + b.shape[-2:])
    nb = len(batch)
    return dot_general(a, b, ((nb + 1,), (nb,)), (tuple(range(nb)), tuple(range(nb))), out_sharding=out_sharding)


def dot(a, b, out=None, out_sharding=None):
    a, b = _as_tracer(a), _as_tracer(b)
    if a.ndim == 0 or b.ndim == 0:
        return _apply_out(a * b, out_sharding, "dot")
    if b.ndim == 1 or a.ndim <= 2 and b.ndim <= 2:
        return matmul(a, b, out_sharding=out_sharding)
    return dot_general(a, b, ((a.ndim - 1,), (b.ndim - 2,)), out_sharding=out_sharding)


def tensordot(a, b, axes=2):
    a, b = _as_tracer(a), _as_tracer(b)
    if isinstance(axes, int):
        la = tuple(range(a.ndim - axes, a.ndim))
        lb = tuple(range(axes))
    else:
        la, lb = axes
        la = (la,) if isinstance(la, int) else tuple(la)
        lb = (lb,) if isinstance(lb, int) else tuple(lb)
    la = tuple(_norm_axis(x, a.ndim, "np.tensordot") for x in la)
    lb = tuple(_norm_axis(x, b.ndim, "np.tensordot") for x in lb)
    return dot_general(a, b, (la, lb))


def einsum(subscripts: str, *operands, out_sharding=None, **kwargs):
    """Two-operand (or one-operand) einsum lowered to dot_general / transpose / reductions."""
    if kwargs.get("out") is not None:
        raise TraceError("np.einsum(..., out=...) cannot be traced")
    spec = subscripts.replace(" ", "")
    if "..." in spec:
        raise TraceError("np.einsum with '...' is not supported; write the dims out")
    if "->" in spec:
        ins, out = spec.split("->")
    else:
        ins = spec
        counts = {c: ins.count(c) for c in ins if c.isalpha()}
        out = "".join(sorted(c for c, n in counts.items() if n == 1))
    terms = ins.split(",")
    if len(terms) != len(operands):
        raise TraceError(f"np.einsum: {len(terms)} subscripts for {len(operands)} operands")
    ops = [_as_tracer(o) for o in operands]
    for t, o in zip(terms, ops):
        if len(t) != o.ndim or len(set(t)) != len(t):
            raise TraceError(f"np.einsum: subscript {t!r} does not fit an operand of shape {o.shape} (repeated letters unsupported)")
    if len(ops) == 1:
        x, t = ops[0], terms[0]
        summed = [i for i, c in enumerate(t) if c not in out]
        if summed:
            x = _reduce("sum", x, tuple(summed), False, "np.einsum")
            t = "".join(c for c in t if c in out)
        return _apply_out(transpose(x, [t.index(c) for c in out]) if t != out else x, out_sharding, "einsum")
    if len(ops) != 2:
        raise TraceError("np.einsum: at most two operands are supported; chain einsums")
    (ta, tb), (a, b) = terms, ops
    # Letters only in one operand and not in the output are summed there first.
    for side in (0, 1):
        t, x, other = (ta, a, tb) if side == 0 else (tb, b, ta)
        lonely = [i for i, c in enumerate(t) if c not in out and c not in other]
        if lonely:
            x = _reduce("sum", x, tuple(lonely), False, "np.einsum")
            t = "".join(c for i, c in enumerate(t) if i not in lonely)
        if side == 0:
            ta, a = t, x
        else:
            tb, b = t, x
    if _explicit():
        # jnp.einsum contracts (second, first) and keeps that order when it gives the output's
        # order directly; the operand order decides the result's type in explicit mode.
        if "".join(c for c in out if c in ta and c in tb) + "".join(c for c in ta if c not in tb) + "".join(
            c for c in tb if c not in ta
        ) != out:
            (ta, a), (tb, b) = (tb, b), (ta, a)
    batch = [c for c in out if c in ta and c in tb]
    contract = [c for c in ta if c in tb and c not in out]
    got = "".join(batch) + "".join(c for c in ta if c not in tb) + "".join(c for c in tb if c not in ta)
    dot_out = None
    if out_sharding is not None:
        # out_sharding names the einsum's output dims: give the contraction the same spec, in its order.
        sh = explicit_api.resolve(out_sharding, len(out), "einsum")
        dot_out = type(sh)(sh.mesh, tuple(sh.dims[out.index(c)] for c in got), sh.replicated, sh.unreduced, sh.reduce_op)
    res = dot_general(a, b, ([ta.index(c) for c in contract], [tb.index(c) for c in contract]),
                      ([ta.index(c) for c in batch], [tb.index(c) for c in batch]), algorithm="einsum",
                      out_sharding=dot_out)
    return transpose(res, [got.index(c) for c in out]) if got != out else res


# -- reductions -----------------------------------------------------------------------------------
def _keep(x, result, axes, keepdims):
    if not keepdims:
        return result
    shape = tuple(1 if d in axes else n for d, n in enumerate(x.shape))
    return reshape(result, shape)


def _reduce(kind: str, x, axis, keepdims, fn, dtype=None):
    x = _as_tracer(x)
    if dtype is not None:
        x = astype(x, dtype)
    elif kind in ("sum", "prod") and x.dtype.kind == "b":
        x = astype(x, np.int64)
    elif kind in ("sum", "prod") and x.dtype.kind in "iu" and x.dtype.itemsize < 8:
        x = astype(x, np.int64 if x.dtype.kind == "i" else np.uint64)
    axes = _norm_axes(axis, x.ndim, fn)
    if kind in ("max", "min") and any(x.shape[a] == 0 for a in axes):
        raise TraceError(f"{fn}: zero-size reduction over axis {axes} has no identity")
    result = bind(f"reduce_{kind}", x, axes=axes)
    return _keep(x, result, axes, keepdims)


def _sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    _no(out=out, initial=initial, where=where, fn="np.sum")
    return _reduce("sum", a, axis, keepdims, "np.sum", dtype)


def _prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    _no(out=out, initial=initial, where=where, fn="np.prod")
    return _reduce("prod", a, axis, keepdims, "np.prod", dtype)


def _max(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    _no(out=out, initial=initial, where=where, fn="np.max")
    return _reduce("max", a, axis, keepdims, "np.max")


def _min(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    _no(out=out, initial=initial, where=where, fn="np.min")
    return _reduce("min", a, axis, keepdims, "np.min")


def _truth(a, fn: str):
    """``a != 0`` as bools (numpy's truth of each element)."""
    x = _as_tracer(a)
    return x if x.dtype == np.bool_ else bind("ne", x, np.zeros((), x.dtype)[()])


def _any(a, axis=None, out=None, keepdims=False, *, where=None):
    _no(out=out, where=where, fn="np.any")
    return _reduce("max", _truth(a, "np.any"), axis, keepdims, "np.any")


def _all(a, axis=None, out=None, keepdims=False, *, where=None):
    _no(out=out, where=where, fn="np.all")
    return _reduce("min", _truth(a, "np.all"), axis, keepdims, "np.all")


def _count_nonzero(a, axis=None, *, keepdims=False):
    return _reduce("sum", _truth(a, "np.count_nonzero"), axis, keepdims, "np.count_nonzero", np.intp)


def _count(x, axes) -> int:
    return math.prod(x.shape[a] for a in axes)


def _mean_dtype(x, dtype):
    if dtype is not None:
        return np.dtype(dtype)
    return x.dtype if x.dtype.kind in "fc" else np.dtype(np.float64)


def _mean(a, axis=None, dtype=None, out=None, keepdims=False, where=None):
    _no(out=out, where=where, fn="np.mean")
    x = _as_tracer(a)
    axes = _norm_axes(axis, x.ndim, "np.mean")
    dt = _mean_dtype(x, dtype)
    total = _reduce("sum", x, axes, keepdims, "np.mean", dt)
    return total / np.asarray(_count(x, axes), dtype=dt)[()]


def _var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None, correction=None):
    _no(out=out, where=where, mean=mean, correction=correction, fn="np.var")
    x = _as_tracer(a)
    axes = _norm_axes(axis, x.ndim, "np.var")
    dt = _mean_dtype(x, dtype)
    n = _count(x, axes)
    # numpy: mean with keepdims, centre, square by multiplication, sum, divide by n - ddof.
    m = _reduce("sum", x, axes, True, "np.var", dt) / np.asarray(n, dtype=dt)[()]
    c = astype(x, dt) - m
    return _reduce("sum", c * c, axes, keepdims, "np.var") / np.asarray(max(n - ddof, 0), dtype=dt)[()]


def _std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None, correction=None):
    return np.sqrt(_var(a, axis, dtype, out, ddof, keepdims, where, mean, correction))


def _arg(kind):
    def f(a, axis=None, out=None, *, keepdims=False):
        _no(out=out, fn=f"np.{kind}")
        x = _as_tracer(a)
        if axis is None:
            x = reshape(x, (-1,))
            axis = 0
        ax = _norm_axis(axis, x.ndim, f"np.{kind}")
        if x.shape[ax] == 0:
            raise TraceError(f"np.{kind}: attempt to get {kind} of an empty sequence")
        r = bind(kind, x, axis=ax, index_dtype=np.dtype(np.intp))
        return _keep(x, r, (ax,), keepdims)

    return f


def _cumsum(a, axis=None, dtype=None, out=None):
    _no(out=out, fn="np.cumsum")
    x = _as_tracer(a)
    if axis is None and _explicit():
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
    return bind("cumsum", x, axis=_norm_axis(axis, x.ndim, "np.cumsum"))


def _sort(a, axis=-1, kind=None, order=None, stable=None):
    x = _as_tracer(a)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    return bind("sort", x, axis=_norm_axis(axis, x.ndim, "np.sort"))


def _no(fn: str, **given):
    bad = [k for k, v in given.items() if v is not None and v is not np._NoValue]
    if bad:
        raise TraceError(f"{fn}: argument(s) {', '.join(bad)} are not supported while tracing")


# -- shapes ---------------------------------------------------------------------------------------
def reshape(a, newshape=None, order="C", *, shape=None, copy=None, out_sharding=None):
    if order != "C":
        raise TraceError("np.reshape: only order='C' is supported")
    x = _as_tracer(a)
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
        return _apply_out(x, out_sharding, "reshape")
    return _bind_out("reshape", x, new_shape=new, out_sharding=out_sharding, api_name="reshape")


def transpose(a, axes=None):
    x = _as_tracer(a)
    perm = tuple(reversed(range(x.ndim))) if axes is None else tuple(_norm_axis(p, x.ndim, "np.transpose") for p in axes)
    if sorted(perm) != list(range(x.ndim)):
        raise TraceError(f"np.transpose: axes {axes} are not a permutation of the array's {x.ndim} dims")
    return x if perm == tuple(range(x.ndim)) else bind("transpose", x, perm=perm)


def swapaxes(a, axis1, axis2):
    x = _as_tracer(a)
    perm = list(range(x.ndim))
    i, j = _norm_axis(axis1, x.ndim, "np.swapaxes"), _norm_axis(axis2, x.ndim, "np.swapaxes")
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(x, perm)


def moveaxis(a, source, destination):
    x = _as_tracer(a)
    src = _norm_axes(source, x.ndim, "np.moveaxis")
    dst = _norm_axes(destination, x.ndim, "np.moveaxis")
    if len(src) != len(dst):
        raise TraceError("np.moveaxis: source and destination must have the same number of axes")
    order = [d for d in range(x.ndim) if d not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(x, order)


def expand_dims(a, axis):
    x = _as_tracer(a)
    nd = x.ndim + (len(axis) if isinstance(axis, (tuple, list)) else 1)
    axes = _norm_axes(axis, nd, "np.expand_dims")
    it = iter(x.shape)
    return reshape(x, tuple(1 if d in axes else next(it) for d in range(nd)))


def squeeze(a, axis=None):
    x = _as_tracer(a)
    axes = tuple(d for d, n in enumerate(x.shape) if n == 1) if axis is None else _norm_axes(axis, x.ndim, "np.squeeze")
    for d in axes:
        if x.shape[d] != 1:
            raise TraceError(f"np.squeeze: cannot select axis {d} of size {x.shape[d]} (not 1)")
    return reshape(x, tuple(n for d, n in enumerate(x.shape) if d not in axes))


def concatenate(arrays, axis=0, out=None, dtype=None, casting=None):
    _no(out=out, fn="np.concatenate")
    xs = [_as_tracer(a) for a in arrays]
    if not xs:
        raise TraceError("np.concatenate: need at least one array")
    if axis is None:
        xs, axis = [reshape(x, (-1,)) for x in xs], 0
    ax = _norm_axis(axis, xs[0].ndim, "np.concatenate")
    dt = np.dtype(dtype) if dtype is not None else np.result_type(*[x.dtype for x in xs])
    xs = [astype(x, dt) for x in xs]
    for x in xs:
        if x.ndim != xs[0].ndim or any(n != m for d, (n, m) in enumerate(zip(x.shape, xs[0].shape)) if d != ax):
            raise TraceError(f"np.concatenate: shapes {[x.shape for x in xs]} differ outside axis {ax}")
    return xs[0] if len(xs) == 1 else bind("concatenate", *xs, axis=ax)


def stack(arrays, axis=0, out=None, dtype=None, casting=None):
    xs = [_as_tracer(a) for a in arrays]
    if not xs:
        raise TraceError("np.stack: need at least one array")
    ax = _norm_axis(axis, xs[0].ndim + 1, "np.stack")
    return concatenate([expand_dims(x, ax) for x in xs], axis=ax, dtype=dtype)


def pad(array, pad_width, mode="constant", constant_values=0):
    if mode != "constant":
        raise TraceError(f"np.pad: mode={mode!r} is not supported (only 'constant')")
    x = _as_tracer(array)
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (x.ndim, 2))
    if np.ndim(constant_values) != 0:
        raise TraceError("np.pad: constant_values must be one scalar")
    value = np.asarray(constant_values).astype(x.dtype)[()]
    return bind("pad", x, padding_value=value, widths=tuple((int(lo), int(hi)) for lo, hi in widths))


def take(a, indices, axis=None, out=None, mode=None, out_sharding=None):
    _no(out=out, mode=mode, fn="np.take")
    x = _as_tracer(a)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    ax = _norm_axis(axis, x.ndim, "np.take")
    idx = indices if _is_traced(indices) else np.asarray(indices)
    if not _is_traced(idx):
        if idx.dtype.kind not in "iu":
            raise TraceError("np.take: indices must be integers")
        idx = np.where(idx < 0, idx + x.shape[ax], idx)
        if idx.size and (idx.min() < 0 or idx.max() >= x.shape[ax]):
            raise TraceError(f"np.take: index out of bounds for axis {ax} of size {x.shape[ax]}")
    return _bind_out("take", x, _as_tracer(idx), axis=ax, out_sharding=out_sharding)


def where(condition, x=None, y=None):
    if x is None or y is None:
        raise TraceError("np.where(condition) with one argument has a data-dependent shape and cannot be traced")
    dt = np.result_type(_dtype(x) if _is_traced(x) or np.ndim(x) else x, _dtype(y) if _is_traced(y) or np.ndim(y) else y)
    if _explicit():
        # jnp.where: broadcast all three to one shape *and* one sharding (consensus) first.
        condition, x, y = broadcast.broadcast_arrays_typed([condition, x, y])
    c, a, b = _broadcast_all([condition, x, y], "np.where")
    c = astype(c, np.bool_) if _is_traced(c) else bool(c)
    a = astype(a, dt) if _is_traced(a) else np.asarray(a, dtype=dt)[()]
    b = astype(b, dt) if _is_traced(b) else np.asarray(b, dtype=dt)[()]
    return bind("select", c, a, b)


def clip(a, a_min=None, a_max=None, out=None, **kw):
    _no(out=out, fn="np.clip")
    x = _as_tracer(a)
    if a_min is not None:
        x = np.maximum(x, a_min)
    if a_max is not None:
        x = np.minimum(x, a_max)
    return x


def full(shape, fill_value, dtype=None, out_sharding=None):
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    dt = np.dtype(dtype) if dtype is not None else np.asarray(fill_value).dtype
    return _bind_out("full", shape=shape, fill_value=np.asarray(fill_value, dtype=dt)[()], dtype=dt,
                     out_sharding=out_sharding)


def _like(value):
    def f(a, dtype=None, order=None, subok=None, shape=None, **kw):
        x = _as_tracer(a)
        return full(x.shape if shape is None else shape, value, dtype or x.dtype)

    return f


def _full_like(a, fill_value, dtype=None, order=None, subok=None, shape=None):
    x = _as_tracer(a)
    return full(x.shape if shape is None else shape, fill_value, dtype or x.dtype)


def _astype_fn(x, dtype, copy=True, device=None):
    return astype(x, dtype)


def _ndim(a):
    return _as_tracer(a).ndim


def _shape_fn(a):
    return _as_tracer(a).shape


# -- indexing -------------------------------------------------------------------------------------
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
    start, limit, strides, out_shape = [], [], [], []
    d = 0
    for i in expanded:
        if i is None:
            out_shape.append(1)
            continue
        n = x.shape[d]
        if isinstance(i, slice):
            lo, hi, st = i.indices(n)
            if st < 0:
                raise TraceError("negative slice steps are not supported (use np.flip-free code)")
            length = len(range(lo, hi, st))
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
    y = x
    if (tuple(start), tuple(limit), tuple(strides)) != ((0,) * x.ndim, x.shape, (1,) * x.ndim):
        y = bind("slice", x, start=tuple(start), limit=tuple(limit), strides=tuple(strides))
    return reshape(y, tuple(out_shape))


HANDLERS: dict[Callable, Callable] = {
    np.sum: _sum, np.prod: _prod, np.max: _max, np.amax: _max, np.min: _min, np.amin: _min,
    np.mean: _mean, np.var: _var, np.std: _std, np.argmax: _arg("argmax"), np.argmin: _arg("argmin"),
    np.cumsum: _cumsum, np.sort: _sort, np.reshape: reshape, np.transpose: transpose,
    np.swapaxes: swapaxes, np.moveaxis: moveaxis, np.expand_dims: expand_dims, np.squeeze: squeeze,
    np.broadcast_to: broadcast_to, np.concatenate: concatenate, np.stack: stack, np.pad: pad,
    np.take: take, np.where: where, np.dot: dot, np.tensordot: tensordot, np.einsum: einsum,
    np.clip: clip, np.zeros_like: _like(0), np.ones_like: _like(1), np.full_like: _full_like,
    np.ndim: _ndim, np.shape: _shape_fn, np.ravel: lambda a, order="C": reshape(a, (-1,)),
    np.matmul: matmul, np.any: _any, np.all: _all, np.count_nonzero: _count_nonzero,
}
if hasattr(np, "astype"):
    HANDLERS[np.astype] = _astype_fn


def array_function(func, args, kwargs):
    handler = HANDLERS.get(func)
    if handler is None:
        module = getattr(func, "__module__", "numpy") or "numpy"
        where = "np" + module[len("numpy"):] if module.startswith("numpy") else module
        raise TraceError(
            f"{where}.{getattr(func, '__name__', func)} is not supported by simshard's tracer; "
            "supported: " + ", ".join(sorted({f"np.{f.__name__}" for f in HANDLERS}))
        )
    return handler(*args, **kwargs)
