"""The helpers every numpy lowering shares: binding with an ``out_sharding``, axes and shapes
normalised as numpy does, broadcasting, NEP 50 weak types, dtype conversion, refusing arguments
a trace cannot honour. The front ends (``simshard.numpy``, ``simshard.lax``) use them too."""

from __future__ import annotations

import inspect
import operator
from typing import Any, Sequence

import numpy as np

from ..errors import TraceError
from .explicit import api as explicit_api
from .explicit import broadcast
from .explicit.mode import is_explicit
from .state import Tracer, as_tracer, bind, is_python_scalar

# numpy's "argument not given" default (``np._NoValue``), read from a public signature.
NO_VALUE = inspect.signature(np.sum).parameters["initial"].default

__all__ = [
    "apply_out", "as_tracer", "astype", "bind_out", "broadcast_all", "broadcast_to", "dtype_of", "explicit_mode",
    "is_traced", "is_weak", "keep_weak", "norm_axes", "norm_axis", "promote_weak", "reject_unsupported", "shape_of",
]


def explicit_mode() -> bool:
    """True when the current mesh has Explicit axes (explicit mode types every value)."""
    return is_explicit()


def bind_out(op: str, *inputs, out_sharding=None, api_name=None, **params):
    """``bind`` with ``out_sharding`` (explicit mode: the result's type; auto mode: a constraint)."""
    if out_sharding is None:
        return bind(op, *inputs, **params)
    return explicit_api.bind_out(op, *inputs, out_sharding=out_sharding, api_name=api_name, **params)


def apply_out(x, out_sharding, api_name: str):
    """``x`` given the ``out_sharding`` the user asked for (a no-op when None): in explicit mode
    its type, in auto mode a sharding constraint; ``api_name`` names the call in errors."""
    if out_sharding is None:
        return x
    return explicit_api.apply_out(x, out_sharding, api_name)


def is_traced(x) -> bool:
    """Whether ``x`` is a value of the trace (not a numpy or Python constant)."""
    return isinstance(x, Tracer)


def dtype_of(x):
    """The dtype of a Tracer, array or Python scalar (as numpy sees it)."""
    return x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype


def shape_of(x) -> tuple[int, ...]:
    """The shape of a Tracer, array or Python scalar."""
    return tuple(x.shape) if hasattr(x, "shape") else np.shape(x)


def norm_axis(axis: int, ndim: int, fn: str) -> int:
    """``axis`` of a rank-``ndim`` array counted from 0 (negative counts from the end); out of
    bounds is a TraceError naming ``fn``."""
    a = operator.index(axis)
    if not -ndim <= a < max(ndim, 1):
        raise TraceError(f"{fn}: axis {axis} is out of bounds for an array of rank {ndim}")
    return a % ndim if ndim else 0


def norm_axes(axis, ndim: int, fn: str) -> tuple[int, ...]:
    """``axis`` (None: all, one axis, or several) as normalised axes; repeated ones are an error."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list)):
        axes = tuple(norm_axis(a, ndim, fn) for a in axis)
    else:
        axes = (norm_axis(axis, ndim, fn),)
    if len(set(axes)) != len(axes):
        raise TraceError(f"{fn}: repeated axis in {axis}")
    return axes


def reject_unsupported(fn: str, **given):
    """A TraceError naming the numpy arguments given (not None nor numpy's unset default) that a
    trace cannot honour (``out=``, ``where=``, ...)."""
    bad = [k for k, v in given.items() if v is not None and v is not NO_VALUE]
    if bad:
        raise TraceError(f"{fn}: argument(s) {', '.join(bad)} are not supported while tracing")


def broadcast_to(x, shape, out_sharding=None):
    """numpy broadcasting of ``x`` to ``shape`` as one broadcast_in_dim (no-op when equal).

    ``out_sharding`` (explicit mode, as ``jnp.broadcast_to``): the result's sharding; each operand
    dim must be unsharded or already sharded that way."""
    x = as_tracer(x)
    shape = tuple(int(s) for s in shape)
    if out_sharding is not None:
        return broadcast.broadcast_to_sharded(x, shape, out_sharding)
    return broadcast.broadcast_plain(x, shape)


def broadcast_all(args: Sequence[Any], fn: str) -> list:
    """Broadcast array operands to one shape; Python / 0-d scalars stay scalars (literals)."""
    shapes = [shape_of(a) for a in args]
    try:
        out = np.broadcast_shapes(*shapes)
    except ValueError:
        raise TraceError(f"{fn}: operands of shapes {shapes} do not broadcast together") from None
    res = []
    for a, s in zip(args, shapes):
        if s == () and not is_traced(a):
            res.append(a)  # stays a literal scalar
        elif s == out:
            res.append(a if is_traced(a) else as_tracer(a))
        else:
            res.append(broadcast_to(a, out))
    return res


_WEAK_VALUE = {"b": False, "i": 0, "u": 0, "f": 0.0, "c": 0j}  # a Python scalar of each kind


def is_weak(x) -> bool:
    """A Python scalar, or a Tracer of one (a scalar argument of the traced function)."""
    return (isinstance(x, Tracer) and x.weak) or is_python_scalar(x)


def promote_weak(args: Sequence[Any]) -> list:
    """numpy's NEP 50 for weakly typed Tracers: where one meets a strongly typed operand, it takes
    the dtype a Python scalar of its kind would (``f32 * 3.0`` is f32, ``i32 * 3.0`` is f64)."""
    if not any(isinstance(a, Tracer) and a.weak for a in args):
        return list(args)
    strong = [dtype_of(a) for a in args if not is_weak(a)]
    if not strong:
        return list(args)
    weak = [_WEAK_VALUE[dtype_of(a).kind] if isinstance(a, Tracer) else a for a in args if is_weak(a)]
    target = np.result_type(*strong, *weak)
    return [astype(a, target) if isinstance(a, Tracer) and a.weak else a for a in args]


def keep_weak(out, operands: Sequence[Any]):
    """An op on weak operands only (no array) gives a weak result, as in numpy and JAX."""
    traced = [a for a in operands if isinstance(a, Tracer)]
    if traced and all(is_weak(a) for a in operands) and isinstance(out, Tracer):
        out.weak = True
    return out


def astype(x, dtype):
    """``x`` converted to ``dtype`` (no op when it has it already)."""
    dtype = np.dtype(dtype)
    x = as_tracer(x)
    return x if x.dtype == dtype else bind("convert", x, dtype=dtype)
