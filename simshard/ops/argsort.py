"""``argsort`` along one axis (stable, as ``jnp.argsort``): the axis needs replication, like sort."""

from __future__ import annotations

import numpy as np

from ..ir.program import Aval
from . import preconditions
from .registry import OPS, register_op
from .scans import along_axis_rule


def _eval(*avals, axis, index_dtype, **_):
    preconditions.arity("argsort", avals, 1)
    (x,) = avals
    preconditions.axis("argsort", axis, x.ndim)
    dt = np.dtype(index_dtype)
    if dt.kind not in "iu":
        raise ValueError(f"argsort: index_dtype must be an integer dtype, got {dt}")
    return (Aval(x.shape, dt),)


def _kernel(x, *, axis, index_dtype, **_):
    return (np.argsort(x, axis=axis, kind="stable").astype(index_dtype),)


register_op("argsort", _eval, _kernel, along_axis_rule, doc="stable argsort along `axis`; the axis needs replication")

