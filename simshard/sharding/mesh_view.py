"""torch's DeviceMesh spellings of a mesh: ``mesh.size()`` and the sub-mesh ``mesh["tp"]``.

``Mesh.size`` is a ``MeshSize``: the device count as an int (every use of it as a number stays),
callable as torch's ``mesh.size()`` / ``mesh.size(d)``. ``mesh["tp"]`` is a ``MeshView``: the
mesh seen over some of its axes, as one controller sees every rank's sub-mesh at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from .mesh import Mesh


class MeshSize(int):
    """A mesh's device count, callable as torch's ``mesh.size()`` (the count) and
    ``mesh.size(d)`` (the size of mesh dim ``d``, an index or a name)."""

    def __new__(cls, sizes: Sequence[int]):
        made = int.__new__(cls, math.prod(sizes))
        made.sizes = tuple(sizes)
        return made

    def __call__(self, mesh_dim: int | None = None) -> int:
        return int(self) if mesh_dim is None else int(self.sizes[mesh_dim])

    def __reduce__(self):
        return (int, (int(self),))  # pickled as the plain int it is


@dataclass(frozen=True)
class MeshView:
    """torch's sub-mesh ``mesh["tp"]`` seen from one controller: the whole mesh's devices, with
    placement lists naming ``dims`` only (the other axes replicate: every group of the other axes
    holds the same, as every rank's ``mesh["tp"]`` does in an SPMD program)."""

    parent: Mesh
    dims: tuple[str, ...]

    @property
    def mesh_dim_names(self) -> tuple[str, ...]:
        return self.dims

    @property
    def ndim(self) -> int:
        return len(self.dims)

    @property
    def shape(self) -> dict[str, int]:
        return {d: self.parent.shape[d] for d in self.dims}

    @property
    def positions(self) -> tuple[int, ...]:
        """Each of ``dims``' index among the parent's axes."""
        return tuple(self.parent.axis_names.index(d) for d in self.dims)

    def size(self, mesh_dim: int | None = None) -> int:
        sizes = tuple(self.parent.shape[d] for d in self.dims)
        return math.prod(sizes) if mesh_dim is None else sizes[mesh_dim]

    def __repr__(self) -> str:
        return f"MeshView(@{self.parent.name}[{', '.join(map(repr, self.dims))}], {self.shape})"


__all__ = ["MeshSize", "MeshView"]
