"""Ops along one axis that keep the shape: ``cumsum`` and ``sort``.

Every element of the result depends on the whole axis, so the axis is a need-replication factor;
the other dims are pass-through (shardy.md a.15):

    sort 4x32x8, axis=0:  ([a, b, c])->([a, b, c]) {a=4, b=32, c=8} need_replication={a}
"""

from __future__ import annotations

import numpy as np

from ..ir.program import Aval
from . import preconditions
from .builder import RuleBuilder
from .cotangents import call
from .factors import NEED_REPLICATION, PASS_THROUGH
from .registry import define_vjp, register_op


def along_axis_rule(in_avals, out_avals, *, axis, **_):
    (x,) = in_avals
    b = RuleBuilder([x.shape], [out_avals[0].shape])
    return b.add_pointwise(x.shape, lambda d: NEED_REPLICATION if d == axis else PASS_THROUGH).build()


def _along_axis(name: str, fn, doc: str, accumulates: bool = False):
    """``accumulates``: the kernel takes ``dtype=``, and keeps the operand's (the lowering of
    ``np.cumsum(x, dtype=...)`` converts first, as it widens small ints when none is asked for)."""

    def abstract_eval(*avals, axis, **_):
        preconditions.arity(name, avals, 1)
        (x,) = avals
        preconditions.axis(name, axis, x.ndim)
        return (Aval(x.shape, x.dtype),)

    def kernel(x, *, axis, **_):
        kw = {"dtype": x.dtype} if accumulates else {}
        return (np.asarray(fn(x, axis=axis, **kw)),)

    register_op(name, abstract_eval, kernel, along_axis_rule, doc=doc)


_along_axis("cumsum", np.cumsum, "cumulative sum along `axis`; the axis needs replication", accumulates=True)
_along_axis("sort", np.sort, "sort along `axis`; the axis needs replication")


def _cumsum_vjp(ct, x, *, out, axis, **_):
    """Each input adds to every later partial sum: the cotangent's sums from the end,
    total - cumsum + ct (exact for integer values)."""
    return (lambda: np.sum(ct, axis=axis, keepdims=True) - np.cumsum(ct, axis=axis) + ct,)


def _sort_vjp(ct, x, *, out, axis, **_):
    """Each sorted position's cotangent goes back to the element the (stable) sort put there: a
    contraction with the one-hot of the sorting permutation, exact for integer values."""
    def make():
        rank, n = np.ndim(x), x.shape[axis]
        perm = call("argsort", x, axis=axis, index_dtype=np.dtype(np.int32))
        onehot = (np.expand_dims(perm, -1) == np.arange(n)).astype(ct.dtype)  # x.shape + (n,)
        batch = tuple(d for d in range(rank) if d != axis)
        g = call("dot_general", ct, onehot, contracting=((axis,), (axis,)), batch=(batch, batch))
        # g: [the other dims, n]: n back to ``axis``
        order = batch + (axis,)
        back = tuple(order.index(d) for d in range(rank))
        return call("transpose", g, perm=back) if back != tuple(range(rank)) else g
    return (make,)


define_vjp("cumsum", _cumsum_vjp)
define_vjp("sort", _sort_vjp)
