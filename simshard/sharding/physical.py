"""The arithmetic of ``make_mesh`` (scalax's way of building a mesh): how many devices there
are, the one axis size given as -1 inferred from them, and the device order that builds each
logical axis from whole dimensions of a physical device grid.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple, Sequence

import numpy as np

from ..errors import ShardingError


class DeviceCount(NamedTuple):
    """How many devices a mesh is built from (None: not said), their ids when listed, and where
    the count came from (for messages)."""

    count: int | None
    ids: list[int] | None
    counted_from: str


def device_count(devices, physical_shape: Sequence[int] | None) -> DeviceCount:
    """The devices ``devices`` names (a count, a list of device ids, or None: then the product
    of ``physical_shape``, when given)."""
    if isinstance(devices, int) or devices is None:
        count, ids = devices, None
    else:
        ids = [int(d) for d in devices]
        count = len(ids)
    if count is None and physical_shape is not None:
        return DeviceCount(math.prod(physical_shape), ids, f"are in physical shape {tuple(physical_shape)}")
    return DeviceCount(count, ids, "were given")


def infer_dims(dims: list[int], count: int | None, counted_from: str) -> list[int]:
    """``dims`` with its one -1 (if any) inferred from the device count; the mesh must use
    exactly ``count`` devices when a count is known."""
    dims = list(dims)
    unknown = [i for i, d in enumerate(dims) if d == -1]
    if len(unknown) > 1:
        raise ShardingError("invalid-mesh", f"at most one axis size may be -1, got {tuple(dims)}")
    if any(d < 1 and d != -1 for d in dims):
        raise ShardingError("invalid-mesh", f"axis sizes must be positive or -1, got {tuple(dims)}")
    known = math.prod(d for d in dims if d != -1)
    if unknown:
        if count is None:
            raise ShardingError("invalid-mesh", "an axis size of -1 needs devices= (a count or a list)")
        if count % known:
            raise ShardingError(
                "invalid-mesh", f"{count} devices cannot be split into {tuple(dims)}: {count} % {known} != 0"
            )
        dims[unknown[0]] = count // known
    total = math.prod(dims)
    if count is not None and count != total:
        raise ShardingError("invalid-mesh", f"mesh {tuple(dims)} has {total} devices but {count} {counted_from}")
    return dims


def device_order(dims: list[int], phys: list[int], mesh_axis_splitting: bool) -> list[int]:
    """The positions in the physical grid (row-major) of the logical mesh's devices, each
    logical axis built from whole physical dimensions; when that is impossible, the physical
    order itself if ``mesh_axis_splitting`` allows splitting physical dimensions, else an error."""
    total = math.prod(dims)
    if math.prod(phys) != total:
        raise ShardingError(
            "invalid-mesh", f"physical shape {tuple(phys)} has {math.prod(phys)} devices, mesh needs {total}"
        )
    order = assign_physical(dims, phys)
    if order is not None:
        return transpose_ids(phys, order)
    if not mesh_axis_splitting:
        raise ShardingError(
            "mesh-axis-splitting",
            f"logical mesh {tuple(dims)} cannot be built from whole dimensions of the physical "
            f"mesh {tuple(phys)}; pass mesh_axis_splitting=True to split physical dimensions "
            "(slower collectives on real hardware)",
        )
    return list(range(total))  # splitting allowed: keep the physical row-major order


def assign_physical(dims: list[int], phys: list[int]) -> list[list[int]] | None:
    """Give each logical axis a set of whole physical dims whose sizes multiply to it, if possible."""
    free = list(range(len(phys)))

    def solve(i: int, free: list[int]) -> list[list[int]] | None:
        if i == len(dims):
            return [] if all(phys[f] == 1 for f in free) else None
        for r in range(len(free) + 1):
            for combo in itertools.combinations(free, r):
                if math.prod(phys[c] for c in combo) == dims[i]:
                    rest = solve(i + 1, [f for f in free if f not in combo])
                    if rest is not None:
                        return [list(combo)] + rest
        return None

    return solve(0, free)


def transpose_ids(phys: list[int], order: list[list[int]]) -> list[int]:
    """Device ids of the physical grid read in the order the logical axes use its dims."""
    grid = np.arange(math.prod(phys)).reshape(phys)
    used = [d for group in order for d in group]
    rest = [d for d in range(len(phys)) if d not in used]  # size-1 physical dims
    return [int(x) for x in grid.transpose(used + rest).reshape(-1)]
