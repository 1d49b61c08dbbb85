"""Aggressive factor propagation (Shardy's ``AggressiveFactorPropagation``).

Differences from basic propagation:

* The untruncated candidate axes of every factor are computed first, then resolved **per
  tensor**: each tensor takes the longest part it can accept, so a closed or replicated tensor
  no longer blocks the others (``[{"a"}] + [{}] -> [{"a", ?}]``).
* An axis proposed for two factors goes to one of them, chosen by ordering the factors:
  (1) larger *source tensor* first (the biggest tensor, by the product of its factor sizes, that
  already carries the whole candidate), (2) for elementwise ops only: larger total sharding size,
  (3) smaller source tensor index (operands before results), (4) smaller factor index.
  Results are updated before operands, each tensor against its already-updated state.
* Elementwise ops don't propagate sideways between operands past what the result holds.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from ..sharding.axes import AxisRef
from . import axis_math as am
from .basic import (
    DirectionOf,
    compatible_major_axes,
    prefix_free_across_factors,
    prefix_free_within_factor,
    truncate,
)
from .projection import Projection, TensorFactors

Sizes = Mapping[str, int]


def source_tensors(
    proj: Projection, factor_sizes: Sequence[int], candidates: Sequence[Sequence[AxisRef]], sizes: Sizes
) -> list[tuple[int, int]]:
    """Per factor, ``(size, index)`` of the largest tensor already carrying the whole candidate
    (``(-1, -1)`` when none does)."""
    out = [(-1, -1)] * len(factor_sizes)
    for ti, t in enumerate(proj.tensors):
        tsize = 1
        for f in t.factors:
            tsize *= factor_sizes[f]
        for f, fs in t.factors.items():
            cand = candidates[f]
            if cand and am.list_prefix(cand, fs.axes, sizes) is not am.Prefix.NOT and tsize > out[f][0]:
                out[f] = (tsize, ti)
    return out


def factor_order(
    proj: Projection, factor_sizes: Sequence[int], candidates: Sequence[Sequence[AxisRef]], sizes: Sizes, elementwise: bool
) -> list[int]:
    """The order in which factors claim axes (see the module docstring)."""
    src = source_tensors(proj, factor_sizes, candidates, sizes)

    def key(f: int):
        shard = am.total_size(candidates[f], sizes) if elementwise else 0
        return (-src[f][0], -shard, src[f][1], f)

    return sorted(range(len(factor_sizes)), key=key)


def tensor_axes_for_factor(
    factor: int,
    tensor: TensorFactors,
    candidates: Sequence[Sequence[AxisRef]],
    factor_sizes: Sequence[int],
    sizes: Sizes,
    conservative: bool,
) -> list[AxisRef]:
    """The part of the candidate for ``factor`` this tensor can take, or [] if nothing new."""
    fs = tensor.factors.get(factor)
    if fs is None:
        return []
    new = list(candidates[factor])
    truncate(
        new,
        lambda a, prev: prefix_free_within_factor(a, tensor.replicated, tensor.unreduced, fs, prev, factor_sizes[factor], sizes),
        sizes,
        conservative,
    )
    if not am.is_strict_prefix(fs.axes, new, sizes):
        return []
    # Against the tensor's current (possibly just updated) state for the other factors.
    truncate(new, lambda a, prev: prefix_free_across_factors(a, tensor, factor, sizes), sizes, conservative)
    return new


def propagate_aggressive(
    proj: Projection,
    direction_of: DirectionOf,
    factor_sizes: Sequence[int],
    sizes: Sizes,
    conservative: bool = False,
    elementwise: bool = False,
) -> tuple[list[bool], list[bool]]:
    """Propagate all factors at once, resolving per tensor; returns which operands / results grew."""
    upd_ops = [False] * len(proj.operands)
    upd_res = [False] * len(proj.results)
    candidates = [compatible_major_axes(proj, f, direction_of(f), sizes) for f in range(len(factor_sizes))]
    if not any(candidates):
        return upd_ops, upd_res
    order = factor_order(proj, factor_sizes, candidates, sizes, elementwise)

    for i, t in enumerate(proj.results):
        for f in order:
            new = tensor_axes_for_factor(f, t, candidates, factor_sizes, sizes, conservative)
            if new:
                upd_res[i] |= t.expand(f, new, sizes)

    for i, t in enumerate(proj.operands):
        for f in order:
            new = tensor_axes_for_factor(f, t, candidates, factor_sizes, sizes, conservative)
            if not new:
                continue
            if elementwise:
                # No sideways growth past what a result holds (e.g. a closed empty result).
                for r in proj.results:
                    rfs = r.factors.get(f)
                    if rfs is not None and am.is_strict_prefix(rfs.axes, new, sizes):
                        new = list(rfs.axes)
            upd_ops[i] |= t.expand(f, new, sizes)
    return upd_ops, upd_res
