"""The reduce ops a pending reduction may carry, each with its identity and combine step.

Reductions always combine contributions in one canonical order (ascending mesh coordinate), so
a result is the same bits whichever backend or run produced it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np


@dataclass(frozen=True)
class ReduceOp:
    name: str
    combine: Callable[[np.ndarray, np.ndarray], np.ndarray]
    # True when a contribution may be the value itself on every device (max(v, v) == v).
    idempotent: bool

    def identity(self, dtype: np.dtype):
        dtype = np.dtype(dtype)
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
        return lo if self.name == "max" else hi

    def reduce(self, parts: Sequence[np.ndarray]) -> np.ndarray:
        """Combine contributions left to right, in the order given (the canonical order)."""
        acc = np.array(parts[0], copy=True)
        for p in parts[1:]:
            self.combine(acc, p, out=acc)  # in place: the same bits, one buffer
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
