"""Choosing how an op runs: one assignment of mesh axes to its rule's factors.

An op runs locally when its operands agree per factor (Shardy's "compatible" shardings). The
candidates are the assignments each operand's current sharding and each result's wanted
sharding project to (``propagate.projection``), a bytes-weighted vote per factor across all of
them (Shardy's explicit-reshard heuristic), and fully replicated. Each candidate is made legal
(``legalize``): factors that cannot be split (need-replication, permutation, inexact, or only on
one side of the op) lose their axes, no axis is used twice, compound dims shard major factors
fully first, uneven factors stay alone in their dims, and axes a kept-pending operand uses are
left out. The partitioner then prices every candidate by the bytes its reshards move and keeps
the cheapest.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from ..sharding.axes import AxisRef, check_coexist
from ..sharding.mesh import Mesh
from ..ops.check import project, shardable_factors
from ..ops.factors import FactorRule
from ..propagate.projection import Projection
from ..sharding.dims import Sharding

RESULT_ONLY = {"broadcast_in_dim", "iota", "full", "constant"}  # ops that build result-only factor blocks from params

Assignment = dict[str, tuple[AxisRef, ...]]


def _clash(a: AxisRef, b: AxisRef, sizes) -> bool:
    return a.name == b.name and (a == b or check_coexist(a, b, sizes[a.name]) is not None)


def candidates(
    rule: FactorRule,
    op: str,
    in_shapes, out_shapes,
    mesh: Mesh,
    operand_specs: Sequence[Sharding | None],
    result_specs: Sequence[Sharding | None],
    weights: Sequence[int],
    reserved: Sequence[AxisRef] = (),
) -> list[Assignment]:
    """Legal assignments to try, most promising first, without duplicates."""
    sizes = mesh.shape
    names = [f for f, _ in rule.factors]
    try:
        proj = Projection.build(list(operand_specs), list(result_specs), rule, sizes)
    except Exception:  # a sharding that does not fit the rule's dims: nothing to learn from it
        proj = None
    raw: list[Assignment] = []
    per_tensor: list[tuple[int, Assignment]] = []
    if proj is not None:
        for t, tf in enumerate(proj.tensors):
            a = {names[f]: tuple(fs.axes) for f, fs in tf.factors.items() if fs.axes}
            per_tensor.append((weights[t] if t < len(weights) else 0, a))
    # the bytes-weighted vote: per factor, the axis list (or a prefix of it) most bytes agree on
    vote: dict[str, dict[tuple, int]] = {}
    for w, a in per_tensor:
        for f, axes in a.items():
            for k in range(1, len(axes) + 1):
                vote.setdefault(f, {})
                vote[f][axes[:k]] = vote[f].get(axes[:k], 0) + w
    ranked = sorted(
        ((w, len(axes), f, axes) for f, opts in vote.items() for axes, w in opts.items()),
        key=lambda x: (-x[0], -x[1], names.index(x[2])),
    )
    voted: Assignment = {}
    for w, _, f, axes in ranked:
        if f in voted:
            continue
        voted[f] = axes
    raw.append(voted)
    for _, a in sorted(per_tensor, key=lambda x: -x[0]):
        raw.append(a)
    # each tensor's choice completed by the vote for the factors it lacks
    for _, a in sorted(per_tensor, key=lambda x: -x[0]):
        raw.append({**voted, **a})
    raw.append({})
    out: list[Assignment] = []
    seen = set()
    for a in raw:
        legal = legalize(rule, op, in_shapes, out_shapes, mesh, a, reserved)
        key = tuple(sorted(legal.items()))
        if key not in seen:
            seen.add(key)
            out.append(legal)
    return out


def split_degree(rule: FactorRule, mesh: Mesh, assignment: Assignment) -> int:
    """How many blocks ``assignment`` cuts the op's iteration space into: the product of the sizes
    of the axes it gives the factors (a block may be empty: a factor smaller than its axes leaves
    devices idle, not repeating work). The devices sharing one block compute it redundantly: a
    candidate of lower degree replicates work."""
    sizes = mesh.shape
    degree = 1
    for f, _ in rule.factors:
        for a in assignment.get(f, ()):
            ref = a if isinstance(a, AxisRef) else AxisRef(a)
            degree *= ref.size(sizes[ref.name])
    return degree


def operand_split(rule: FactorRule, op: str, in_shapes, out_shapes, mesh: Mesh,
                  operand_specs: Sequence[Sharding | None]) -> int | None:
    """The most ways an operand's own layout splits the op's work (its sharding projected on the
    rule, made legal, ``split_degree``): the split the operands already carry, which a candidate
    need not undo. None when no operand's sharding fits the rule."""
    sizes = mesh.shape
    n = len(rule.operands)
    try:
        proj = Projection.build(list(operand_specs), [None] * len(rule.results), rule, sizes)
    except Exception:  # a sharding that does not fit the rule's dims
        return None
    names = [f for f, _ in rule.factors]
    degrees = []
    for t, tf in enumerate(proj.tensors[:n]):
        if t >= len(operand_specs) or operand_specs[t] is None:
            continue
        a = {names[f]: tuple(fs.axes) for f, fs in tf.factors.items() if fs.axes}
        degrees.append(split_degree(rule, mesh, legalize(rule, op, in_shapes, out_shapes, mesh, a)))
    return max(degrees, default=None)


def legalize(rule: FactorRule, op: str, in_shapes, out_shapes, mesh: Mesh, assignment: Assignment,
             reserved: Sequence[AxisRef] = ()) -> Assignment:
    """The largest part of ``assignment`` the op can run with: axes added factor by factor, axis
    by axis, each kept only if the projection stays valid."""
    key = (rule, op, tuple(map(tuple, in_shapes)), tuple(map(tuple, out_shapes)), mesh,
           tuple(sorted((f, tuple(a)) for f, a in assignment.items())), tuple(reserved))
    try:
        return dict(_legalize_cached(*key))
    except TypeError:  # an unhashable rule: no cache
        return _legalize(rule, op, in_shapes, out_shapes, mesh, assignment, reserved)


@lru_cache(maxsize=16384)
def _legalize_cached(rule, op, in_shapes, out_shapes, mesh, assignment, reserved):
    return tuple(_legalize(rule, op, in_shapes, out_shapes, mesh, dict(assignment), reserved).items())


def _legalize(rule: FactorRule, op: str, in_shapes, out_shapes, mesh: Mesh, assignment: Assignment,
              reserved: Sequence[AxisRef] = ()) -> Assignment:
    sizes = mesh.shape
    ok_factors = set(shardable_factors(rule, in_shapes, out_shapes, result_only=op in RESULT_ONLY))
    out: Assignment = {}
    used: list[AxisRef] = list(reserved)
    order = [f for f, _ in rule.factors]
    for f in order:
        axes = assignment.get(f, ())
        if not axes or f not in ok_factors:
            continue
        kept: list[AxisRef] = []
        for a in axes:
            if any(_clash(a, u, sizes) for u in used + kept):
                break
            trial = {**out, f: tuple(kept + [a])}
            try:
                project(rule, in_shapes, out_shapes, mesh, trial)
            except ValueError:
                break
            kept.append(a)
        if kept:
            out[f] = tuple(kept)
            used += kept
    return out

