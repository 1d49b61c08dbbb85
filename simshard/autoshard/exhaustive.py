"""Every strategy of a search, priced one by one: the check of the integer program.

``exhaustive(search)`` walks the product of every one-hot choice of the search (each op's
candidate, each free value's layout) and prices each combination directly, without the
program's linearisation: compute of each op as chosen, the reshard seconds between each value's
layout and each layout its readers read it in (once per layout: the partitioner keeps the copy), and the memory at every live point (the blocks live there and the
reshard buffers of the op's operands, the stacked inputs a loop gathers whole; a copy kept
between two readers is the model's ``held``, not counted here). Its optimum must equal the
solver's. Exponential: for small programs only (``limit`` combinations at most).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .model import Search, chosen
from .reads import moves


@dataclass(frozen=True)
class Enumerated:
    seconds: float  # the least step time of a strategy within the budget (inf: none fits)
    values: np.ndarray | None  # its binaries
    count: int  # combinations priced
    fitting: int  # of which within the budget


def exhaustive(search: Search, budget: int | None = None, limit: int = 2_000_000) -> Enumerated:
    """The cheapest strategy of ``search`` by enumeration (module docstring)."""
    total = int(np.prod([len(g) for g in search.groups], dtype=np.float64))
    if total > limit:
        raise ValueError(f"exhaustive: {total:,} strategies, more than the limit of {limit:,}")
    best, best_values, fitting = float("inf"), None, 0
    values = np.zeros(search.model.size)
    for picks in itertools.product(*search.groups):
        values[:] = 0
        values[list(picks)] = 1
        if budget is not None and peak_bytes(search, values) > budget:
            continue
        fitting += 1
        t = seconds(search, values)
        if t < best:
            best, best_values = t, values.copy()
    return Enumerated(best, best_values, total, fitting)


def seconds(search: Search, values) -> float:
    """Compute, loops' copies and reshards of one combination, priced directly."""
    t = sum(seconds * values[v] for v, seconds in search.loops)
    for op in search.ops:
        t += sum(op.site.weight * c * values[v] for v, c in zip(op.vars, op.compute))
    for move in moves(search.edges, values, chosen):  # a layout made once serves every reader
        t += move.weight * search.costs.seconds(move.src, move.dst, move.aval)
    return t


def peak_bytes(search: Search, values) -> int:
    """The most bytes live at any point of one combination, reshard buffers included."""
    buffers: dict[int, int] = {}
    for e in search.edges:
        s, t = chosen(e.src, values), chosen(e.dst, values)
        if e.site is not None and s != t:
            buffers[e.site] = buffers.get(e.site, 0) + search.bytes(t, e.aval)
    peak, inside = 0, search.loop_copies()
    for point in search.graph.points:
        live = sum(search.bytes(chosen(search.dist[k], values), search.graph.values[k]) for k in point.live)
        kept = sum(c * values[v] for v, c in inside.get(point.site, []))  # stacked inputs a loop holds whole
        peak = max(peak, live + buffers.get(point.site, 0) + int(round(kept)))
    return peak
