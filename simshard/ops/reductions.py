"""Reductions over axes (sum, max, min, prod) and argmax / argmin along one axis.

``reduce_*``: kept dims are pass-through factors shared with the result, reduced dims are
reduction factors with the matching ``reduce_op`` (shardy.md a.5, without the init operand):

    reduce_sum 2x64x13, axes=(1,):  ([a, b, c])->([a, c]) {a=2, b=64, c=13} reduction={b}

A device holding a block of a reduced dim computes a partial result; partial results combine
with the reduce op (all-reduce, or kept pending as ``unreduced``). ``argmax`` / ``argmin``
return positions, which do not combine that way: their axis is a need-replication factor. A
reduction keeps its operand's dtype (``np.sum(x, dtype=...)`` converts before it).
"""

from __future__ import annotations

import numpy as np

from ..ir.program import Aval
from . import preconditions
from .builder import RuleBuilder
from .factors import NEED_REPLICATION, REDUCTION
from .cotangents import expand
from .registry import define_vjp, register_op

REDUCERS = {"reduce_sum": (np.sum, "sum"), "reduce_max": (np.max, "max"), "reduce_min": (np.min, "min"), "reduce_prod": (np.prod, "prod")}


def reduce_rule(in_avals, out_avals, *, axes, reduce_op: str = "sum", **_):
    (x,) = in_avals
    b = RuleBuilder([x.shape], [out_avals[0].shape])
    out_dim = 0
    for d, n in enumerate(x.shape):
        if d in axes:
            b.add([d], [None], n, REDUCTION)
        else:
            b.add([d], [out_dim], n)
            out_dim += 1
    return b.build(reduce_op)


def _reducer(name: str, fn, reduce_op: str):
    def abstract_eval(*avals, axes, **_):
        preconditions.arity(name, avals, 1)
        (x,) = avals
        axes = preconditions.axes(name, axes, x.ndim)
        if reduce_op in ("max", "min") and any(x.shape[a] == 0 for a in axes):
            raise ValueError(f"{name}: cannot reduce a zero-size dimension (axes {axes} of shape {x.shape}): {reduce_op} has no identity there")
        shape = tuple(n for d, n in enumerate(x.shape) if d not in axes)
        return (Aval(shape, x.dtype),)

    accumulate = {"dtype": None} if reduce_op in ("sum", "prod") else {}

    def kernel(x, *, axes, **_):
        # in the operand's dtype, where numpy would widen small ints: the lowering of np.sum /
        # np.prod converts first (to the dtype= asked for, or numpy's default accumulator)
        kw = {k: x.dtype for k in accumulate}
        return (np.asarray(fn(x, axis=tuple(axes), **kw)),)

    def rule(in_avals, out_avals, *, axes, **_):
        return reduce_rule(in_avals, out_avals, axes=tuple(axes), reduce_op=reduce_op)

    # numpy adds a contiguous run pairwise and a strided one in sequence: a block whose other
    # dims are cut to size 1 turns a column sum from the one order into the other
    register_op(name, abstract_eval, kernel, rule, doc=f"{fn.__name__} over `axes`; reduced dims are `{reduce_op}` reduction factors",
                shape_dependent_sums=reduce_op in ("sum", "prod"))


for _name, (_fn, _op) in REDUCERS.items():
    _reducer(_name, _fn, _op)


def _arg(name: str, fn):
    def abstract_eval(*avals, axis, index_dtype, **_):
        preconditions.arity(name, avals, 1)
        (x,) = avals
        axis = preconditions.axis(name, axis, x.ndim)
        if x.shape[axis] == 0:
            raise ValueError(f"{name}: axis {axis} of shape {x.shape} is empty")
        try:
            dt = np.dtype(index_dtype)
        except TypeError:
            raise ValueError(f"{name}: index_dtype {index_dtype!r} is not a dtype") from None
        if dt.kind not in "iu":
            raise ValueError(f"{name}: index_dtype must be an integer dtype, got {dt}")
        return (Aval(x.shape[:axis] + x.shape[axis + 1 :], dt),)

    def kernel(x, *, axis, index_dtype, **_):
        return (np.asarray(fn(x, axis=axis)).astype(index_dtype),)

    def rule(in_avals, out_avals, *, axis, **_):
        (x,) = in_avals
        b = RuleBuilder([x.shape], [out_avals[0].shape])
        for d, n in enumerate(x.shape):
            if d == axis:
                b.add([d], [None], n, NEED_REPLICATION)
            else:
                b.add([d], [d if d < axis else d - 1], n)
        return b.build()

    register_op(name, abstract_eval, kernel, rule, doc=f"{fn.__name__} along `axis`; the axis needs replication")


_arg("argmax", np.argmax)
_arg("argmin", np.argmin)


# -- derivatives ---------------------------------------------------------------------------------
def _sum_vjp(ct, x, *, out, axes, **_):
    return (lambda: expand(ct, x.shape, axes),)


def _chooser_vjp(ct, x, *, out, axes, **_):
    """max / min: the cotangent is shared evenly by the elements equal to the result (JAX)."""
    def make():
        hit = (x == expand(out, x.shape, axes)).astype(ct.dtype)
        count = expand(np.sum(hit, axis=axes), x.shape, axes)
        return expand(ct, x.shape, axes) * hit / count
    return (make,)


def _prod_vjp(ct, x, *, out, axes, **_):
    """The product of the other elements of each one's reduction group, exact with zeros (JAX):
    with no zero in the group, prod / x; with one, the product of the non-zeros at the zero and 0
    elsewhere; with two or more, 0 everywhere."""
    def make():
        zero = x == 0
        nonzero_prod = expand(np.prod(np.where(zero, np.ones((), x.dtype), x), axis=axes), x.shape, axes)
        zeros_in_group = expand(np.sum(zero.astype(np.int32), axis=axes), x.shape, axes)
        none = np.where(zero, np.ones((), x.dtype), x)  # no division by zero where x is one
        others = np.where(zeros_in_group == 0, nonzero_prod / none,
                          np.where(zero & (zeros_in_group == 1), nonzero_prod, np.zeros((), x.dtype)))
        return expand(ct, x.shape, axes) * others
    return (make,)


define_vjp("reduce_sum", _sum_vjp)
define_vjp("reduce_prod", _prod_vjp)
define_vjp("reduce_max", _chooser_vjp)
define_vjp("reduce_min", _chooser_vjp)
