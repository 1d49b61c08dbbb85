"""Layout: the one place that decides which elements of a tensor each device holds.

``layout(spec, shape)`` maps a sharding in either dialect to, per device id, the global indices it
holds along every dimension (in local order), plus the axes along which devices hold pending
reduction contributions. Local shapes, padding, shard / assemble, conversion checks and
equivalence are all read off a Layout (``layout_model``); nothing else re-derives placement.

Each dialect keeps its own uneven rule:
* tensor-dimension shardings (Shardy / JAX) cut a dim over axes of total size n into n blocks of
  ceil(d/n), major axis first; trailing blocks are short or empty (padding);
* placement lists (DTensor) apply mesh axes left to right, each chunking the piece the previous
  axes left (10 rows over (2,4) -> 2,2,1,0 | 2,2,1,0).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING, Sequence

import numpy as np

from .axes import AxisRef
from ..errors import ShardingError
from .mesh import Mesh
from .placements import DTensorSpec, cut_dim, pending_op
from .layout_model import Boxes, FlatIndexMap, Layout, frozen_indices  # noqa: F401  (Layout: re-exported)
from .rows import distinct_rows

if TYPE_CHECKING:  # pragma: no cover
    from .dims import Sharding


# -- building layouts --------------------------------------------------------------------------
def layout(spec, shape: Sequence[int]) -> Layout:
    """The layout of ``spec`` (Sharding, NamedSharding, DTensorSpec or Layout) for a global shape.

    Placement lists are laid out here; a tensor-dimension sharding says how it lays out with its
    ``layout(shape)`` method (Shardy's flat rule, ``flat_layout``), so this module sits below the
    classes of that dialect."""
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ShardingError("shape-mismatch", f"shape {shape} has a negative dimension")
    if isinstance(spec, Layout):
        if spec.shape != shape:
            raise ShardingError("shape-mismatch", f"layout of shape {spec.shape} used for shape {shape}")
        return spec
    if isinstance(spec, DTensorSpec):
        return _placement_layout(spec, shape)
    if callable(getattr(spec, "layout", None)):
        return spec.layout(shape)
    raise ShardingError("invalid-spec", f"cannot lay out {type(spec).__name__}: expected Sharding, NamedSharding or DTensorSpec")


def layout_of(spec, shape: Sequence[int]) -> Layout:
    """``layout(spec, shape)``, made once per distinct (spec, shape) while it is among the last
    8,192 asked for (a layout is immutable): the partitioner's and the estimate's layouts of one
    sharding are one object, so a mesh of 8,192 devices lays each sharding out once."""
    if isinstance(spec, Layout):
        return spec
    return _layout_cached(spec, tuple(int(s) for s in shape))


@lru_cache(maxsize=8192)
def _layout_cached(spec, shape: tuple[int, ...]) -> Layout:
    return layout(spec, shape)


def clear_layout_cache() -> None:
    """Forget the layouts ``layout_of`` made (a test that lays shardings out another way)."""
    _layout_cached.cache_clear()


MAX_INDEX_ENTRIES = 1 << 27  # global indices a layout lists over all devices and dims (1 GiB of int64)


def _check_size(spec, mesh: Mesh, shape: tuple[int, ...], blocks: Sequence[int], shared: bool = False) -> None:
    """Refuse, before allocating, a layout whose index lists would not fit in memory (``shared``:
    devices holding the same block share its index array, so each distinct block counts once)."""
    entries = (mesh.size * len(shape) + 2 * sum(shape)) if shared else mesh.size * sum(blocks) + sum(shape)
    if entries > MAX_INDEX_ENTRIES:
        raise ShardingError(
            "too-large",
            f"laying out shape {shape} as {spec} lists {entries:,} global indices over {mesh.size} devices, more "
            f"than the {MAX_INDEX_ENTRIES:,} simshard holds; run a smaller shape (the partition and its costs scale)",
        )


def flat_layout(s: "Sharding", shape: tuple[int, ...]) -> Layout:
    """Shardy's rule: a dim over axes of total size n is n blocks of ceil(d/n), major axis first."""
    s.check_rank(shape)
    mesh = s.mesh
    per_dim = []
    for k, d in enumerate(shape):
        axes = s.dims[k].axes
        n = math.prod(mesh.axis_size(a) for a in axes)
        per_dim.append((axes, math.ceil(d / n) if n else d))
    _check_size(s, mesh, shape, [block for _, block in per_dim], shared=True)
    # each device's block number along each dim (mixed radix over the dim's axes), in device order
    blocks = np.zeros((mesh.size, len(shape)), dtype=np.int64)
    for k, (axes, _) in enumerate(per_dim):
        for a in axes:
            blocks[:, k] = blocks[:, k] * mesh.axis_size(a) + mesh.axis_indices(a)
    # devices holding one block share its (read-only) index arrays: one tuple per distinct block
    distinct, _, inverse = distinct_rows(blocks)
    size = np.array([block for _, block in per_dim], dtype=np.int64)
    dims = np.array(shape, dtype=np.int64)
    lo, hi = np.minimum(distinct * size, dims), np.minimum((distinct + 1) * size, dims)
    # blocks past a dim's end are all the empty one at its end: distinct numbers, equal ranges
    ranges, _, again = distinct_rows(np.concatenate([lo, hi], axis=1))
    lo, hi, inverse = ranges[:, :len(shape)], ranges[:, len(shape):], again[inverse]
    index_map = FlatIndexMap(mesh.device_ids, inverse, lo, hi)
    ids = np.asarray(mesh.device_ids, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    boxes = Boxes(ids[order], lo[inverse[order]], hi[inverse[order]])
    return Layout(mesh, shape, index_map, s.unreduced, s.reduce_op, boxes)


def pieces_per_dim(spec: DTensorSpec, rank: int) -> list[int]:
    """Per tensor dim, how many pieces the placement list cuts it into (product of its axes' sizes)."""
    ways = [1] * rank
    for size, p in zip(spec.mesh.axis_sizes, spec.normalized(rank).placements):
        if cut_dim(p) is not None:
            ways[cut_dim(p)] *= size
    return ways


def _placement_layout(spec: DTensorSpec, shape: tuple[int, ...]) -> Layout:
    """DTensor's rule: mesh axes left to right, each splitting the piece the previous ones left."""
    spec = spec.normalized(len(shape))
    mesh = spec.mesh
    _check_size(spec, mesh, shape, [math.ceil(d / n) for d, n in zip(shape, pieces_per_dim(spec, len(shape)))])
    ops = {pending_op(p) for p in spec.placements} - {None}
    if len(ops) > 1:
        raise ShardingError(
            "mixed-reduce-ops",
            f"{spec} mixes Partial ops {sorted(ops)}; the order of such reductions is ambiguous, use one op",
        )
    pieces: dict[tuple[int, ...], tuple[np.ndarray, ...]] = {(): tuple(np.arange(d) for d in shape)}
    for axis, size, p in zip(mesh.axis_names, mesh.axis_sizes, spec.placements):
        nxt = {}
        for prefix, idx in pieces.items():
            dim = cut_dim(p)
            if dim is None:
                for c in range(size):
                    nxt[prefix + (c,)] = idx
                continue
            cuts = [np.asarray(c, dtype=np.intp) for c in p.split(idx[dim], size)]
            _check_cut(p, axis, idx[dim], cuts, size)
            for c, cut in enumerate(cuts):
                nxt[prefix + (c,)] = idx[:dim] + (cut,) + idx[dim + 1 :]
        pieces = nxt
    index_map = {mesh.device(c): tuple(frozen_indices(i) for i in idx) for c, idx in pieces.items()}
    unreduced = tuple(AxisRef(a) for a, p in zip(mesh.axis_names, spec.placements) if pending_op(p) is not None)
    return Layout(mesh, shape, index_map, unreduced, ops.pop() if ops else "sum")


def _check_cut(p, axis: str, piece: np.ndarray, cuts: list[np.ndarray], size: int) -> None:
    """A placement's split must cut a piece into ``size`` parts that partition it, and its join
    must put them back (checked on the index vectors, so it costs little)."""
    if len(cuts) != size or any(c.ndim != 1 for c in cuts):
        raise ShardingError(
            "invalid-placement", f"{p} on axis {axis!r} must return {size} 1-D pieces, got {len(cuts)}", axis=axis
        )
    joined = np.sort(np.concatenate(cuts)) if cuts else np.array([], dtype=np.intp)
    if not np.array_equal(joined, np.sort(piece)):
        raise ShardingError(
            "invalid-placement",
            f"{p} on axis {axis!r} cut a piece of {len(piece)} elements into parts that do not partition it",
            axis=axis,
        )
    if not np.array_equal(np.asarray(p.join(cuts, 0)), piece):
        raise ShardingError(
            "invalid-placement", f"{p} on axis {axis!r}: join(split(piece)) does not give the piece back", axis=axis
        )


def equivalent(a, b, shape: Sequence[int]) -> bool:
    """Do two shardings (any dialect, any meshes over the same devices) put the same data on every device?"""
    return layout(a, shape).same_as(layout(b, shape))


