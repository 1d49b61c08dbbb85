"""Elementwise ops: unary, binary and ``select``, all of one shape (the tracer broadcasts first).

Every dimension is one pass-through factor shared by all operands and the result; scalar
operands (rank 0) have no dims.
"""

from __future__ import annotations

import math
import string

import numpy as np

from ..ir.program import Aval
from .cotangents import differentiable, fit
from .factors import factor_rule
from .registry import define_vjp, register_op


def _letters(rank: int) -> str:
    return string.ascii_lowercase[:rank]


def elementwise_rule(in_avals, out_avals, **_):
    rank = len(out_avals[0].shape)
    spec = ",".join(_letters(a.ndim) if a.ndim else "" for a in in_avals) + "->" + _letters(rank)
    return factor_rule(spec, [a.shape for a in in_avals], [out_avals[0].shape])


def _out_shape(op: str, avals) -> tuple[int, ...]:
    shapes = {a.shape for a in avals if a.ndim}
    if len(shapes) > 1:
        raise ValueError(f"{op}: operands of shapes {sorted(shapes)} must be broadcast to one shape first")
    return shapes.pop() if shapes else ()


def _unary(name: str, fn, result_dtype=None):
    def abstract_eval(x: Aval, **_):
        if result_dtype is not None:
            dtype = np.dtype(result_dtype)
        else:
            with np.errstate(all="ignore"):  # only the dtype matters (log(0), 1/0, ...)
                dtype = fn(np.zeros((), x.dtype)).dtype
        return (Aval(x.shape, dtype),)

    def kernel(x, **_):
        return (np.asarray(fn(x)),)

    register_op(name, abstract_eval, kernel, elementwise_rule, doc=f"elementwise {name}")


def _binary(name: str, fn):
    def abstract_eval(x: Aval, y: Aval, **_):
        with np.errstate(all="ignore"):  # only the dtype matters (0/0, ...)
            dtype = fn(np.zeros((), x.dtype), np.zeros((), y.dtype)).dtype
        return (Aval(_out_shape(name, (x, y)), dtype),)

    def kernel(x, y, **_):
        return (np.asarray(fn(x, y)),)

    register_op(name, abstract_eval, kernel, elementwise_rule, doc=f"elementwise {name}")


def erf(x):
    """The error function, elementwise (numpy has none): ``math.erf`` in float64, rounded to a float
    operand's dtype (integers give float64, as numpy's float functions do)."""
    x = np.asarray(x)
    out = np.vectorize(math.erf, otypes=[np.float64])(x)
    return out.astype(x.dtype) if x.dtype.kind == "f" else out


UNARY = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh,
    "sin": np.sin, "cos": np.cos, "sign": np.sign, "floor": np.floor, "ceil": np.ceil, "square": np.square,
    "reciprocal": np.reciprocal, "logical_not": np.logical_not, "log1p": np.log1p, "expm1": np.expm1,
    "rsqrt": lambda x: np.reciprocal(np.sqrt(x)), "invert": np.invert, "erf": erf, "erf_free_gelu": None,
}
UNARY.pop("erf_free_gelu")
BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide, "pow": np.power,
    "max": np.maximum, "min": np.minimum, "eq": np.equal, "ne": np.not_equal, "lt": np.less,
    "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "and": np.logical_and,
    "or": np.logical_or, "xor": np.logical_xor, "floordiv": np.floor_divide, "rem": np.remainder,
    "atan2": np.arctan2, "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
}

for _name, _fn in UNARY.items():
    _unary(_name, _fn)
for _name, _fn in BINARY.items():
    _binary(_name, _fn)


def _select_eval(pred: Aval, x: Aval, y: Aval, **_):
    return (Aval(_out_shape("select", (pred, x, y)), np.result_type(x.dtype, y.dtype)),)


register_op(
    "select",
    _select_eval,
    lambda pred, x, y, **_: (np.asarray(np.where(pred, x, y)),),
    elementwise_rule,
    doc="where(pred, x, y)",
)


def _convert_eval(x: Aval, *, dtype, **_):
    return (Aval(x.shape, np.dtype(dtype)),)


register_op(
    "convert",
    _convert_eval,
    lambda x, *, dtype, **_: (np.asarray(x).astype(dtype),),
    elementwise_rule,
    doc="astype",
)


# -- derivatives (JAX's conventions: maximum / minimum split a tie evenly, select routes) ------
def _unary_vjp(d):
    """The rule of a unary op whose derivative is ``d(ct, x, out)``."""
    return lambda ct, x, *, out, **_: (lambda: fit(d(ct, x, out), x),)


UNARY_VJP = {
    "neg": lambda ct, x, out: -ct,
    "abs": lambda ct, x, out: ct * np.sign(x),
    "exp": lambda ct, x, out: ct * out,
    "log": lambda ct, x, out: ct / x,
    "sqrt": lambda ct, x, out: ct * (0.5 / out),
    "rsqrt": lambda ct, x, out: ct * (-0.5 * out / x),
    "tanh": lambda ct, x, out: ct * (1 - out * out),
    "sin": lambda ct, x, out: ct * np.cos(x),
    "cos": lambda ct, x, out: -ct * np.sin(x),
    "square": lambda ct, x, out: ct * (x * 2),
    "reciprocal": lambda ct, x, out: -ct * (out * out),
    "log1p": lambda ct, x, out: ct / (x + 1),
    "expm1": lambda ct, x, out: ct * (out + 1),
    "erf": lambda ct, x, out: ct * (np.exp(-(x * x)) * (2 / math.sqrt(math.pi))),
}
for _name, _d in UNARY_VJP.items():
    define_vjp(_name, _unary_vjp(_d))
for _name in ("sign", "floor", "ceil"):  # piecewise constant: no cotangent flows through
    define_vjp(_name, lambda ct, x, *, out, **_: (None,))
for _name in ("floordiv",):
    define_vjp(_name, lambda ct, x, y, *, out, **_: (None, None))


def _binary_vjp(dx, dy):
    return lambda ct, x, y, *, out, **_: (lambda: fit(dx(ct, x, y, out), x), lambda: fit(dy(ct, x, y, out), y))


def _share(first, ct, x, y):
    """maximum / minimum: the cotangent goes to the operand chosen; a tie splits it in halves."""
    return np.where(first(x, y), ct, np.where(x == y, ct * 0.5, np.zeros((), ct.dtype)))


BINARY_VJP = {
    "add": (lambda ct, x, y, out: ct, lambda ct, x, y, out: ct),
    "sub": (lambda ct, x, y, out: ct, lambda ct, x, y, out: -ct),
    "mul": (lambda ct, x, y, out: ct * y, lambda ct, x, y, out: x * ct),
    "div": (lambda ct, x, y, out: ct / y, lambda ct, x, y, out: -ct * out / y),
    "pow": (lambda ct, x, y, out: ct * (y * x ** (y - 1)), lambda ct, x, y, out: ct * (np.log(np.where(x == 0, 1, x)) * out)),
    "max": (lambda ct, x, y, out: _share(np.greater, ct, x, y), lambda ct, x, y, out: _share(np.greater, ct, y, x)),
    "min": (lambda ct, x, y, out: _share(np.less, ct, x, y), lambda ct, x, y, out: _share(np.less, ct, y, x)),
    "atan2": (lambda ct, x, y, out: ct * y / (x * x + y * y), lambda ct, x, y, out: -ct * x / (x * x + y * y)),
    "rem": (lambda ct, x, y, out: ct, lambda ct, x, y, out: -ct * np.floor(x / y)),
}
for _name, (_dx, _dy) in BINARY_VJP.items():
    define_vjp(_name, _binary_vjp(_dx, _dy))


def _select_vjp(ct, pred, x, y, *, out, **_):
    zero = np.zeros((), ct.dtype)
    return (None, lambda: fit(np.where(pred, ct, zero), x), lambda: fit(np.where(pred, zero, ct), y))


define_vjp("select", _select_vjp)
define_vjp("convert", lambda ct, x, *, out, dtype, **_: (lambda: fit(ct, x),) if differentiable(x.dtype) else (None,))
