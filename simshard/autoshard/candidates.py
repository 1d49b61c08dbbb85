"""What the search chooses between: the layouts of a value and the strategies of an op.

A value's candidates are its tensor-dimension shardings over whole mesh axes: each axis splits
one dim or none (axes of one dim in mesh order), every split dividing its dim evenly. Axes of
size 1 split nothing: a layout naming one is the layout without it, so candidates name only the
axes of two or more devices (``split_axes``; each size-1 axis would multiply a value's layouts by
its rank plus one, and an op's candidates by its factors plus one, all duplicates).

An op's candidates are assignments of mesh axes to its rule's factors (Shardy's factor rules,
``ops/factors.py``): each axis to one shardable factor (``ops.check.shardable_factors``) or to
none, projected onto every operand and result (``ops.check.project``). A sharded reduction
factor leaves the results pending (``unreduced``) over its axes; the reshard to what a consumer
reads prices the all-reduce or reduce-scatter (``costs``). Splits must divide their factors
evenly, so every candidate runs bit for bit like the whole op.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ..ir.program import Aval, Eqn
from ..ops import get_op
from ..ops.check import project, shardable_factors
from ..ops.factors import FactorRule
from ..sharding.dims import Sharding
from ..sharding.mesh import Mesh

# ops that build their result's block from their params, so a factor of the result alone may be
# split (a broadcast's new dims, iota, full): partition.assign's list
RESULT_ONLY = frozenset({"broadcast_in_dim", "iota", "full", "constant"})


@dataclass(frozen=True)
class OpCandidate:
    """One strategy of an op: factor -> mesh axes, and the shardings it gives each tensor."""

    assignment: tuple[tuple[str, tuple[str, ...]], ...]
    operands: tuple[Sharding, ...]
    results: tuple[Sharding, ...]

    def describe(self, rule: FactorRule | None) -> str:
        """``"i=x k=y"`` (factor sizes from the rule), or ``"replicated"``."""
        if not self.assignment:
            return "replicated"
        sizes = rule.sizes if rule is not None else {}
        return " ".join(f"{f}[{sizes.get(f, '?')}]={'*'.join(a)}" for f, a in self.assignment)


def split_axes(mesh: Mesh) -> tuple[str, ...]:
    """The axes of ``mesh`` that split something (size 2 or more), in mesh order."""
    return tuple(a for a in mesh.axis_names if mesh.shape[a] > 1)


def value_specs(aval: Aval, mesh: Mesh) -> tuple[Sharding, ...]:
    """Every even tensor-dimension sharding of ``aval`` over whole axes of ``mesh`` (replicated
    first), size-1 axes left out (``split_axes``)."""
    out = []
    names = split_axes(mesh)
    for choice in itertools.product(range(aval.ndim + 1), repeat=len(names)):
        dims = [[] for _ in range(aval.ndim)]
        for axis, d in zip(names, choice):
            if d < aval.ndim:
                dims[d].append(axis)
        if all(n % math.prod(mesh.shape[a] for a in dd) == 0 for n, dd in zip(aval.shape, dims)):
            out.append(Sharding(mesh, tuple(tuple(d) for d in dims)))
    return tuple(out)


def lift(s: Sharding) -> Sharding:
    """``s`` with a leading replicated dim: a stacked value's layout from one slice's."""
    return Sharding(s.mesh, ((),) + tuple(d.axes for d in s.dims), unreduced=s.unreduced, reduce_op=s.reduce_op)


def drop_leading(s: Sharding) -> Sharding:
    """A stacked layout's slice (its leading dim dropped)."""
    return Sharding(s.mesh, tuple(d.axes for d in s.dims[1:]), unreduced=s.unreduced, reduce_op=s.reduce_op)


def local_bytes(s: Sharding, aval: Aval) -> int:
    """Bytes of the largest block a device holds of ``aval`` laid out as ``s``."""
    n = 1
    for d, size in enumerate(aval.shape):
        n *= -(-size // s.shard_count(d))
    return n * aval.dtype.itemsize


def rule_of(eqn: Eqn) -> FactorRule | None:
    """The op's first factor rule, or None for an op without one (it runs replicated)."""
    ins = [x.aval for x in eqn.inputs]
    outs = [v.aval for v in eqn.outputs]
    try:
        return get_op(eqn.op).factor_rule(ins, outs, **eqn.kw)
    except Exception:  # an op the registry cannot rule on these shapes: no sharded strategy
        return None


def op_candidates(eqn: Eqn, mesh: Mesh) -> tuple[FactorRule | None, tuple[OpCandidate, ...]]:
    """The op's rule and its candidates (the replicated one first; see the module docstring)."""
    ins = [tuple(x.aval.shape) for x in eqn.inputs]
    outs = [tuple(v.aval.shape) for v in eqn.outputs]
    rule = rule_of(eqn)
    if rule is None:
        return None, (_replicated(eqn, mesh),)
    factors = shardable_factors(rule, ins, outs, result_only=eqn.op in RESULT_ONLY)
    sizes = rule.sizes
    seen, out = set(), []
    names = split_axes(mesh)
    for choice in itertools.product(range(len(factors) + 1), repeat=len(names)):
        assignment: dict[str, tuple[str, ...]] = {}
        for axis, f in zip(names, choice):
            if f < len(factors):
                assignment[factors[f]] = assignment.get(factors[f], ()) + (axis,)
        if any(sizes[f] % math.prod(mesh.shape[a] for a in ax) for f, ax in assignment.items()):
            continue
        try:
            operands, results = project(rule, ins, outs, mesh, assignment)
        except ValueError:  # not a sharding this op runs with (project names why)
            continue
        key = (operands, results)
        if key not in seen:
            seen.add(key)
            out.append(OpCandidate(tuple(sorted(assignment.items())), operands, results))
    return rule, tuple(out) or (_replicated(eqn, mesh),)


def _replicated(eqn: Eqn, mesh: Mesh) -> OpCandidate:
    return OpCandidate((), tuple(Sharding.replicated_on(mesh, len(x.aval.shape)) for x in eqn.inputs),
                       tuple(Sharding.replicated_on(mesh, v.aval.ndim) for v in eqn.outputs))
