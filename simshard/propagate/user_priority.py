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

from ..sharding.dims import DimSharding, Sharding
from . import axis_math as am
from .graph import Graph, State
from .op_priority import run_op_priority
from .provenance import Provenance


def initial_sharding(s: Sharding) -> Sharding:
    """p0 dims lose their priority; other dims become closed and empty, their axes replicated."""
    dims, replicated = [], list(s.replicated)
    for d in s.dims:
        if (d.priority or 0) == 0:
            dims.append(DimSharding(d.axes, d.is_open))
        else:
            replicated += d.axes
            dims.append(DimSharding((), False))
    return Sharding(s.mesh, tuple(dims), tuple(replicated), s.unreduced, s.reduce_op)


def released_sharding(current: Sharding, original: Sharding, priority: int) -> Sharding:
    """Restore the dims of ``original`` with this priority (without the priority)."""
    dims = list(current.dims)
    seen = []
    for i, d in enumerate(original.dims):
        if (d.priority or 0) == priority:
            dims[i] = DimSharding(d.axes, d.is_open)
            seen += d.axes
    sizes = current.mesh.shape
    replicated = tuple(a for a in current.replicated if not any(am.contains(b, a, sizes) for b in seen))
    return Sharding(current.mesh, tuple(dims), replicated, current.unreduced, current.reduce_op)


def run_user_priority(
    graph: Graph, state: State, conservative: bool = False, prov: Provenance | None = None, strategy: str = "aggressive"
) -> None:
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
    run_op_priority(graph, state, conservative, prov, strategy=strategy)
    for p in sorted(per_priority):
        for key, original in per_priority[p]:
            state.set(key, released_sharding(state.get(key), original, p))
        if prov is not None:
            prov.stage = f"p{p}, "
        run_op_priority(graph, state, conservative, prov, strategy=strategy)
    if prov is not None:
        prov.stage = ""
