"""The plan on one mesh: the structured path (``greedy`` moves, ``realize``d) against the exchange.

Pending reductions the target does not keep come first (a pending sum that the target holds as a
pending average is rescaled locally); then the greedy walk of moves, each checked on the layouts
(a move that does not apply is banned and the next one asked for); then, from the state where no
reduction is left, the exchange and the target's new pending reductions. The cheaper of the two
tails wins (ties go to the structured one); ``alts`` records both totals.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ...errors import ShardingError
from ...sharding.dims import Sharding
from .atoms import State, refine
from .exchange import plan_exchange
from .generic import generic_plan
from .greedy import Move, next_move, pending_plan
from .plan import Route, Step, common_count, layout_of
from .realize import realize

MAX_STEPS = 64


def same_mesh_plan(source_spec: Sharding, target_spec: Sharding, shape, item) -> Route:
    """The steps from ``source_spec`` to ``target_spec`` (one mesh) and the bytes of each path tried (``alts``)."""
    mesh = source_spec.mesh
    table = refine(mesh, [source_spec, target_spec])
    if table is None:
        return Route(generic_plan(source_spec, target_spec, shape, item), {"generic": None})
    current, target = State.of(source_spec, table), State.of(target_spec, table)
    steps: list[Step] = []
    current = _rescaled(current, target, steps, shape, item, mesh)
    walk = _greedy_walk(current, target, steps, shape, item, mesh)
    reduced = walk.reduced
    if walk.failed and pending_plan(reduced, target)[0]:  # pragma: no cover - an all-reduce always applies
        raise ShardingError("no-plan", f"no way to reduce {source_spec} towards {target_spec}")
    greedy_bytes = None if walk.failed else sum(s.bytes for s in steps[walk.split:])
    alts = {"structured": greedy_bytes}
    # the exchange from the reduced state, then new pending reductions locally
    create = pending_plan(reduced, target)[1]
    exchanged = State(target.dims, frozenset(set(target.unreduced) - create), target.reduce_op)
    lower_bound = _lower_bound(reduced.sharding(mesh), exchanged.sharding(mesh), shape, item)
    if greedy_bytes is not None and greedy_bytes <= lower_bound:
        return Route(steps, alts)
    tail = _exchange_tail(reduced, exchanged, target, shape, item, mesh)
    alts["exchange"] = sum(s.bytes for s in tail)
    if greedy_bytes is not None and greedy_bytes <= alts["exchange"]:
        return Route(steps, alts)
    return Route(steps[:walk.split] + tail, alts)


def _rescaled(current: State, target: State, steps: list[Step], shape, item, mesh) -> State:
    """A pending sum the target holds as a pending average (or the reverse) of g-times-larger
    contributions, rescaled locally (only for g a power of two, where scaling by g or 1/g is
    exact): the step appended to ``steps``, the new state returned."""
    g = 1
    for a in current.unreduced:
        g *= mesh.axis_size(a)
    if current.unreduced and current.unreduced == target.unreduced and\
            {current.reduce_op, target.reduce_op} == {"sum", "avg"} and g & (g - 1) == 0:
        nxt = State(current.dims, current.unreduced, target.reduce_op)
        steps.append(_rescale(current.sharding(mesh), nxt.sharding(mesh), shape, item, mesh, current))
        return nxt
    return current


class _Walk(NamedTuple):
    """Where the greedy walk ended: ``failed`` (no move applies, or too many steps), and the
    state once no reduction was left (``reduced``) with the number of steps before it (``split``)."""

    failed: bool
    split: int
    reduced: State


def _greedy_walk(current: State, target: State, steps: list[Step], shape, item, mesh) -> _Walk:
    """Append the greedy path's steps from ``current`` towards ``target`` to ``steps``."""
    banned: set = set()
    split = None  # (index into steps, state) once no reduction is left
    failed = False
    while current != target:
        if split is None and not pending_plan(current, target)[0]:
            split = (len(steps), current)
        m = next_move(current, target, mesh, frozenset(banned))
        if m is None or len(steps) >= MAX_STEPS:
            failed = True
            break
        st = realize(m, current.sharding(mesh), m.after.sharding(mesh), shape, item, mesh)
        if st is None:
            banned.add(m.signature)
            continue
        steps.append(st)
        current = m.after
        banned = set()
    if split is None:
        split = (len(steps), current)
    return _Walk(failed, *split)


def _exchange_tail(reduced: State, exchanged: State, target: State, shape, item, mesh) -> list[Step]:
    """The exchange from ``reduced`` to ``exchanged`` (the target less its new pending
    reductions), then those reductions made pending locally."""
    tail = []
    src_spec = reduced.sharding(mesh)
    if reduced != exchanged:
        ex = plan_exchange(src_spec, exchanged.sharding(mesh), shape, item)
        if ex is None:  # pragma: no cover - every element has a holder
            raise ShardingError("no-plan", f"no exchange from {src_spec} to {exchanged.sharding(mesh)}")
        tail.append(ex)
    if exchanged != target:
        atoms = tuple(a for a in target.unreduced if a not in exchanged.unreduced)
        st = realize(Move("unreduce", target, atoms), exchanged.sharding(mesh), target.sharding(mesh), shape, item, mesh)
        tail.append(st)
    return tail


def _rescale(before, after, shape, item, mesh, C) -> Step:
    """The local step multiplying each contribution by the group size (sum -> avg) or dividing."""
    g = 1
    for a in C.unreduced:
        g *= mesh.axis_size(a)
    factor = float(g) if C.reduce_op == "sum" else 1.0 / g
    z = {d: 0 for d in mesh.device_ids}
    return Step("rescale", before, after, shape, item, reduce_op=after.reduce_op, sent=z, received=z, minimum=z, data=factor)


def _lower_bound(A, B, shape, item) -> int:
    """Bytes every device must receive at least: the elements of its new block it does not hold."""
    LA, LB = layout_of(A, shape), layout_of(B, shape)
    if LA.boxes is not None and LB.boxes is not None and np.array_equal(LA.boxes.ids, LB.boxes.ids):
        a, b = LA.boxes, LB.boxes  # the overlap of two ranges per dim, all devices at once
        have = np.clip(np.minimum(a.hi, b.hi) - np.maximum(a.lo, b.lo), 0, None).prod(axis=1)
        return int((b.sizes.prod(axis=1) - have).sum()) * item
    total = 0
    # keyed by identity within this call (the two layouts hold the arrays alive): numpy arrays do
    # not hash, and devices holding one block share its tuple of index arrays
    lacking: dict[tuple[int, int], int] = {}  # by block: devices holding one block share its tuple
    common: dict[tuple[int, int], int] = {}  # by index arrays, which blocks share too
    for d in LB.devices:
        mine, held = LB.index_map[d], LA.index_map[d]
        key = (id(mine), id(held))
        if key not in lacking:
            have = 1
            for a, b in zip(mine, held):
                pair = (id(a), id(b))
                if pair not in common:
                    common[pair] = common_count(a, b)
                have *= common[pair]
            lacking[key] = math.prod(len(ix) for ix in mine) - have
        total += lacking[key] * item
    return total
