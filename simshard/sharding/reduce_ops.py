"""The reduce ops a pending reduction may carry, each with its identity and combine step.

Reductions always combine contributions in one canonical order (ascending mesh coordinate), so
a result is the same bits whichever backend or run produced it.

Besides the built-in ones (sum, avg, prod, max, min) a user op may be registered
(``register_reduce_op``, or given to ``Partial(reduce_op=...)``): a name, a binary ``combine``,
its ``identity`` (a scalar or a function of the dtype) and whether it is ``idempotent``; e.g. a
2-norm partial (each device holds the norm of its part, combine = sqrt(a^2 + b^2), identity 0).
Layouts, reshard plans and the local executor then use it as they use the built-in ones; ops of
a program never treat its contributions as linear, so they are reduced before any op reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np


@dataclass(frozen=True)
class ReduceOp:
    name: str
    combine: Callable[[np.ndarray, np.ndarray], np.ndarray]
    # True when a contribution may be the value itself on every device (max(v, v) == v).
    idempotent: bool
    # a user op's identity: a scalar, or a function of the dtype giving one (None: the built-in rule)
    identity_value: Any = None

    def identity(self, dtype: np.dtype):
        dtype = np.dtype(dtype)
        if self.identity_value is not None:
            v = self.identity_value(dtype) if callable(self.identity_value) else self.identity_value
            return dtype.type(v)
        if self.name in ("sum", "avg"):
            # IEEE's additive identity is -0.0: x + -0.0 is x bit for bit, while -0.0 + 0.0 is +0.0.
            if dtype.kind == "f":
                return dtype.type(-0.0)
            if dtype.kind == "c":
                return dtype.type(complex(-0.0, -0.0))
            return dtype.type(0)
        if self.name == "prod":
            return dtype.type(1)
        lo, hi = _extremes(dtype)
        if self.name not in ("max", "min"):
            raise TypeError(f"reduce op {self.name!r} has no identity: give identity_value")
        return lo if self.name == "max" else hi

    def reduce(self, parts: Sequence[np.ndarray]) -> np.ndarray:
        """Combine contributions left to right, in the order given (the canonical order)."""
        ufunc = isinstance(self.combine, np.ufunc)
        first = np.asarray(parts[0])
        if ufunc and len(parts) > 1:  # the first combine writes the accumulator: no copy of the first part
            acc, rest = np.empty(first.shape, dtype=first.dtype), parts[2:]
            self.combine(first, parts[1], out=acc)
        else:
            acc, rest = np.array(first, copy=True), parts[1:]
        for p in rest:
            if ufunc:
                self.combine(acc, p, out=acc)  # in place: the same bits, one buffer
            else:  # a user op's combine: a new array, kept in the contributions' dtype
                acc = np.asarray(self.combine(acc, p)).astype(acc.dtype, copy=False)
        if self.name == "avg":
            acc = (acc / len(parts)).astype(np.result_type(parts[0]), copy=False)
        return np.asarray(acc, dtype=np.result_type(parts[0]))


def _extremes(dtype: np.dtype):
    if dtype.kind == "f":
        return dtype.type(-np.inf), dtype.type(np.inf)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return dtype.type(info.min), dtype.type(info.max)
    if dtype.kind == "b":
        return np.False_, np.True_
    raise TypeError(f"no max/min identity for dtype {dtype}")


REDUCE_OPS: dict[str, ReduceOp] = {
    "sum": ReduceOp("sum", np.add, idempotent=False),
    "avg": ReduceOp("avg", np.add, idempotent=True),
    "prod": ReduceOp("prod", np.multiply, idempotent=False),
    "max": ReduceOp("max", np.maximum, idempotent=True),
    "min": ReduceOp("min", np.minimum, idempotent=True),
}

BUILT_IN = frozenset(REDUCE_OPS)


def register_reduce_op(op: ReduceOp) -> ReduceOp:
    """Make ``op`` known by its name to layouts, plans and executors (Partial(op.name) reads it).
    Registering the same op again is a no-op; another op under a taken name is refused."""
    from ..errors import ShardingError

    if not isinstance(op, ReduceOp):
        raise ShardingError("unknown-reduce-op", f"{op!r} is not a ReduceOp(name, combine, idempotent, identity_value)")
    if not op.name.isidentifier():
        raise ShardingError("unknown-reduce-op", f"reduce op name {op.name!r}: use a Python identifier")
    known = REDUCE_OPS.get(op.name)
    if known is not None and known != op:
        raise ShardingError("unknown-reduce-op", f"a reduce op named {op.name!r} is already registered"
                            + (" (built in)" if op.name in BUILT_IN else "") + "; give yours another name")
    if op.name not in BUILT_IN and op.identity_value is None:
        raise ShardingError("unknown-reduce-op", f"reduce op {op.name!r} needs an identity_value (the value an "
                            "empty or padded contribution holds)")
    REDUCE_OPS[op.name] = op
    return op
