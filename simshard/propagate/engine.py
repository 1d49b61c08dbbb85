"""One propagation run over a whole graph (Shardy's ``BasicPropagationPassImpl::propagate``).

* Each op: project its operand and result shardings onto its rule's factors, run the factor
  propagation strategy (basic or aggressive) with each factor's direction, project back, and keep
  the tensors whose sharding really changed. Ops without a rule, without any sharded tensor, or
  whose tensors use different meshes (or a mesh without axes) are skipped.
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
from dataclasses import replace
from typing import Callable, Hashable, Sequence

from ..sharding.mesh import Mesh
from ..ops.factors import PASS_THROUGH, PERMUTATION
from ..sharding.dims import Sharding
from . import axis_math as am
from .aggressive import propagate_aggressive
from .basic import propagate_basic
from .direction import Direction
from .graph import Graph, Node, ResultRef, State, identity_rule
from .projection import Projection, tensor_mappings
from .provenance import Provenance

FACTOR_STRATEGIES = {"basic": propagate_basic, "aggressive": propagate_aggressive}

DirectionFn = Callable[[Node, int], Direction]


def propagate_any(node: Node, factor: int) -> Direction:
    return Direction.BOTH


def _mesh_key(mesh: Mesh):
    return (mesh.axis_names, mesh.axis_sizes, mesh.device_ids)


def common_mesh(shardings: Sequence[Sharding | None]) -> Mesh | None:
    """The one mesh all given shardings use (meshes without axes are ignored), or None when
    there is none or there are several."""
    mesh = None
    for s in shardings:
        if s is None or not s.mesh.axis_names:
            continue
        if mesh is None:
            mesh = s.mesh
        elif _mesh_key(s.mesh) != _mesh_key(mesh):
            return None
    return mesh


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
):
    """Propagate through one op. Returns ``(new_operands, new_results, projection_before,
    projection_after, mesh)``; ``new_*`` hold the changed shardings (None where unchanged), or
    the whole result is None when the op was skipped."""
    mesh = common_mesh(list(operand_shardings) + list(result_shardings))
    if mesh is None:
        return None
    sizes = mesh.shape
    proj = Projection.build(operand_shardings, result_shardings, rule, sizes)
    before = proj.copy()
    factor_sizes = [n for _, n in rule.factors]
    blocked = {i for i, (f, _) in enumerate(rule.factors) if f in rule.blocked}

    def local_direction(f: int) -> Direction:
        return Direction.NONE if f in blocked else direction_of(f)

    upd_ops, upd_res = FACTOR_STRATEGIES[strategy](proj, local_direction, factor_sizes, sizes, conservative, elementwise)
    if not any(upd_ops) and not any(upd_res):
        return [None] * len(operand_shardings), [None] * len(result_shardings), before, proj, mesh
    after = proj.to_shardings(rule, mesh)
    n = len(operand_shardings)
    new_ops, new_res = [], []
    for flags, olds, news, out in ((upd_ops, operand_shardings, after[:n], new_ops), (upd_res, result_shardings, after[n:], new_res)):
        for flag, old, new in zip(flags, olds, news):
            changed = flag and not ((old is None and not _has_axes(new)) or new == old)
            out.append(new if changed else None)
    return new_ops, new_res, before, proj, mesh


def _record(prov: Provenance | None, rule, before: Projection, after: Projection, tensor_keys, index: int, target, node_index, op: str, sizes):
    """Provenance for tensor ``index`` of an op: the axes each factor gained and where from."""
    if prov is None:
        return
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


def propagate_node(node: Node, state: State, strategy: str, direction_fn: DirectionFn, conservative: bool, prov: Provenance | None) -> list[Hashable]:
    """Propagate through one op of the graph; returns the keys whose sharding changed.

    An op with several rules (``ss.register_rule``) propagates through each on the current
    shardings and keeps the outcome that leaves its operands and results the most sharded (the
    sum of their block counts), the op's own rule first among equals: every rule is a true
    equality of the op, so any of them is a valid way through it, and a rule under which the
    current shardings conflict simply carries less."""
    if node.rule is None:
        return []
    ops = [state.get(k) if k is not None else None for k in node.operands]
    res = [state.get(k) for k in node.results]
    if not node.alternatives:
        return _propagate_rule(node, ops, res, state, strategy, direction_fn, conservative, prov)
    best, best_score = None, -1
    for r in (node.rule,) + node.alternatives:
        candidate = replace(node, rule=r, alternatives=())
        out = _outcome(candidate, ops, res, strategy, direction_fn, conservative)
        if out is None:
            continue
        new_ops, new_res = out[0], out[1]
        after = [n if n is not None else o for n, o in zip(list(new_ops) + list(new_res), ops + res)]
        score = _sharded_size(after)
        if score > best_score:
            best, best_score = candidate, score
    if best is None:
        return []
    return _propagate_rule(best, ops, res, state, strategy, direction_fn, conservative, prov)


def _outcome(node: Node, ops, res, strategy: str, direction_fn: DirectionFn, conservative: bool):
    rule = node.rule
    names = [f for f, _ in rule.factors]
    if node.barrier is not None:
        direction_of = lambda f: node.barrier  # noqa: E731  (barriers ignore op priorities)
    elif conservative:
        direction_of = lambda f: Direction.NONE if conservative_blocked(node, names[f]) else direction_fn(node, f)  # noqa: E731
    else:
        direction_of = lambda f: direction_fn(node, f)  # noqa: E731
    return propagate_tensors(rule, ops, res, direction_of, strategy, conservative and node.barrier is None, node.elementwise)


def _propagate_rule(node: Node, ops, res, state: State, strategy: str, direction_fn: DirectionFn, conservative: bool, prov: Provenance | None) -> list[Hashable]:
    rule = node.rule
    out = _outcome(node, ops, res, strategy, direction_fn, conservative)
    if out is None:
        return []
    new_ops, new_res, before, after, mesh = out
    keys = list(node.operands) + list(node.results)
    changed = []
    for i, new in enumerate(list(new_ops) + list(new_res)):
        if new is None or keys[i] is None:
            continue
        state.set(keys[i], new)
        changed.append(keys[i])
        _record(prov, rule, before, after, keys, i, keys[i], node.index, node.op, mesh.shape)
    return changed


def propagate_func_results(graph: Graph, state: State, strategy: str, prov: Provenance | None) -> None:
    """Exchange shardings between each returned value and its function result (identity rule,
    both directions)."""
    for i, key in enumerate(graph.outputs):
        rule = identity_rule(graph.shapes[key])
        rkey = ResultRef(i)
        out = propagate_tensors(rule, [state.get(key)], [state.get(rkey)], lambda f: Direction.BOTH, strategy)
        if out is None:
            continue
        (new_op,), (new_res,), before, after, mesh = out
        keys = [key, rkey]
        for j, (k, new) in enumerate(((key, new_op), (rkey, new_res))):
            if new is not None:
                state.set(k, new)
                _record(prov, rule, before, after, keys, j, k, None, "return", mesh.shape)


def run(
    graph: Graph,
    state: State,
    strategy: str = "aggressive",
    direction_fn: DirectionFn = propagate_any,
    conservative: bool = False,
    prov: Provenance | None = None,
) -> None:
    """One full propagation run (in place on ``state``)."""
    propagate_func_results(graph, state, strategy, prov)
    stack = list(range(len(graph.nodes)))[::-1]
    waiting = set(stack)

    def push(i: int) -> None:
        if i not in waiting:
            waiting.add(i)
            stack.append(i)

    while stack:
        i = stack.pop()
        waiting.discard(i)
        for key in propagate_node(graph.nodes[i], state, strategy, direction_fn, conservative, prov):
            owner = graph.producer.get(key)
            if owner is not None and owner != i:
                push(owner)
            for user in reversed(graph.uses.get(key, [])):
                if user != i:
                    push(user)
    propagate_func_results(graph, state, strategy, prov)
