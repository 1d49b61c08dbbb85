"""Strided layouts for flattened outputs (seed 002): where a tensor-dim sharding cannot say it.

Flattening a ``(Replicate, Shard(1))`` value of shape ``(B, S, H)`` to ``(B*S, H)`` keeps every
element where it is, but the merged dim is then sharded over its *minor* factor: each device
holds stripes, DTensor's ``_StridedShard(0, split_factor=B)``. A tensor-dim sharding (Shardy's,
what propagation gives) cannot state that: it can only shard the major factor first, so
propagation leaves the merged dim unsharded and the output would be gathered.

``strided_outputs`` finds such outputs after propagation: an output nobody gave a sharding, made
by a reshape that only merges dims, whose operand's placements carry over to the merged dims as
``Shard`` / ``_StridedShard`` placements laying out the very elements each device already holds
(checked on the layouts). That placement list becomes the output's sharding, as if the user had
stated it, and the partitioner runs the reshape where the operand lies, moving nothing.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import numpy as np

from ..ir.program import Program, Value
from ..sharding.dims import Sharding
from ..sharding.layout import layout
from ..sharding.placements import DTensorSpec, Replicate, Shard, StridedShard


def merge_groups(in_shape: Sequence[int], out_shape: Sequence[int]) -> list[tuple[int, int]] | None:
    """Per output dim, the range ``[lo, hi)`` of input dims it merges (None: not a pure merge)."""
    groups, i = [], 0
    for n in out_shape:
        lo, size = i, 1
        while i < len(in_shape) and (size < n or (size == n and i == lo)):
            size *= in_shape[i]
            i += 1
        if size != n:
            return None
        groups.append((lo, i))
    return groups if i == len(in_shape) else None


def merged_placements(spec: DTensorSpec, in_shape, groups) -> DTensorSpec | None:
    """``spec``'s placements on the merged dims: a Shard of a group's first dim stays a Shard, of
    a later dim a _StridedShard whose split factor is the group's size before it."""
    out, sharded_groups = [], []
    for p in spec.placements:
        if isinstance(p, Replicate):
            out.append(p)
            continue
        if type(p) is not Shard:
            return None
        j = next(k for k, (lo, hi) in enumerate(groups) if lo <= p.dim < hi)
        if j in sharded_groups:
            return None  # two mesh dims on one merged dim: not attempted
        sharded_groups.append(j)
        pre = math.prod(in_shape[groups[j][0]:p.dim])
        out.append(Shard(j) if pre == 1 else StridedShard(j, pre))
    return DTensorSpec(spec.mesh, tuple(out))


def _keeps_elements(before, after, in_shape, out_shape, groups) -> bool:
    """Every device holds under ``after`` exactly the flattened elements it holds under ``before``."""
    for d in before.devices:
        held, want = before.indices(d), after.indices(d)
        for j, (lo, hi) in enumerate(groups):
            grid = np.meshgrid(*held[lo:hi], indexing="ij") if hi > lo else []
            flat = np.ravel_multi_index([g.ravel() for g in grid], in_shape[lo:hi]) if grid else np.zeros(1, int)
            if not np.array_equal(np.sort(flat), np.sort(want[j])):
                return False
    return True


def strided_output(program: Program, k: int) -> DTensorSpec | None:
    """The placements of output ``k`` when it is a flatten that only they can state (else None)."""
    v = program.outputs[k]
    e = program.producer(v)
    if e is None or e.op != "reshape" or not isinstance(e.inputs[0], Value):
        return None
    x = e.inputs[0]
    s_x, s_v = program.shardings.get(x), program.shardings.get(v)
    if not isinstance(s_x, Sharding) or not isinstance(s_v, Sharding) or s_x.unreduced:
        return None
    if sum(len(d.axes) for d in s_v.dims) >= sum(len(d.axes) for d in s_x.dims):
        return None  # propagation kept every axis: nothing to find
    in_shape, out_shape = tuple(x.aval.shape), tuple(v.aval.shape)
    groups = merge_groups(in_shape, out_shape)
    if groups is None:
        return None
    try:
        spec = merged_placements(s_x.to_dtensor(in_shape), in_shape, groups)
        if spec is None:
            return None
        ok = _keeps_elements(layout(s_x, in_shape), layout(spec, out_shape), in_shape, out_shape, groups)
    except ValueError:  # a sharding with no placement form, or placements that do not lay out
        return None
    return spec if ok else None


def strided_outputs(program: Program) -> Program:
    """``program`` with the strided placements of its unannotated flattened outputs as their
    output shardings (module docstring); unchanged when there are none."""
    given = list(program.out_shardings) + [None] * (len(program.outputs) - len(program.out_shardings))
    found = {k: strided_output(program, k) for k, s in enumerate(given) if s is None}
    found = {k: s for k, s in found.items() if s is not None}
    if not found:
        return program
    return replace(program, out_shardings=tuple(found.get(k, s) for k, s in enumerate(given)))


__all__ = ["merge_groups", "merged_placements", "strided_output", "strided_outputs"]
