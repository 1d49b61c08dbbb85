"""Exact conversion between tensor-dimension shardings and placement lists.

Both directions build a candidate in the other dialect and then compare the two *layouts*; a
conversion succeeds only when every device holds the same data. Where the axis order needs it,
the candidate uses ``StridedShard`` (a mesh axis that is the minor split of a dim) or sub-axes
(a stride that falls inside a later mesh axis). Where no exact form exists (uneven nested
chunking vs the flat rule, a mesh axis split over two dims, a stripe inside a device's local
block) a ShardingError says why. Open dims, priorities and explicitly replicated axes say
nothing about where data is, so placement lists simply do not carry them.
"""

from __future__ import annotations

import math
from typing import Sequence

from typing import TYPE_CHECKING

from ..errors import ShardingError
from .axes import AxisRef, canonical_ref
from .layout import layout
from .layout_model import Layout
from .placements import DTensorSpec, Partial, Placement, Replicate, Shard, StridedShard, cut_dim, pending_op

if TYPE_CHECKING:  # pragma: no cover
    from .dims import Sharding


def sharding_to_dtensor(s: "Sharding", shape: Sequence[int]) -> DTensorSpec:
    """The placement list laying data out as ``s`` does (``Sharding.to_dtensor``)."""
    s.check_rank(shape)
    mesh = s.mesh
    for a in s.unreduced:
        if not a.is_full:
            raise ShardingError(
                "not-expressible", f"unreduced sub-axis {a}: a Partial placement covers a whole mesh axis", axis=a.name
            )
    remaining = [list(d.axes) for d in s.dims]  # per dim, axes not yet given a placement
    placements: list[Placement] = []
    for axis, n in zip(mesh.axis_names, mesh.axis_sizes):
        if any(a.name == axis for a in s.unreduced):
            placements.append(Partial(s.reduce_op))
            continue
        dims = sorted({k for k, axes in enumerate(remaining) if any(a.name == axis for a in axes)})
        if not dims:
            placements.append(Replicate())
            continue
        if len(dims) > 1:
            raise ShardingError(
                "not-expressible",
                f'axis "{axis}" is split into sub-axes sharding dims {dims}; a placement cuts one tensor dim per mesh axis',
                axis=axis,
            )
        k = dims[0]
        pos = [i for i, a in enumerate(remaining[k]) if a.name == axis]
        parts = [remaining[k][i] for i in pos]
        covered = math.prod(a.size(n) for a in parts)
        chained = all(parts[i].interval(n)[1] == parts[i + 1].interval(n)[0] for i in range(len(parts) - 1))
        if covered != n or pos != list(range(pos[0], pos[0] + len(pos))) or not chained:
            raise ShardingError(
                "not-expressible",
                f"dim {k} uses {', '.join(a.short() for a in parts)}: a placement shards by a whole mesh axis "
                f'in one piece, but axis "{axis}" is not used whole and in order there',
                axis=axis,
                dim=k,
            )
        sf = math.prod(mesh.axis_size(a) for a in remaining[k][: pos[0]])
        placements.append(Shard(k) if sf == 1 else StridedShard(k, sf))
        del remaining[k][pos[0] : pos[0] + len(pos)]
    spec = DTensorSpec(mesh, tuple(placements))
    require_same(layout(s, shape), layout(spec, shape), str(s), str(spec))
    return spec


def dtensor_dims(spec: DTensorSpec, shape: Sequence[int]):
    """The tensor-dimension form of a placement list as data, for ``Sharding.from_dtensor``:
    ``(spec in standard placements, per dim its axes, unreduced axes, reduce op)``. The caller
    builds the Sharding and checks its layout against the spec's (``require_same``)."""
    shape = tuple(int(d) for d in shape)
    spec = _standard_placements(spec.normalized(len(shape)), shape)
    mesh = spec.mesh
    unreduced, reduce_op = pending_of(spec)
    dims: list[list[AxisRef]] = [[] for _ in shape]
    # Later mesh axes split first in the tensor's major-to-minor order only when an earlier axis
    # says so with its split factor, so insert axes from the last to the first.
    for axis, n, p in reversed(list(zip(mesh.axis_names, mesh.axis_sizes, spec.placements))):
        if cut_dim(p) is None:
            continue
        sf = p.split_factor if isinstance(p, StridedShard) else 1
        dims[p.dim] = _insert(dims[p.dim], AxisRef(axis), sf, mesh.shape, p, axis)
    return spec, tuple(tuple(d) for d in dims), unreduced, reduce_op


def pending_of(spec: DTensorSpec) -> tuple[tuple[AxisRef, ...], str]:
    """The mesh axes a placement list holds pending (Partial) over, and their one reduce op
    (``"sum"`` when none; a ShardingError when the Partials mix ops: a value carries one)."""
    ops = {pending_op(p) for p in spec.placements} - {None}
    if len(ops) > 1:
        raise ShardingError("mixed-reduce-ops", f"{spec} mixes Partial ops {sorted(ops)}; a value carries one reduce op")
    unreduced = tuple(AxisRef(a) for a, p in zip(spec.mesh.axis_names, spec.placements) if pending_op(p) is not None)
    return unreduced, ops.pop() if ops else "sum"


def _insert(axes: list[AxisRef], new: AxisRef, sf: int, sizes: dict[str, int], p, axis: str) -> list[AxisRef]:
    """Put ``new`` after the major part of ``axes`` whose sizes multiply to ``sf``, splitting an
    axis into sub-axes when the boundary falls inside it."""
    prod = 1
    for i, a in enumerate(axes):
        if prod == sf:
            return axes[:i] + [new] + axes[i:]
        size = a.size(sizes[a.name])
        if prod * size > sf:
            q = sf // prod
            if sf % prod or size % q:
                break
            lo = a.pre_size()
            major = canonical_ref(a.name, lo, q, sizes[a.name])
            minor = canonical_ref(a.name, lo * q, size // q, sizes[a.name])
            return axes[:i] + [major, new, minor] + axes[i + 1 :]
        prod *= size
    if prod == sf:
        return axes + [new]
    later = " x ".join(f"{a.short()}={a.size(sizes[a.name])}" for a in axes) or "nothing"
    raise ShardingError(
        "not-expressible",
        f"{p} on axis {axis!r}: split factor {sf} does not fall on a boundary between the later mesh "
        f"axes sharding that dim ({later}), so the stripes it makes cannot be one contiguous block per device",
        axis=axis,
        dim=p.dim,
    )


def _standard_placements(spec: DTensorSpec, shape: tuple[int, ...]) -> DTensorSpec:
    """Replace user-defined placements by the Shard / StridedShard that lays data out identically
    (decided by comparing layouts, one placement at a time)."""
    standard = (Shard, StridedShard, Replicate, Partial)
    if all(isinstance(p, standard) for p in spec.placements):
        return spec
    target = layout(spec, shape)
    placements = list(spec.placements)
    for i, p in enumerate(placements):
        if isinstance(p, standard):
            continue
        axis = spec.mesh.axis_names[i]
        if cut_dim(p) is None:
            raise ShardingError("not-expressible", f"{p} on axis {axis!r} has no tensor-dimension form", axis=axis)
        d = shape[p.dim]
        candidates = [Shard(p.dim)] + [StridedShard(p.dim, f) for f in range(2, d + 1) if d % f == 0]
        for c in candidates:
            trial = DTensorSpec(spec.mesh, tuple(placements[:i] + [c] + placements[i + 1 :]))
            if layout(trial, shape).same_as(target):
                placements[i] = c
                break
        else:
            raise ShardingError(
                "not-expressible",
                f"{p} on axis {axis!r} cuts dim {p.dim} in a way no Shard or StridedShard does",
                axis=axis,
                dim=p.dim,
            )
    return DTensorSpec(spec.mesh, tuple(placements))


def require_same(want: Layout, got: Layout, want_text: str, got_text: str) -> None:
    """Nothing when the two layouts hold the same data everywhere, else why not (``not-expressible``)."""
    if want.same_as(got):
        return
    for d in want.devices:
        for k, (x, y) in enumerate(zip(want.indices(d), got.indices(d))):
            if len(x) != len(y) or (x != y).any():
                raise ShardingError(
                    "not-expressible",
                    f"{want_text} and its nearest form {got_text} disagree: device {d} holds indices "
                    f"{x.tolist()} of dim {k} under the first and {y.tolist()} under the second "
                    "(the flat ceil-and-pad rule and nested chunking differ for this uneven shape)",
                    dim=k,
                )
    raise ShardingError("not-expressible", f"{want_text} and {got_text} differ in their pending reductions")
