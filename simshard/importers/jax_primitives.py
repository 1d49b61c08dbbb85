"""The table from ``jax.lax`` primitives to simshard's ops of the same meaning: the one place that
says how a jaxpr's equation becomes ops of the registry (``simshard/ops``).

Each entry is ``rule(eqn, *operands) -> result or list of results``: ``eqn`` (``jaxpr.JaxEqn``)
carries the primitive's params and JAX's result types; the operands are Tracers of the current
trace or numpy arrays (literals, constants). A primitive missing here is refused by the
interpreter, naming it and the user's line. Elementwise, shape, reduction and indexing
primitives are here; control flow, calls, shardings and collectives in ``jax_structured``.
"""

from __future__ import annotations

import numpy as np

from ..tracing.lowering_common import astype, broadcast_to
from ..tracing.lowering_contractions import dot_general as lower_dot_general
from ..tracing.state import as_tracer, bind
from .common import unsupported
from .jax_gather import gather, scatter_add, take_along, take_reversed
from .jax_math import MATH
from .jax_structured import STRUCTURED

SAME_UNARY = ("neg", "abs", "exp", "log", "sqrt", "tanh", "sin", "cos", "sign", "floor", "ceil", "square", "log1p",
              "expm1", "rsqrt", "erf", "stop_gradient")
SAME_BINARY = ("add", "sub", "mul", "max", "min", "eq", "ne", "lt", "le", "gt", "ge", "atan2", "pow")


def _dtype(x) -> np.dtype:
    return np.dtype(x.dtype)


def _scalar(value, like) -> np.ndarray:
    return np.asarray(value, dtype=_dtype(like))


def _fit(eqn, *xs) -> list:
    """Operands of an elementwise primitive at its result shape: JAX's binary primitives take
    size-1 dims against larger ones (and scalars); simshard's elementwise ops take one shape."""
    shape = tuple(eqn.out_types[0].shape)
    return [x if np.ndim(x) == 0 or tuple(np.shape(x)) == shape else broadcast_to(as_tracer(x), shape) for x in xs]


def _same_unary(name):
    return lambda eqn, x: bind(name, as_tracer(x))


def _same_binary(name):
    return lambda eqn, x, y: bind(name, *_fit(eqn, x, y))


def _logical(logical: str, bitwise: str):
    def rule(eqn, x, y):
        x, y = _fit(eqn, x, y)
        return bind(logical if _dtype(x) == np.bool_ else bitwise, x, y)

    return rule


def _not(eqn, x):
    return bind("logical_not" if _dtype(x) == np.bool_ else "invert", as_tracer(x))


def _div(eqn, x, y):
    """Integers divide rounding toward zero (C, XLA), not down (numpy's floor division)."""
    x, y = _fit(eqn, x, y)
    if _dtype(x).kind not in "iu":
        return bind("div", x, y)
    q = bind("floordiv", x, y)
    inexact = bind("ne", bind("mul", q, y), x)
    signs_differ = bind("ne", bind("lt", x, _scalar(0, x)), bind("lt", y, _scalar(0, y)))
    return bind("select", bind("and", inexact, signs_differ), bind("add", q, _scalar(1, x)), q)


def _rem(eqn, x, y):
    """The remainder with the dividend's sign (C's fmod, XLA's rem): numpy's has the divisor's."""
    x, y = _fit(eqn, x, y)
    r = bind("rem", x, y)
    zero = _scalar(0, r)
    fix = bind("and", bind("ne", r, zero), bind("ne", bind("lt", r, zero), bind("lt", x, _scalar(0, x))))
    out = bind("select", fix, bind("sub", r, y), r)
    if _dtype(out).kind != "f":
        return out
    return bind("select", bind("eq", out, zero), bind("mul", x, zero), out)  # a zero keeps the dividend's sign


def _integer_pow(eqn, x):
    """x**y by repeated squaring, as XLA lowers it (so the float roundings are the same)."""
    y, acc, base = int(eqn.params["y"]), None, as_tracer(x)
    k = abs(y)
    while k:
        if k & 1:
            acc = base if acc is None else bind("mul", acc, base)
        k >>= 1
        if k:
            base = bind("mul", base, base)
    if acc is None:
        return bind("broadcast_in_dim", _scalar(1, x), shape=tuple(x.shape), broadcast_dimensions=())
    return bind("div", _scalar(1, x), acc) if y < 0 else acc


def _logistic(eqn, x):
    one = _scalar(1, x)
    return bind("div", one, bind("add", one, bind("exp", bind("neg", x))))


def _is_finite(eqn, x):
    return bind("lt", bind("abs", x), _scalar(np.inf, x))


def _clamp(eqn, lo, x, hi):
    lo, x, hi = _fit(eqn, lo, x, hi)
    return bind("min", bind("max", x, lo), hi)


def _select_n(eqn, which, *cases):
    """``cases[which]``: a bool picks case 1 where true; an integer counts through the cases."""
    which, *cases = _fit(eqn, which, *cases)
    if len(cases) == 1:
        return cases[0]
    if _dtype(which) == np.bool_:
        return bind("select", which, cases[1], cases[0])
    out = cases[0]
    for k, case in enumerate(cases[1:], start=1):
        out = bind("select", bind("eq", which, _scalar(k, which)), case, out)
    return out


def _convert(eqn, x):
    dtype = np.dtype(eqn.params["new_dtype"])
    return as_tracer(x) if _dtype(x) == dtype else astype(as_tracer(x), dtype)


def _reduce_precision(eqn, x):
    info = np.finfo(_dtype(x))
    if (eqn.params["exponent_bits"], eqn.params["mantissa_bits"]) != (info.nexp, info.nmant):
        raise unsupported("JAX", "reduce_precision", f"rounding {_dtype(x)} to fewer bits has no simshard op", eqn.where)
    return x


def _dot_general(eqn, lhs, rhs):
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    pref = eqn.params.get("preferred_element_type")
    out = lower_dot_general(lhs, rhs, (tuple(lc), tuple(rc)), (tuple(lb), tuple(rb)), pref)
    return out if _dtype(out) == eqn.out_types[0].dtype else astype(out, eqn.out_types[0].dtype)


def _reduce(op):
    def rule(eqn, x):
        axes = tuple(int(a) for a in eqn.params["axes"])
        return bind(op, x, axes=axes) if axes else x

    return rule


def _arg(op):
    def rule(eqn, x):
        (axis,) = eqn.params["axes"]
        return bind(op, x, axis=int(axis), index_dtype=np.dtype(eqn.params["index_dtype"]))

    return rule


def _cumsum(eqn, x):
    axis = int(eqn.params["axis"])
    if not eqn.params.get("reverse"):
        return bind("cumsum", x, axis=axis)
    return take_reversed(bind("cumsum", take_reversed(x, (axis,)), axis=axis), (axis,))


def _reshape(eqn, x):
    if eqn.params.get("dimensions") is not None:
        x = bind("transpose", x, perm=tuple(eqn.params["dimensions"]))
    return bind("reshape", x, new_shape=tuple(int(n) for n in eqn.params["new_sizes"]))


def _broadcast_in_dim(eqn, x):
    shape, dims = tuple(int(s) for s in eqn.params["shape"]), tuple(int(d) for d in eqn.params["broadcast_dimensions"])
    if tuple(np.shape(x)) == shape and dims == tuple(range(len(shape))):
        return x
    return bind("broadcast_in_dim", as_tracer(x), shape=shape, broadcast_dimensions=dims)


def _slice(eqn, x):
    p = eqn.params
    strides = tuple(p["strides"]) if p.get("strides") is not None else (1,) * len(p["start_indices"])
    return bind("slice", x, start=tuple(p["start_indices"]), limit=tuple(p["limit_indices"]), strides=strides)


def _pad(eqn, x, value):
    """Edge padding (interior padding has no op); negative widths cut, as in XLA."""
    config = [tuple(int(v) for v in c) for c in eqn.params["padding_config"]]
    if any(interior for _, _, interior in config):
        raise unsupported("JAX", "pad", "interior padding has no simshard op", eqn.where)
    widths = tuple((max(lo, 0), max(hi, 0)) for lo, hi, _ in config)
    out = _pad_with(as_tracer(x), value, widths) if any(map(any, widths)) else x
    if any(lo < 0 or hi < 0 for lo, hi, _ in config):
        shape = out.shape
        start = tuple(-min(lo, 0) for lo, _, _ in config)
        limit = tuple(n + min(hi, 0) for n, (_, hi, _) in zip(shape, config))
        out = bind("slice", out, start=start, limit=limit, strides=(1,) * len(shape))
    return out


def _pad_with(x, value, widths):
    """``x`` padded with ``value``: a constant directly; a value computed at run time by a select
    between ``x`` padded with zeros and the value, on a padded mask (exact: nothing is computed)."""
    if isinstance(value, np.ndarray):
        return bind("pad", x, padding_value=value.item(), widths=widths)
    padded = bind("pad", x, padding_value=0, widths=widths)
    inside = bind("pad", bind("full", shape=tuple(x.shape), fill_value=True, dtype=np.dtype(bool)),
                  padding_value=False, widths=widths)
    return bind("select", inside, padded, broadcast_to(as_tracer(value), tuple(padded.shape)))


def _squeeze(eqn, x):
    return bind("reshape", x, new_shape=eqn.out_types[0].shape)


def _concatenate(eqn, *xs):
    return bind("concatenate", *xs, axis=int(eqn.params["dimension"]))


def _split(eqn, x):
    axis, start, outs = int(eqn.params["axis"]), 0, []
    for size in eqn.params["sizes"]:
        lo = [0] * x.ndim
        hi = list(x.shape)
        lo[axis], hi[axis] = start, start + int(size)
        outs.append(bind("slice", x, start=tuple(lo), limit=tuple(hi), strides=(1,) * x.ndim))
        start += int(size)
    return outs


def _iota(eqn, *_):
    p = eqn.params
    return bind("iota", shape=tuple(p["shape"]), dimension=int(p["dimension"]), dtype=np.dtype(p["dtype"]))


def _sort(eqn, *xs):
    """One operand: the sort op; more, sorted by the first (``num_keys == 1``): its stable argsort
    orders every operand."""
    axis = int(eqn.params["dimension"])
    if len(xs) == 1:
        return bind("sort", xs[0], axis=axis)
    if eqn.params.get("num_keys", 1) != 1:
        raise unsupported("JAX", "sort", "sorting by more than one key has no simshard op", eqn.where)
    perm = bind("argsort", xs[0], axis=axis, index_dtype=np.dtype(np.int32))
    return [bind("sort", xs[0], axis=axis)] + [take_along(x, perm, axis) for x in xs[1:]]


def _identity(eqn, *xs):
    return list(xs)


def _rev(eqn, x):
    return take_reversed(x, tuple(int(d) for d in eqn.params["dimensions"]))


def _dynamic_slice(eqn, x, *starts):
    return bind("dynamic_slice", x, *starts, slice_sizes=tuple(int(s) for s in eqn.params["slice_sizes"]))


def _dynamic_update_slice(eqn, x, update, *starts):
    return bind("dynamic_update_slice", x, update, *starts)


def _exp2(eqn, x):
    return bind("pow", _scalar(2, x), x)


def _tan(eqn, x):
    return bind("div", bind("sin", x), bind("cos", x))


PRIMITIVES = {
    **{n: _same_unary(n) for n in SAME_UNARY},
    **{n: _same_binary(n) for n in SAME_BINARY},
    "add_any": _same_binary("add"), "div": _div, "rem": _rem, "not": _not,
    "and": _logical("and", "bitwise_and"), "or": _logical("or", "bitwise_or"), "xor": _logical("xor", "bitwise_xor"),
    "integer_pow": _integer_pow, "logistic": _logistic, "is_finite": _is_finite, "clamp": _clamp, "exp2": _exp2,
    "tan": _tan, "select_n": _select_n, "convert_element_type": _convert, "reduce_precision": _reduce_precision,
    "dot_general": _dot_general, "reduce_sum": _reduce("reduce_sum"), "reduce_max": _reduce("reduce_max"),
    "reduce_min": _reduce("reduce_min"), "reduce_prod": _reduce("reduce_prod"), "reduce_and": _reduce("reduce_min"),
    "reduce_or": _reduce("reduce_max"), "argmax": _arg("argmax"), "argmin": _arg("argmin"), "cumsum": _cumsum,
    "reshape": _reshape, "broadcast_in_dim": _broadcast_in_dim, "squeeze": _squeeze, "transpose":
    lambda eqn, x: bind("transpose", x, perm=tuple(eqn.params["permutation"])), "concatenate": _concatenate,
    "split": _split, "slice": _slice, "pad": _pad, "iota": _iota, "rev": _rev, "sort": _sort, "gather": gather,
    "dynamic_slice": _dynamic_slice, "dynamic_update_slice": _dynamic_update_slice,
    "copy": _identity, "copy_p": _identity, "optimization_barrier": _identity, "pvary": _identity,
    "name": _identity, "scatter-add": scatter_add,
    **MATH, **STRUCTURED,
}
