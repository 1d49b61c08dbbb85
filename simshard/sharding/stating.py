"""Stating a layout in DTensor's placements: the placement list that lays a tensor out exactly so.

The partitioner holds some values in an exact ``Layout`` it derived (a flatten's stripes carried
through the ops after it, seed 002). Where such a value is an output, a user reads its layout
better as placements (``[Replicate(), _StridedShard(0, split_factor=4)]``) than as index lists.
``placements_for`` searches the built-in placements (Replicate, Shard, StridedShard with split
factors dividing the dim, Partial on the pending axes) for a list laying out the same elements on
every device; the search is bounded (``MAX_CANDIDATES``) and gives None beyond it or when no list
states the layout.
"""

from __future__ import annotations

import itertools
import math

from ..errors import ShardingError
from .layout import layout
from .layout_model import Layout
from .placements import DTensorSpec, Partial, Placement, Replicate, Shard, StridedShard

MAX_CANDIDATES = 256  # placement lists tried at most (each one laid out): a few mesh axes over a few small dims


def axis_choices(L: Layout, axis: str) -> list[Placement]:
    """What one mesh axis may be: Partial on a pending axis, else Replicate or a cut of a dim
    (Shard, or StridedShard by a factor dividing the dim)."""
    if any(a.name == axis and a.sub is None for a in L.unreduced):
        return [Partial(L.reduce_op)]
    out: list[Placement] = [Replicate()]
    for d, n in enumerate(L.shape):
        out.append(Shard(d))
        out += [StridedShard(d, f) for f in range(2, n) if n % f == 0]
    return out


def placements_for(L: Layout) -> DTensorSpec | None:
    """The placement list laying out exactly what ``L`` does (module docstring), or None."""
    mesh = L.mesh
    if any(a.sub is not None for a in L.unreduced):
        return None
    choices = [axis_choices(L, a) for a in mesh.axis_names]
    if math.prod(len(c) for c in choices) > MAX_CANDIDATES:
        return None
    for combo in itertools.product(*choices):
        spec = DTensorSpec(mesh, tuple(combo))
        try:
            if layout(spec, L.shape).same_as(L):
                return spec
        except (ShardingError, ValueError):  # placements that do not lay out this shape
            continue
    return None


__all__ = ["MAX_CANDIDATES", "axis_choices", "placements_for"]
