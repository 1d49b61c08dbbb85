"""Sharding annotations as ops: ``sharding_constraint`` and ``reshard``.

Both are the identity on data, with the elementwise rule (Shardy lists ``ShardingConstraintOp``
among its pointwise ops). ``sharding`` is the target the value must have there: propagation
reads it (a constraint seeds propagation; a reshard forces a layout change), the kernel ignores it.
"""

from __future__ import annotations

import numpy as np

from ..ir.program import Aval
from . import preconditions
from .elementwise import elementwise_rule
from .cotangents import call
from .registry import define_vjp, register_op


def _annotation(name: str, doc: str):
    def abstract_eval(*avals, sharding, **_):
        preconditions.arity(name, avals, 1)
        (x,) = avals
        rank = getattr(sharding, "rank", None)
        if rank is not None and rank != x.ndim:
            raise ValueError(f"{name}: sharding {sharding} has {rank} dims but the value {x} has rank {x.ndim}")
        return (Aval(x.shape, x.dtype),)

    def kernel(x, **_):
        return (np.array(x, copy=True),)

    register_op(name, abstract_eval, kernel, elementwise_rule, doc=doc)


_annotation("sharding_constraint", "identity; the value must be sharded as `sharding` here (seeds propagation)")
_annotation("reshard", "identity; moves the value to `sharding` (explicit mode's reshard)")


# explicit mode: a cotangent has its primal's type, sharding included (as in JAX), so a reshard
# moves it back too
define_vjp("reshard", lambda ct, x, *, out, **params: (lambda: call("reshard", ct, **params),))
# A constraint says where the primal is used (FSDP: a weight gathered for its matmul); its
# cotangent is left to propagation, so a gradient sum over the batch reaches the parameter's own
# layout by one reduce-scatter. (JAX constrains the cotangent alike, and XLA then all-reduces the
# whole gradient and slices it.)
define_vjp("sharding_constraint", lambda ct, x, *, out, **params: (lambda: ct,))
