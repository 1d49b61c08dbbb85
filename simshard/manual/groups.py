"""The device groups a collective runs over: the devices that differ only along the named mesh
axes.
"""

from __future__ import annotations

import math

from ..errors import ShardingError
from ..sharding.mesh import Mesh


def axes_of(axis_name) -> tuple[str, ...]:
    """The mesh axes a collective's ``axis_name`` names (one name or several), as a tuple."""
    return (axis_name,) if isinstance(axis_name, str) else tuple(axis_name)


def groups(mesh: Mesh, axis_name) -> list[tuple[int, ...]]:
    """Devices that differ only along ``axis_name`` (one name or several), each group ordered by
    its coordinate along those axes (row-major in the order given)."""
    names = axes_of(axis_name)
    for n in names:
        if n not in mesh.axis_names:
            raise ShardingError("unknown-axis", f'collective over axis "{n}", which mesh @{mesh.name} does not have', axis=n)
    idx = [mesh.axis_names.index(n) for n in names]
    out: dict[tuple, list[tuple[tuple, int]]] = {}
    for d in mesh.device_ids:
        c = mesh.coords(d)
        key = tuple(v for i, v in enumerate(c) if i not in idx)
        out.setdefault(key, []).append((tuple(c[i] for i in idx), d))
    return [tuple(d for _, d in sorted(g)) for g in out.values()]


def group_size(mesh: Mesh, axis_name) -> int:
    """How many devices a group over ``axis_name`` holds."""
    return math.prod(mesh.axis_size(n) for n in axes_of(axis_name))
