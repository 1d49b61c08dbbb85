"""The FHE compiler's ArraySharding form (seed 003) and ciphertext-slot utilization.

``fhe_spec(mesh, ("y", "z", -1))`` (or the text ``"{y, z, -1}"``, or the indices ``(1, 2, -1)``)
gives, per tensor dim, the mesh axis that splits it or -1 for unsharded; axes not named
replicate the array (the seed's "implicit replicate in x").
A device is a ciphertext with a fixed number of slots; ``utilization`` says how full they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ..sharding.layout import layout
from ..sharding.layout_model import Layout
from ..sharding.mesh import Mesh
from ..sharding.dims import Sharding


def fhe_spec(mesh: Mesh, spec: str | Sequence[str | int]) -> Sharding:
    """ArraySharding ``{y, z, -1}`` (text, or a list of axis names and indices, -1 for none) as a
    closed tensor-dimension sharding (``Sharding.from_array_sharding``)."""
    return Sharding.from_array_sharding(mesh, spec)


@dataclass(frozen=True)
class Utilization:
    """Slots filled per device and overall, for a per-device capacity of ``slots``."""

    slots: int
    filled: dict[int, int]

    @property
    def available(self) -> int:
        return self.slots * len(self.filled)

    @property
    def ratio(self) -> float:
        return sum(self.filled.values()) / self.available if self.available else 0.0

    @property
    def fits(self) -> bool:
        return all(f <= self.slots for f in self.filled.values())


def utilization(spec, shape: Sequence[int], slots: int) -> Utilization:
    """How many of each ciphertext's ``slots`` the layout of ``spec`` fills."""
    lay = spec if isinstance(spec, Layout) else layout(spec, shape)
    return Utilization(int(slots), {d: math.prod(lay.local_shape(d)) for d in lay.devices})
