"""One tensor dimension's sharding (``DimSharding``) and the checks and spellings of the axes in
it: an axis name or ``AxisRef``, a dim as written, an ArraySharding entry, Shardy's maximality of
sub-axes. ``dims.Sharding`` is built from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence, Union

from ..errors import ShardingError
from .axes import AxisRef, mergeable_pair
from .mesh import Mesh

AxisLike = Union[str, AxisRef]


def axis_ref(a: AxisLike) -> AxisRef:
    """An axis name or AxisRef as an AxisRef."""
    if isinstance(a, AxisRef):
        return a
    if isinstance(a, str):
        return AxisRef(a)
    raise ShardingError("invalid-axis", f"expected an axis name or AxisRef, got {a!r}")


@dataclass(frozen=True)
class DimSharding:
    """How one tensor dimension is split: axes major to minor, open or closed, a priority."""

    axes: tuple[AxisRef, ...] = ()
    is_open: bool = False
    priority: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "axes", tuple(axis_ref(a) for a in self.axes))
        if self.priority is not None:
            object.__setattr__(self, "priority", int(self.priority))

    def __str__(self) -> str:
        items = [str(a) for a in self.axes] + (["?"] if self.is_open else [])
        return "{" + ", ".join(items) + "}" + (f"p{self.priority}" if self.priority is not None else "")


def as_dim_sharding(d) -> DimSharding:
    """A dim as written (a DimSharding, None, one axis, or a sequence of axes) as a DimSharding."""
    if isinstance(d, DimSharding):
        return d
    if d is None:
        return DimSharding()
    if isinstance(d, (str, AxisRef)):
        return DimSharding((d,))
    return DimSharding(tuple(d))


def sorted_refs(refs: Iterable[AxisRef], mesh: Mesh) -> tuple[AxisRef, ...]:
    """``refs`` in mesh order (sub-axes of one axis major first)."""
    order = {n: i for i, n in enumerate(mesh.axis_names)}
    return tuple(sorted(refs, key=lambda r: (order.get(r.name, len(order)), r.pre_size())))


def check_maximal(refs: Sequence[AxisRef], sizes: dict[str, int], where: str, dim: int | None = None) -> None:
    """Shardy's maximality invariant: no two neighbouring consecutive sub-axes of one axis."""
    pair = mergeable_pair(refs, sizes)
    if pair is not None:
        a, b, merged = pair
        raise ShardingError(
            "non-maximal-sub-axes",
            f"{a} and {b} in {where} are consecutive sub-axes of axis \"{a.name}\" (size "
            f"{sizes[a.name]}); sub-axes must be as big as possible: write them as {merged}",
            axis=a.name,
            dim=dim,
        )


def array_entry(mesh: Mesh, dim: int, e) -> DimSharding:
    """One ArraySharding entry: an axis name, an axis index, or -1 / None for an unsharded dim."""
    names = mesh.axis_names
    if e is None or (type(e) is int and e == -1):
        return DimSharding()
    if type(e) is int:
        if 0 <= e < len(names):
            return DimSharding((names[e],))
        raise ShardingError("invalid-spec", f"dimension {dim}: axis index {e} is not an axis of the mesh (indices "
                            f"0..{len(names) - 1} for {', '.join(names)}, or -1 for unsharded)", dim=dim)
    if isinstance(e, str):
        if e not in names:
            raise ShardingError("unknown-axis", f"dimension {dim}: axis {e!r} is not an axis of the mesh "
                                f"({', '.join(names) or 'no axes'})", axis=e, dim=dim)
        return DimSharding((e,))
    raise ShardingError("invalid-spec", f"dimension {dim}: ArraySharding entry {e!r} must be an axis name, an axis "
                        "index or -1", dim=dim)
