"""Basic factor propagation (Shardy's ``BasicFactorPropagation``): one axis list per factor,
applied to every tensor of the op — all or nothing.

For each factor, in factor order:

1. *Compatible major axes*: fold the factor's axes over the tensors that have it into the
   longest common prefix where each tensor either equals the prefix so far or is a shorter
   prefix of it. Disagreement stops the growth (``[a,b]`` vs ``[a,c]`` -> ``[a]``); there is no
   majority vote. With a one-way direction only the tensors on the allowed side may grow the
   list; the others are only checked for conflicts.
2. *Conflict truncation*, major to minor, cut at the first problem: the axis must not overlap
   another factor's axes or overflow axes in any tensor; for a tensor that has the factor it must
   not be replicated/unreduced there, and if it is new for that tensor the factor must be open,
   without overflow, and (unless minor-most) divide what is left of the factor — a partial fit
   becomes a sub-axis. In conservative mode a sub-axis ends the list.
3. *Expansion*: each tensor whose axes for the factor are a strict prefix of the list takes the
   list. Nothing is ever removed, reordered or replaced.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

from ..sharding.axes import AxisRef
from . import axis_math as am
from .direction import Direction
from .projection import FactorSharding, Projection, TensorFactors

Sizes = Mapping[str, int]
DirectionOf = Callable[[int], Direction]


def compatible_major_axes_merge(
    old: Sequence[AxisRef], new: Sequence[AxisRef], can_expand: bool, sizes: Sizes
) -> tuple[list[AxisRef], bool]:
    """Fold one tensor's axes ``new`` into the running candidate ``old``; returns the new
    candidate and whether it may still grow."""
    result: list[AxisRef] = []
    i = 0
    n = min(len(old), len(new))
    while i < n:
        o, w = old[i], new[i]
        i += 1
        if o.name != w.name:
            return result, False
        if o == w:
            result.append(w)
            continue
        if am.prefix_of(w, o, sizes):
            if i < len(new):
                result.append(w)
                return result, False
            result.append(o)
        elif am.prefix_of(o, w, sizes):
            if not can_expand or i < len(old):
                result.append(o)
                return result, False
            result.append(w)
        else:
            return result, False
    result.extend(old[i:])
    if can_expand:
        result.extend(new[i:])
    return result, can_expand


def compatible_major_axes(proj: Projection, factor: int, direction: Direction, sizes: Sizes) -> list[AxisRef]:
    """The longest axis list all tensors having ``factor`` agree on, ignoring conflicts."""
    if direction == Direction.NONE:
        return []
    if direction & Direction.FORWARD:
        first, second = proj.operands, proj.results
    else:
        first, second = proj.results, proj.operands
    result: list[AxisRef] = []
    can_expand = True
    for t in first:
        if factor in t.factors:
            result, can_expand = compatible_major_axes_merge(result, t.factors[factor].axes, can_expand, sizes)
    if direction != Direction.BOTH:
        can_expand = False
    for t in second:
        if factor in t.factors:
            result, can_expand = compatible_major_axes_merge(result, t.factors[factor].axes, can_expand, sizes)
    return result


def prefix_free_across_factors(axis: AxisRef, tensor: TensorFactors, factor: int, sizes: Sizes) -> AxisRef | None:
    """The largest prefix of ``axis`` overlapping no axis or overflow axis of another factor."""
    result: AxisRef | None = axis
    for f, fs in tensor.factors.items():
        if f == factor:
            continue
        result = am.prefix_without_overlap_all(result, fs.overflow, sizes)
        if result is None:
            return None
        result = am.prefix_without_overlap_all(result, fs.axes, sizes)
        if result is None:
            return None
    return result


def prefix_free_within_factor(
    axis: AxisRef,
    replicated: Sequence[AxisRef],
    unreduced: Sequence[AxisRef],
    fs: FactorSharding,
    prev_sharded: int,
    factor_size: int,
    sizes: Sizes,
) -> AxisRef | None:
    """The largest prefix of ``axis`` that this tensor's factor can hold: not replicated or
    unreduced, and either already there or addable (open, no overflow, divides unless minor-most)."""
    result = am.prefix_without_overlap_all(axis, replicated, sizes)
    if result is None:
        return None
    result = am.prefix_without_overlap_all(result, unreduced, sizes)
    if result is None:
        return None
    if any(am.contains(a, result, sizes) for a in fs.axes):
        return result
    if not fs.closed and not fs.overflow:
        if fs.minor_most:
            return result
        if factor_size % prev_sharded == 0:
            n = am.size(result, sizes)
            g = math.gcd(factor_size // prev_sharded, n)
            if g == n:
                return result
            if g != 1:
                return am.make(result.name, result.pre_size(), g, sizes)
    if fs.axes and am.prefix_of(fs.axes[-1], result, sizes):
        return fs.axes[-1]
    return None


def truncate(
    axes: list[AxisRef],
    remove_conflicts: Callable[[AxisRef, int], AxisRef | None],
    sizes: Sizes,
    conservative: bool,
) -> None:
    """Cut ``axes`` (in place) at the first axis ``remove_conflicts`` shortens or refuses."""
    prev = 1
    for i, cur in enumerate(axes):
        new = remove_conflicts(cur, prev)
        if new is None or (conservative and new.sub is not None):
            del axes[i:]
            return
        if new != cur:
            axes[i] = new
            del axes[i + 1 :]
            return
        prev *= am.size(new, sizes)


def compatible_prefix(
    axis: AxisRef, proj: Projection, factor: int, prev_sharded: int, factor_size: int, sizes: Sizes
) -> AxisRef | None:
    result: AxisRef | None = axis
    for t in proj.tensors:
        result = prefix_free_across_factors(result, t, factor, sizes)
        if result is None:
            return None
        fs = t.factors.get(factor)
        if fs is not None:
            result = prefix_free_within_factor(result, t.replicated, t.unreduced, fs, prev_sharded, factor_size, sizes)
            if result is None:
                return None
    return result


def compatible_sharding_axes(
    proj: Projection, factor: int, direction: Direction, factor_size: int, sizes: Sizes, conservative: bool
) -> list[AxisRef]:
    """Compatible major axes for ``factor``, truncated at the first conflict in any tensor."""
    axes = compatible_major_axes(proj, factor, direction, sizes)
    truncate(axes, lambda a, prev: compatible_prefix(a, proj, factor, prev, factor_size, sizes), sizes, conservative)
    return axes


def propagate_basic(
    proj: Projection,
    direction_of: DirectionOf,
    factor_sizes: Sequence[int],
    sizes: Sizes,
    conservative: bool = False,
    elementwise: bool = False,
) -> tuple[list[bool], list[bool]]:
    """Propagate every factor in turn; returns which operands and results were expanded."""
    upd_ops = [False] * len(proj.operands)
    upd_res = [False] * len(proj.results)
    for f, fsize in enumerate(factor_sizes):
        axes = compatible_sharding_axes(proj, f, direction_of(f), fsize, sizes, conservative)
        for i, t in enumerate(proj.operands):
            upd_ops[i] |= t.expand(f, axes, sizes)
        for i, t in enumerate(proj.results):
            upd_res[i] |= t.expand(f, axes, sizes)
    return upd_ops, upd_res
