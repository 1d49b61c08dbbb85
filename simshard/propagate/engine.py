"""One propagation run over a whole graph (Shardy's ``BasicPropagationPassImpl::propagate``).

* Each op: project its operand and result shardings onto its rule's factors, run the factor
  propagation strategy (basic or aggressive) with each factor's direction, project back, and keep
  the tensors whose sharding really changed. Ops without a rule, without any sharded tensor, or
  whose tensors use different meshes (or a mesh without axes) are skipped; the provenance
  records each skipped op and why (``Provenance.skipped``).
* Order: a worklist visiting ops in program order; whenever a value's sharding changes, its
  producer and its users are pushed back (a stack with set semantics, like MLIR's greedy
  rewriter driving Shardy: the most recently pushed op runs next, an op already waiting keeps
  its place; users are pushed in reverse use order so the earliest user runs first).
  As in Shardy, the op just visited is not pushed back by its own updates: an op that uses one
  value twice and updates it through both operands keeps the last write (``dot(x, x)`` may
  need a second sweep to settle; Shardy's debug builds warn about exactly that).
* Before and after the sweep, function-result shardings are exchanged with the returned values
  through an identity rule (a closed output sharding constrains the returned value, and the
  returned value's sharding reaches the output).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Hashable, NamedTuple, Sequence

from ..sharding.mesh import Mesh
from ..ops.factors import PASS_THROUGH, PERMUTATION
from ..sharding.dims import Sharding
from . import axis_math as am
from .aggressive import propagate_aggressive
from .basic import propagate_basic
from .direction import Direction
from .graph import Graph, Node, ResultRef, State, identity_rule
from .projection import Projection, tensor_mappings
from .provenance import Provenance, SkipReason

FACTOR_STRATEGIES = {"basic": propagate_basic, "aggressive": propagate_aggressive}

DirectionFn = Callable[[Node, int], Direction]

def propagate_any(node: Node, factor: int) -> Direction:
    """The direction function that lets every factor of every op propagate both ways."""
    return Direction.BOTH


@dataclass(frozen=True)
class PropagationContext:
    """What one propagation run passes to every op it visits: the graph and its (mutable)
    state, the factor strategy, the direction each factor may propagate in (the op-priority
    stage's), whether the run is conservative, and where provenance is recorded."""

    graph: Graph
    state: State
    strategy: str = "aggressive"
    direction_fn: DirectionFn = propagate_any
    conservative: bool = False
    provenance: Provenance | None = None


class OpOutcome(NamedTuple):
    """Propagation through one op: the changed shardings (None where unchanged) of its operands
    and results, the factor projection before and after, and the mesh; or, when the op was
    skipped, ``skipped`` says why (and the rest is empty)."""

    operands: tuple[Sharding | None, ...]
    results: tuple[Sharding | None, ...]
    before: Projection | None
    after: Projection | None
    mesh: Mesh | None
    skipped: SkipReason | None = None

    @staticmethod
    def skip(reason: SkipReason) -> "OpOutcome":
        """The outcome of an op nothing propagated through, and why."""
        return OpOutcome((), (), None, None, None, reason)

    def all_shardings(self, operands: Sequence[Sharding | None], results: Sequence[Sharding | None]) -> list[Sharding | None]:
        """The op's shardings after this outcome, given those before (operands then results)."""
        old = list(operands) + list(results)
        return [n if n is not None else o for n, o in zip(self.operands + self.results, old)]


class MeshOf(NamedTuple):
    """The one mesh of an op's tensors, or None and why there is none."""

    mesh: Mesh | None
    why_not: SkipReason | None


def mesh_of(shardings: Sequence[Sharding | None]) -> MeshOf:
    """The one mesh all given shardings use (meshes without axes are ignored), or None and
    why there is none (no sharding on a mesh with axes, or several meshes)."""
    mesh = None
    for s in shardings:
        if s is None or not s.mesh.axis_names:
            continue
        if mesh is None:
            mesh = s.mesh
        elif not s.mesh.same_layout(mesh):
            return MeshOf(None, SkipReason.MESHES_DIFFER)
    return MeshOf(mesh, None if mesh is not None else SkipReason.NO_MESH)


def common_mesh(shardings: Sequence[Sharding | None]) -> Mesh | None:
    """The one mesh all given shardings use (meshes without axes are ignored), or None when
    there is none or there are several."""
    return mesh_of(shardings).mesh


def _has_axes(s: Sharding) -> bool:
    return any(d.axes for d in s.dims)


def conservative_blocked(node: Node, factor_name: str) -> bool:
    """Factors conservative propagation does not use: permutation factors (slice, pad, conv
    windows) and a concatenate's concat dim."""
    kind = node.rule.kind(factor_name)
    if kind == PERMUTATION:
        return True
    return node.op == "concatenate" and kind != PASS_THROUGH


def propagate_tensors(
    rule,
    operand_shardings: Sequence[Sharding | None],
    result_shardings: Sequence[Sharding | None],
    direction_of: Callable[[int], Direction],
    strategy: str,
    conservative: bool = False,
    elementwise: bool = False,
) -> OpOutcome:
    """Propagate through one op; see :class:`OpOutcome`."""
    mesh, why_not = mesh_of(list(operand_shardings) + list(result_shardings))
    if mesh is None:
        return OpOutcome.skip(why_not)
    sizes = mesh.shape
    proj = Projection.build(operand_shardings, result_shardings, rule, sizes)
    before = proj.copy()
    factor_sizes = [n for _, n in rule.factors]
    blocked = {i for i, (f, _) in enumerate(rule.factors) if f in rule.blocked}

    def local_direction(f: int) -> Direction:
        return Direction.NONE if f in blocked else direction_of(f)

    upd_ops, upd_res = FACTOR_STRATEGIES[strategy](proj, local_direction, factor_sizes, sizes, conservative, elementwise)
    if not any(upd_ops) and not any(upd_res):
        return OpOutcome((None,) * len(operand_shardings), (None,) * len(result_shardings), before, proj, mesh)
    after = proj.to_shardings(rule, mesh)
    n = len(operand_shardings)
    changed: list[list[Sharding | None]] = [[], []]
    for flags, olds, news, out in ((upd_ops, operand_shardings, after[:n], changed[0]), (upd_res, result_shardings, after[n:], changed[1])):
        for flag, old, new in zip(flags, olds, news):
            grew = flag and not ((old is None and not _has_axes(new)) or new == old)
            out.append(new if grew else None)
    return OpOutcome(tuple(changed[0]), tuple(changed[1]), before, proj, mesh)


def _record(prov: Provenance | None, rule, outcome: OpOutcome, tensor_keys, index: int, node_index, op: str):
    """Provenance for tensor ``index`` of an op: the axes each factor gained and where from."""
    if prov is None:
        return
    before, after, sizes = outcome.before, outcome.after, outcome.mesh.shape
    target = tensor_keys[index]
    mappings = tensor_mappings(rule)
    names = [f for f, _ in rule.factors]
    old_t, new_t = before.tensors[index], after.tensors[index]
    for f, fs in new_t.factors.items():
        old_axes = old_t.factors[f].axes if f in old_t.factors else []
        added = fs.axes[len(old_axes) :] if len(fs.axes) > len(old_axes) else []
        if fs.axes != old_axes and not added:
            added = fs.axes[-1:]
        if not added:
            continue
        dim = next(d for d, fl in enumerate(mappings[index]) if f in fl)
        source = None
        for j, t in enumerate(before.tensors):
            if j == index or tensor_keys[j] is None or tensor_keys[j] == target or f not in t.factors:
                continue
            if any(am.overlaps(a, b, sizes) for a in added for b in t.factors[f].axes):
                sdim = next(d for d, fl in enumerate(mappings[j]) if f in fl)
                source = (tensor_keys[j], sdim)
                break
        prov.propagated(target, dim, added, node_index, op, names[f], source, sizes)


def _sharded_size(shardings: Sequence[Sharding | None]) -> int:
    """How sharded a set of tensors is: the sum over tensors of their number of blocks."""
    return sum(math.prod(s.shard_count(d) for d in range(s.rank)) for s in shardings if s is not None)


def propagate_node(node: Node, ctx: PropagationContext) -> list[Hashable]:
    """Propagate through one op of the graph; returns the keys whose sharding changed.

    An op with several rules (``ss.register_rule``) propagates through each on the current
    shardings and keeps the outcome that leaves its operands and results the most sharded (the
    sum of their block counts), the op's own rule first among equals: every rule is a true
    equality of the op, so any of them is a valid way through it, and a rule under which the
    current shardings conflict simply carries less. A skipped op is recorded, with the reason,
    in the provenance."""
    if node.rule is None:
        _skipped(ctx, node, SkipReason.NO_RULE)
        return []
    ops = [ctx.state.get(k) if k is not None else None for k in node.operands]
    res = [ctx.state.get(k) for k in node.results]
    best = node
    if node.alternatives:
        best, best_score, first_skip = None, -1, None
        for r in (node.rule,) + node.alternatives:
            candidate = replace(node, rule=r, alternatives=())
            out = _outcome(candidate, ops, res, ctx)
            if out.skipped is not None:
                first_skip = first_skip or out.skipped
                continue
            score = _sharded_size(out.all_shardings(ops, res))
            if score > best_score:
                best, best_score = candidate, score
        if best is None:
            _skipped(ctx, node, first_skip)
            return []
    return _propagate_rule(best, ops, res, ctx)


def _skipped(ctx: PropagationContext, node: Node, reason: SkipReason) -> None:
    if ctx.provenance is not None:
        ctx.provenance.skip(node.index, node.op, reason)


def _outcome(node: Node, ops, res, ctx: PropagationContext) -> OpOutcome:
    """Propagation through ``node``'s rule under the run's directions (a barrier's own
    direction; in conservative mode, none along blocked factors)."""
    names = [f for f, _ in node.rule.factors]
    if node.barrier is not None:
        direction_of = lambda f: node.barrier  # noqa: E731  (barriers ignore op priorities)
    elif ctx.conservative:
        direction_of = lambda f: Direction.NONE if conservative_blocked(node, names[f]) else ctx.direction_fn(node, f)  # noqa: E731
    else:
        direction_of = lambda f: ctx.direction_fn(node, f)  # noqa: E731
    conservative = ctx.conservative and node.barrier is None
    return propagate_tensors(node.rule, ops, res, direction_of, ctx.strategy, conservative, node.elementwise)


def _propagate_rule(node: Node, ops, res, ctx: PropagationContext) -> list[Hashable]:
    """Apply ``node``'s (single) rule: write the changed shardings to the state, record them."""
    out = _outcome(node, ops, res, ctx)
    if out.skipped is not None:
        _skipped(ctx, node, out.skipped)
        return []
    keys = list(node.operands) + list(node.results)
    changed = []
    for i, new in enumerate(out.operands + out.results):
        if new is None or keys[i] is None:
            continue
        ctx.state.set(keys[i], new)
        changed.append(keys[i])
        _record(ctx.provenance, node.rule, out, keys, i, node.index, node.op)
    return changed


def propagate_func_results(ctx: PropagationContext) -> None:
    """Exchange shardings between each returned value and its function result (identity rule,
    both directions)."""
    state = ctx.state
    for i, key in enumerate(ctx.graph.outputs):
        rule = identity_rule(ctx.graph.shapes[key])
        rkey = ResultRef(i)
        out = propagate_tensors(rule, [state.get(key)], [state.get(rkey)], lambda f: Direction.BOTH, ctx.strategy)
        if out.skipped is not None:
            continue
        keys = [key, rkey]
        for j, new in enumerate(out.operands + out.results):
            if new is not None:
                state.set(keys[j], new)
                _record(ctx.provenance, rule, out, keys, j, None, "return")


def run(
    graph: Graph,
    state: State,
    strategy: str = "aggressive",
    direction_fn: DirectionFn = propagate_any,
    conservative: bool = False,
    prov: Provenance | None = None,
) -> None:
    """One full propagation run (in place on ``state``)."""
    run_context(PropagationContext(graph, state, strategy, direction_fn, conservative, prov))


def run_context(ctx: PropagationContext) -> None:
    """One full propagation run under ``ctx`` (in place on its state)."""
    graph = ctx.graph
    propagate_func_results(ctx)
    stack = list(range(len(graph.nodes)))[::-1]
    waiting = set(stack)

    def push(i: int) -> None:
        if i not in waiting:
            waiting.add(i)
            stack.append(i)

    while stack:
        i = stack.pop()
        waiting.discard(i)
        for key in propagate_node(graph.nodes[i], ctx):
            owner = graph.producer.get(key)
            if owner is not None and owner != i:
                push(owner)
            for user in reversed(graph.uses.get(key, [])):
                if user != i:
                    push(user)
    propagate_func_results(ctx)
