"""DTensor's sharding propagation: the output placements of an op from its inputs' placements.

DTensor gives each op a strategy (torch's op strategies): an output placement per mesh dim from
the inputs' placements, redistributing an input only where the strategy demands. Here the rule
is read from the op registry's factor rules (``simshard.ops.factors``, the rules propagation and
the partitioner read), applied equation by equation to the program an eager op traced, each
mesh dim on its own:

* an input ``Shard(d)`` shards the factor of dim ``d``; the first sharded input's factor wins
  (the others are redistributed to it, as DTensor redistributes the later arguments);
* that factor in a result dim gives ``Shard`` of that dim (``_StridedShard`` where it is a minor
  factor of a merged dim, as ``a.t().reshape(n)``; ``Replicate`` where its blocks would not be
  whole rows of the merged dim); a reduction factor gives ``Partial`` of the rule's reduce op (a
  sharded contraction, ``sum`` over a sharded dim); a factor that needs replication (the dim of
  ``cumsum``, ``sort``, ``concatenate``) gives ``Replicate``;
* a ``Partial`` input passes through ops linear in it (``+`` / ``-`` of partials, ``*`` / ``@``
  by a replicated operand, reshapes, transposes, sums; a ``max`` partial through maxima) and is
  reduced (its input redistributed to ``Replicate``) before any other op.

The partitioner then runs the op with these output placements, moving data only where the
inputs' layouts do not already fit them.
"""

from __future__ import annotations

import math
from typing import Sequence

from simshard.ir.program import Literal, Program
from simshard.ops import get_op
from simshard.ops.factors import PASS_THROUGH, REDUCTION
from simshard.sharding.placements import Partial, Placement, Replicate, Shard, StridedShard

R = Replicate()
# ops linear in each Partial(sum) operand when every other operand is replicated (or also partial
# where ``ADDITIVE``); ops through which a partial of the named reduction passes unchanged
ADDITIVE = frozenset({"add", "sub"})
SCALING = {"mul": (0, 1), "div": (0,), "dot_general": (0, 1)}  # operand positions that may be partial
LINEAR = frozenset({"neg", "reshape", "transpose", "broadcast_in_dim", "reduce_sum", "slice", "convert",
                    "sharding_constraint", "stop_gradient", "pad"})
MONOTONE = {"max": frozenset({"reduce_max", "max", "reshape", "transpose", "broadcast_in_dim", "slice"}),
            "min": frozenset({"reduce_min", "min", "reshape", "transpose", "broadcast_in_dim", "slice"})}


def _partial_out(op: str, placed: Sequence[Placement]) -> Placement | None:
    """The result's Partial where the op is linear in its partial operands (None: reduce them first)."""
    partial = [(i, p) for i, p in enumerate(placed) if isinstance(p, Partial)]
    kinds = {p.reduce_op for _, p in partial}
    if len(kinds) != 1:
        return None
    kind = kinds.pop()
    others_replicated = all(p == R for p in placed if not isinstance(p, Partial))
    if kind == "sum":
        if op in ADDITIVE and others_replicated:
            return Partial("sum")
        if op in SCALING and len(partial) == 1 and partial[0][0] in SCALING[op] and others_replicated:
            return Partial("sum")
        if op in LINEAR and len(placed) == 1:
            return Partial("sum")
    if kind in MONOTONE and op in MONOTONE[kind] and others_replicated:
        return Partial(kind)
    return None


def _result_placement(rule, factor: str, result: int, n: int) -> Placement:
    """Where a sharded ``factor`` lands in result ``result`` (mesh dim of size ``n``)."""
    sizes = rule.sizes
    for d, factors in enumerate(rule.results[result]):
        if factor not in factors:
            continue
        k = factors.index(factor)
        major = math.prod(sizes[f] for f in factors[:k])
        minor = math.prod(sizes[f] for f in factors[k + 1:])
        if minor > 1 and sizes[factor] % n:
            return R  # uneven blocks of a merged dim are not whole rows of it
        return Shard(d) if major == 1 else StridedShard(d, major)
    return R


def _one_axis(eqn, rule, placed: Sequence[Placement], n: int) -> list[Placement]:
    """The results' placements on one mesh dim of size ``n`` from the operands' ``placed``."""
    outs = len(eqn.outputs)
    if any(isinstance(p, Partial) for p in placed):
        partial = _partial_out(eqn.op, placed)
        if partial is not None:
            return [partial] * outs
        placed = [R if isinstance(p, Partial) else p for p in placed]  # reduced first
    for i, p in enumerate(placed):
        if isinstance(p, Shard) and p.dim < len(rule.operands[i]) and rule.operands[i][p.dim]:
            factors = rule.operands[i][p.dim]
            factor = factors[0]
            if len(factors) > 1 and rule.sizes[factor] % n:
                return [R] * outs  # the blocks of a dim split into factors are not blocks of its first
            kind = rule.kind(factor)
            if kind == REDUCTION:
                return [Partial(rule.reduce_op if rule.reduce_op in ("sum", "max", "min", "prod") else "sum")] * outs
            if kind != PASS_THROUGH:
                return [R] * outs
            return [_result_placement(rule, factor, r, n) for r in range(outs)]
    for i, p in enumerate(placed):  # no Shard operand: stripes pass where a Shard would (DTensor
        # redistributes a strided operand to a plain Shard one, as for a.reshape(64) + b)
        if isinstance(p, StridedShard) and p.dim < len(rule.operands[i]) and len(rule.operands[i][p.dim]) == 1:
            return _strided_out(rule, rule.operands[i][p.dim][0], p.split_factor, outs)
    return [R] * outs


def _strided_out(rule, factor: str, split_factor: int, outs: int) -> list[Placement]:
    """Where stripes of a whole dim (one factor) land: the same stripes of a result dim made of
    that factor alone (a batch dim: a matmul's rows after a flatten, seed 002), ``Partial`` where
    the factor is reduced, ``Replicate`` otherwise (a merged or split dim, a dim needed whole)."""
    kind = rule.kind(factor)
    if kind == REDUCTION:
        return [Partial(rule.reduce_op if rule.reduce_op in ("sum", "max", "min", "prod") else "sum")] * outs
    if kind != PASS_THROUGH:
        return [R] * outs
    return [next((StridedShard(d, split_factor) for d, fs in enumerate(rule.results[r]) if list(fs) == [factor]), R)
            for r in range(outs)]


def output_placements(program: Program, inputs: Sequence[Sequence[Placement]], mesh_sizes: Sequence[int]) -> list[tuple]:
    """Each output's placements (one per mesh dim) for inputs placed ``inputs`` (module docstring).
    Inputs laid out by other placements (ragged, user ones) count as replicated here."""
    known = {v: tuple(p if isinstance(p, (Shard, Partial, StridedShard)) else R for p in ps) for v, ps in zip(program.inputs, inputs)}
    for eqn in program.eqns:
        operands = [known.get(v, (R,) * len(mesh_sizes)) if not isinstance(v, Literal) else (R,) * len(mesh_sizes)
                    for v in eqn.inputs]
        rule = get_op(eqn.op).factor_rule([v.aval for v in eqn.inputs], [v.aval for v in eqn.outputs], **dict(eqn.params))
        per_axis = [_one_axis(eqn, rule, [o[m] for o in operands], n) for m, n in enumerate(mesh_sizes)]
        for r, v in enumerate(eqn.outputs):
            known[v] = tuple(per_axis[m][r] for m in range(len(mesh_sizes)))
    return [known.get(v, (R,) * len(mesh_sizes)) if not isinstance(v, Literal) else (R,) * len(mesh_sizes)
            for v in program.outputs]


__all__ = ["output_placements"]
