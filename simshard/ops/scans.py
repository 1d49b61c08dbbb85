"""Ops along one axis that keep the shape: ``cumsum`` and ``sort``.

Every element of the result depends on the whole axis, so the axis is a need-replication factor;
the other dims are pass-through (shardy.md a.15):

    sort 4x32x8, axis=0:  ([a, b, c])->([a, b, c]) {a=4, b=32, c=8} need_replication={a}
"""

from __future__ import annotations

import numpy as np

from ..ir.program import Aval
from . import _checks
from .builder import RuleBuilder
from .factors import NEED_REPLICATION, PASS_THROUGH
from .registry import register_op


def along_axis_rule(in_avals, out_avals, *, axis, **_):
    (x,) = in_avals
    b = RuleBuilder([x.shape], [out_avals[0].shape])
    return b.add_pointwise(x.shape, lambda d: NEED_REPLICATION if d == axis else PASS_THROUGH).build()


def _along_axis(name: str, fn, doc: str):
    def abstract_eval(*avals, axis, **_):
        _checks.arity(name, avals, 1)
        (x,) = avals
        _checks.axis(name, axis, x.ndim)
        return (Aval(x.shape, fn(np.zeros((1,) * x.ndim, x.dtype), axis=axis).dtype),)

    def kernel(x, *, axis, **_):
        return (np.asarray(fn(x, axis=axis)),)

    register_op(name, abstract_eval, kernel, along_axis_rule, doc=doc)


_along_axis("cumsum", np.cumsum, "cumulative sum along `axis`; the axis needs replication")
_along_axis("sort", np.sort, "sort along `axis`; the axis needs replication")
