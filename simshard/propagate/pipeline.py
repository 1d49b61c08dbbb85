"""The import and export steps around user-priority propagation (Shardy's propagation pipeline).

Import (the part that matters for a single function without calls):

* *apply sharding constraints*: a fully closed constraint whose input has no sharding yet, and
  whose input is not also used by a constraint asking for something else, is copied onto the
  input before propagation (so the constraint's input is what the user pinned, not only its
  result). Shardy's extra rewiring of constraint chains is not reproduced.

Export:

* function inputs and outputs are trimmed to their longest evenly dividing prefix, and open
  I/O dims lose their sub-axes (frameworks cannot express those at the boundary);
* every sharding is closed and loses its explicitly replicated axes.
"""

from __future__ import annotations

import math

from ..sharding.dims import Sharding
from ..sharding.dim_sharding import DimSharding
from . import axis_math as am
from .graph import Graph, ResultRef, State
from .provenance import Provenance

CONSTRAINT_OPS = ("sharding_constraint",)


def _fully_closed(s: Sharding) -> bool:
    return all(not d.is_open for d in s.dims)


def apply_sharding_constraints(graph: Graph, state: State, prov: Provenance | None = None, labels=None) -> None:
    for node in graph.nodes:
        if node.op not in CONSTRAINT_OPS or not node.operands or node.operands[0] is None:
            continue
        src, target = node.operands[0], state.get(node.results[0])
        if target is None or state.get(src) is not None or not _fully_closed(target):
            continue
        others = [n for n in graph.nodes if n.op in CONSTRAINT_OPS and src in n.operands and n is not node]
        if any(state.get(n.results[0]) != target for n in others):
            continue
        state.set(src, target)
        if prov is not None:
            label = labels(node.results[0]) if labels else f"sharding_constraint #{node.index}"
            prov.annotate(src, target, label)


def evenly_sharded(s: Sharding, shape) -> Sharding:
    """The longest prefix of each dim's axes that divides the dim (a sub-axis may end it)."""
    sizes = s.mesh.shape
    dims = []
    for d, n in zip(s.dims, shape):
        if n % am.total_size(d.axes, sizes) == 0:
            dims.append(d)
            continue
        remaining, axes = n, []
        for a in d.axes:
            g = math.gcd(am.size(a, sizes), remaining)
            if g == 1:
                break
            if g == am.size(a, sizes):
                axes.append(a)
                remaining //= g
            else:
                axes.append(am.make(a.name, a.pre_size(), g, sizes))
                break
        dims.append(DimSharding(tuple(axes), d.is_open, d.priority))
    return Sharding(s.mesh, tuple(dims), s.replicated, s.unreduced, s.reduce_op)


def without_open_sub_axes(s: Sharding) -> Sharding:
    dims = []
    for d in s.dims:
        if not d.is_open:
            dims.append(d)
            continue
        axes = []
        for a in d.axes:
            if a.sub is not None:
                break
            axes.append(a)
        dims.append(DimSharding(tuple(axes), d.is_open, d.priority))
    return Sharding(s.mesh, tuple(dims), s.replicated, s.unreduced, s.reduce_op)


def closed(s: Sharding) -> Sharding:
    return Sharding(s.mesh, tuple(DimSharding(d.axes, False, d.priority) for d in s.dims), (), s.unreduced, s.reduce_op)


def export(graph: Graph, state: State, inputs) -> None:
    io = [(k, graph.shapes[k]) for k in inputs] + [(ResultRef(i), graph.shapes[k]) for i, k in enumerate(graph.outputs)]
    for key, shape in io:
        s = state.get(key)
        if s is not None:
            state.set(key, without_open_sub_axes(evenly_sharded(s, shape)))
    for key in state.keys():
        s = state.get(key)
        if s is not None:
            state.set(key, closed(s))
