"""``plan_reshard(src, dst, shape)``: move a tensor from any layout to any other, in the fewest bytes.

The plan has up to three parts.

1. **Reductions.** Pending reductions the target does not keep are done first, on the smallest
   data: free axes the target shards with are sliced in beforehand, axes the target shards a dim
   with are reduce-scattered onto that dim, the rest all-reduced together in one collective.
2. **Moving data.** Two candidates, the cheaper in total bytes wins (ties go to the first):
   * the *structured* path (``greedy``): local slices first, all-to-alls to move axes between
     dims, collective-permutes to relabel devices while shards are small, all-gathers last, so a
     live shard never exceeds max(input, output); each step checked on the layouts;
   * the *exchange* (``exchange``): point-to-point rounds in which every device receives exactly
     the elements it lacks, the lower bound of any plan. It wins where axes move between several
     dims at once (``[{y},{x},{}] -> [{},{},{x,y}]``: 3/4 of a shard instead of one) and where
     uneven dims do not nest, which no single collective can fix.
3. **New pending reductions** (the target holds a partial value): local; a sharded dim becomes
   pending by embedding each block in an identity-filled block, a replicated one by keeping the
   value on the first device of each group and the identity elsewhere.

A target on a mesh over fewer of the source's devices (fewer ciphertexts) is laid out on the
source's devices with empty blocks on the others and reached by the exchange (``generic.onto_fewer_plan``); a
target on devices the source does not have is refused. Shardings on different meshes over the
same devices are handled by re-expressing one mesh's axes in the other's (a mesh ``{x: 8}`` is ``{a: 2, b: 4}`` read major to minor), and when the
device orders differ, by one collective-permute at whichever end of the plan the shard is
smaller. Placement lists (``DTensorSpec``) convert to shardings where that is exact; DTensor's
nested uneven layouts, which no tensor-dimension sharding expresses, are planned on the layouts
themselves (reduce-scatter or all-reduce over the reduce groups, then the exchange).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...errors import ShardingError
from ...sharding.dims import DimSharding, NamedSharding, Sharding
from ...sharding.layout import Layout
from ...sharding.placements import DTensorSpec
from .generic import generic_plan, onto_fewer_plan
from .meshes import cross_mesh_plan, rebind, same_mesh_shape
from .plan import Planned, ReshardPlan, layout_of
from .same_mesh import same_mesh_plan


def plan_reshard(src, dst, shape, dtype=np.float32) -> ReshardPlan:
    """Plan moving a ``shape`` tensor laid out as ``src`` to ``dst`` (Shardings, NamedShardings,
    DTensorSpecs or Layouts over the same devices; pending reductions included)."""
    shape = tuple(int(n) for n in shape)
    dtype = np.dtype(dtype)
    source, target = _spec(src, shape, "source"), _spec(dst, shape, "target")
    if isinstance(source, Sharding) and isinstance(target, Sharding):
        steps, final, alts = _cached(source, target, shape, dtype.itemsize)
    else:
        steps, final, alts = _plan(source, target, shape, dtype.itemsize)
    return ReshardPlan(src, dst, shape, dtype, tuple(steps), final, alts)


@lru_cache(maxsize=4096)
def _cached(source: Sharding, target: Sharding, shape, item):
    return _plan(source, target, shape, item)


def _spec(x, shape, what: str):
    if isinstance(x, Layout):
        if x.shape != shape:
            raise ShardingError("shape-mismatch", f"{what} layout has shape {x.shape}, the tensor {shape}")
        return x
    if isinstance(x, NamedSharding):
        x = x.to_sharding(len(shape))
    if isinstance(x, DTensorSpec):
        try:
            x = Sharding.from_dtensor(x, shape)
        except ShardingError:
            return layout_of(x, shape)
    if isinstance(x, Sharding):
        x.check_rank(shape)
        return plain(x)
    raise ShardingError("invalid-spec", f"plan_reshard: the {what} must be a Sharding, NamedSharding, DTensorSpec or Layout, got {type(x).__name__}")


@lru_cache(maxsize=16384)
def plain(s: Sharding) -> Sharding:
    """Only what decides the layout: axes per dim and pending reductions (no open dims, priorities
    or replicated markers)."""
    if not s.replicated and all(not d.is_open and d.priority is None for d in s.dims):
        return s
    return Sharding(s.mesh, tuple(DimSharding(d.axes) for d in s.dims), (), s.unreduced, s.reduce_op)


def _devices(spec) -> frozenset[int]:
    return frozenset(spec.mesh.device_ids)


def _plan(source, target, shape, item) -> Planned:
    if _devices(source) != _devices(target):
        if _devices(target) < _devices(source):
            return onto_fewer_plan(source, target, shape, item)
        stray = sorted(_devices(target) - _devices(source))
        raise ShardingError(
            "wrong-mesh",
            f"cannot reshard from @{source.mesh.name} (devices {_ids(_devices(source))}) to @{target.mesh.name} (devices "
            f"{_ids(_devices(target))}): the target's devices {_ids(stray)} are not among the source's; a reshard "
            "may move a tensor onto the same devices or onto fewer of them (the rest left empty), not onto others",
        )
    LS, LT = layout_of(source, shape), layout_of(target, shape)
    if LS.same_as(LT):
        return Planned([], target, {})
    if isinstance(source, Sharding) and isinstance(target, Sharding):
        if same_mesh_shape(source.mesh, target.mesh):
            steps, alts = same_mesh_plan(source, rebind(target, source.mesh), shape, item)
            return Planned(steps, target, alts)
        return cross_mesh_plan(source, target, shape, item)
    return Planned(generic_plan(source, target, shape, item), target, {})


def _ids(devices) -> str:
    """Device ids, runs shortened: [0..31, 40]."""
    out, run = [], []
    for d in sorted(devices):
        if run and d == run[-1] + 1:
            run.append(d)
            continue
        if run:
            out.append(f"{run[0]}..{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)))
        run = [d]
    if run:
        out.append(f"{run[0]}..{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)))
    return "[" + ", ".join(out) + "]"
