"""RaggedShard: a user-defined placement, written only against the public ``Placement`` API.

Each coordinate of the mesh axis gets a contiguous block whose length is proportional to its
``units`` (a unit of 0 leaves a device empty), e.g. to keep each quantization block or each
parameter whole on one device. Layout, shard / assemble and conversion work for it unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ShardingError
from .placements import Placement, normalize_dim


@dataclass(frozen=True)
class RaggedShard(Placement):
    dim: int
    units: tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "units", tuple(int(u) for u in self.units))
        if not self.units or any(u < 0 for u in self.units) or sum(self.units) == 0:
            raise ShardingError("invalid-placement", f"{self}: units must be non-negative and not all zero")

    def split(self, indices: np.ndarray, num: int) -> list[np.ndarray]:
        if num != len(self.units):
            raise ShardingError(
                "invalid-placement", f"{self} has {len(self.units)} units for a mesh axis of size {num}", dim=self.dim
            )
        total = sum(self.units)
        if len(indices) % total:
            raise ShardingError(
                "invalid-placement",
                f"{self}: a piece of {len(indices)} elements along dim {self.dim} is not a multiple of {total} units",
                dim=self.dim,
            )
        step = len(indices) // total
        bounds = np.cumsum((0,) + self.units) * step
        return [indices[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])]

    def join(self, pieces, axis):
        return np.concatenate(pieces, axis=axis)

    def normalized(self, ndim):
        return RaggedShard(normalize_dim(self, self.dim, ndim), self.units)

    def __str__(self) -> str:
        return f"Ragged({self.dim}, units={list(self.units)})"
