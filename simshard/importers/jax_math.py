"""Primitives written as a few of the registry's ops: the hyperbolic and inverse trigonometric
functions, ``erfc``, and ``conv_general_dilated`` as the registry's ``conv2d`` (NCHW / OIHW
after transposes). The compositions are exact identities, computed in the operand's dtype; they
may differ from XLA's own kernels by a few ULPs, as any transcendental kernel does."""

from __future__ import annotations

import numpy as np

from ..tracing.state import as_tracer, bind
from .common import unsupported


def _c(value, x) -> np.ndarray:
    return np.asarray(value, dtype=np.dtype(x.dtype))


def _sinh(eqn, x):
    return bind("mul", _c(0.5, x), bind("sub", bind("exp", x), bind("exp", bind("neg", x))))


def _cosh(eqn, x):
    return bind("mul", _c(0.5, x), bind("add", bind("exp", x), bind("exp", bind("neg", x))))


def _atan(eqn, x):
    return bind("atan2", x, bind("broadcast_in_dim", _c(1, x), shape=tuple(x.shape), broadcast_dimensions=()))


def _cos_side(x):
    """sqrt(1 - x^2), for the arcsine and arccosine."""
    return bind("sqrt", bind("sub", _c(1, x), bind("mul", x, x)))


def _asin(eqn, x):
    return bind("atan2", x, _cos_side(x))


def _acos(eqn, x):
    return bind("atan2", _cos_side(x), x)


def _erfc(eqn, x):
    return bind("sub", _c(1, x), bind("erf", x))


def _conv(eqn, lhs, rhs):
    """A 2-D convolution without dilation or groups, any dimension order, as ``conv2d``."""
    p = eqn.params
    lhs_spec, rhs_spec, out_spec = p["dimension_numbers"]
    plain = all(int(d) == 1 for d in tuple(p["lhs_dilation"]) + tuple(p["rhs_dilation"]))
    if len(lhs_spec) != 4 or not plain or p["feature_group_count"] != 1 or p["batch_group_count"] != 1:
        raise unsupported("JAX", "conv_general_dilated", "only 2-D convolutions without dilation or feature / batch "
                          "groups have a simshard op (conv2d)", eqn.where)
    x = bind("transpose", as_tracer(lhs), perm=tuple(int(d) for d in lhs_spec))
    w = bind("transpose", as_tracer(rhs), perm=tuple(int(d) for d in rhs_spec))
    padding = tuple((int(lo), int(hi)) for lo, hi in p["padding"])
    out = bind("conv2d", x, w, stride=tuple(int(s) for s in p["window_strides"]), padding=padding)
    return bind("transpose", out, perm=tuple(int(i) for i in np.argsort(out_spec)))


MATH = {"sinh": _sinh, "cosh": _cosh, "atan": _atan, "asin": _asin, "acos": _acos, "erfc": _erfc,
        "conv_general_dilated": _conv}
