"""User-priority propagation (Shardy's ``UserPriorityPropagationPass``), the outermost loop.

Every dim sharding carries a priority (``p0`` when none is written). First, every dim with a
priority above 0 is made closed and empty and its axes are added to the tensor's replicated
axes, and op-priority propagation runs with what is left. Then, priority by priority in
increasing order, the original dims of that priority are restored (and their axes removed from
``replicated``) and propagation runs again. So a lower-priority sharding is never overwritten
by a higher one, but once released it may still be extended (``{"b", ?}p1`` can become
``{"b", "a", ?}``). Priorities are dropped from the shardings as they are released.
"""

from __future__ import annotations

from collections import defaultdict

from ..sharding.axes import merge_adjacent
from ..sharding.dims import Sharding
from ..sharding.dim_sharding import DimSharding
from .engine import PropagationContext, propagate_any
from .graph import Graph, State
from .op_priority import op_priority_pass
from .provenance import Provenance


def _held_back(original: Sharding, above: int) -> tuple:
    """``original``'s replicated axes plus the axes of its dims with a priority above ``above``,
    in mesh order, consecutive sub-axes merged (``"x":(1)2`` on one held-back dim and
    ``"x":(2)2`` on another are replicated as ``"x"``: a Sharding lists sub-axes maximal)."""
    refs = list(original.replicated)
    for d in original.dims:
        if (d.priority or 0) > above:
            refs += d.axes
    order = {n: i for i, n in enumerate(original.mesh.axis_names)}
    refs.sort(key=lambda r: (order.get(r.name, len(order)), r.pre_size()))
    return merge_adjacent(refs, original.mesh.shape)


def initial_sharding(s: Sharding) -> Sharding:
    """p0 dims lose their priority; other dims become closed and empty, their axes replicated."""
    dims = []
    for d in s.dims:
        if (d.priority or 0) == 0:
            dims.append(DimSharding(d.axes, d.is_open))
        else:
            dims.append(DimSharding((), False))
    return Sharding(s.mesh, tuple(dims), _held_back(s, 0), s.unreduced, s.reduce_op)


def released_sharding(current: Sharding, original: Sharding, priority: int) -> Sharding:
    """Restore the dims of ``original`` with this priority (without the priority); only the
    dims still held back (priority above this one) keep their axes replicated."""
    dims = list(current.dims)
    for i, d in enumerate(original.dims):
        if (d.priority or 0) == priority:
            dims[i] = DimSharding(d.axes, d.is_open)
    return Sharding(current.mesh, tuple(dims), _held_back(original, priority), current.unreduced, current.reduce_op)


def run_user_priority(
    graph: Graph, state: State, conservative: bool = False, prov: Provenance | None = None, strategy: str = "aggressive"
) -> None:
    """User-priority propagation over ``graph`` (in place on ``state``); see :func:`user_priority_pass`."""
    user_priority_pass(PropagationContext(graph, state, strategy, propagate_any, conservative, prov))


def user_priority_pass(ctx: PropagationContext) -> None:
    """Op-priority propagation with the dims of priority above 0 held back, then once more per
    priority as its dims are released (see the module docstring)."""
    state, prov = ctx.state, ctx.provenance
    per_priority: dict[int, list] = defaultdict(list)
    for key in state.keys():
        s = state.get(key)
        if s is None:
            continue
        for p in sorted({d.priority for d in s.dims if (d.priority or 0) > 0}):
            per_priority[p].append((key, s))
        state.set(key, initial_sharding(s))
    if prov is not None:
        prov.stage = "p0, "
    op_priority_pass(ctx)
    for p in sorted(per_priority):
        for key, original in per_priority[p]:
            state.set(key, released_sharding(state.get(key), original, p))
        if prov is not None:
            prov.stage = f"p{p}, "
        op_priority_pass(ctx)
    if prov is not None:
        prov.stage = ""
