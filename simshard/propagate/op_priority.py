"""Op-priority propagation (Shardy's ``OpPriorityPropagationPass``): five cumulative stages, each
a full aggressive run; at stage k an op may propagate in the union of the directions stages
0..k allow it:

0. pass-through ops (elementwise incl. sharding constraints, reshape, transpose; dynamic
   (update-)slice forward only), but only if no non-scalar operand has several uses (so that a
   value used twice does not get one reshard per use);
1. the same ops regardless of uses;
2. every op, but only along pass-through factors; broadcast_in_dim backward only;
3. every factor, broadcast_in_dim still backward only;
4. everything.
"""

from __future__ import annotations

from dataclasses import replace

from ..ops.factors import PASS_THROUGH as PASS_THROUGH_FACTOR
from .direction import Direction
from .engine import DirectionFn, PropagationContext, propagate_any, run_context
from .graph import BROADCAST, ELEMENTWISE, FORWARD_ONLY, PASS_THROUGH, Graph, Node, State
from .provenance import Provenance


def _by_uses(graph: Graph, node: Node, allow_multi_use: bool) -> Direction:
    if allow_multi_use:
        return Direction.BOTH
    multi = any(not graph.is_scalar(o) and graph.has_multiple_uses(o) for o in node.operands if o is not None)
    return Direction.NONE if multi else Direction.BOTH


def _pass_through_op(graph: Graph, node: Node, allow_multi_use: bool) -> Direction:
    if node.category in (ELEMENTWISE, PASS_THROUGH):
        return _by_uses(graph, node, allow_multi_use)
    if node.category == FORWARD_ONLY:
        return _by_uses(graph, node, allow_multi_use) & Direction.FORWARD
    return Direction.NONE


def _only_pass_through_factors(graph: Graph, node: Node, factor: int) -> Direction:
    if node.rule is not None and node.rule.kind(node.rule.factors[factor][0]) != PASS_THROUGH_FACTOR:
        return Direction.NONE
    return Direction.BACKWARD if node.category == BROADCAST else Direction.BOTH


def _any_but_broadcast_forward(graph: Graph, node: Node, factor: int) -> Direction:
    return Direction.BACKWARD if node.category == BROADCAST else Direction.BOTH


STAGES = (
    lambda g, n, f: _pass_through_op(g, n, False),
    lambda g, n, f: _pass_through_op(g, n, True),
    _only_pass_through_factors,
    _any_but_broadcast_forward,
    lambda g, n, f: Direction.BOTH,
)
STAGE_NAMES = (
    "pass-through ops, single use",
    "pass-through ops",
    "pass-through factors",
    "all factors, broadcast backward",
    "everything",
)


def stage_direction(graph: Graph, stage: int, outer: DirectionFn = propagate_any) -> DirectionFn:
    def direction(node: Node, factor: int) -> Direction:
        d = Direction.NONE
        for fn in STAGES[: stage + 1]:
            d |= fn(graph, node, factor)
        return d & outer(node, factor)

    return direction


def run_op_priority(
    graph: Graph,
    state: State,
    conservative: bool = False,
    prov: Provenance | None = None,
    outer: DirectionFn = propagate_any,
    strategy: str = "aggressive",
) -> None:
    """Op-priority propagation over ``graph`` (in place on ``state``); see :func:`op_priority_pass`."""
    op_priority_pass(PropagationContext(graph, state, strategy, outer, conservative, prov))


def op_priority_pass(ctx: PropagationContext) -> None:
    """The five stages, each a full run under ``ctx`` with the stage's directions (within those
    ``ctx`` allows); the provenance names the stage its records come from."""
    prov = ctx.provenance
    prefix = prov.stage if prov is not None else ""
    for stage in range(len(STAGES)):
        if prov is not None:
            prov.stage = f"{prefix}op-priority stage {stage} ({STAGE_NAMES[stage]})"
        run_context(replace(ctx, direction_fn=stage_direction(ctx.graph, stage, ctx.direction_fn)))
    if prov is not None:
        prov.stage = prefix
