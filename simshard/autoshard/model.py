"""The integer program of the search (Alpa's intra-op formulation, on factors).

* One binary per candidate strategy of each op (``candidates.op_candidates``) and per candidate
  layout of each free value (the program's inputs, a body's inputs), exactly one chosen of each.
  An op's candidate costs its compute seconds, times its weight (a body's iterations).
* A value's layout is a sum of binaries: its producer's candidates that give that layout (a
  free value's own binaries; a scan result's, the body output's, stacked; a body input's, the
  scan operand's, sliced where it is scanned).
* An edge joins a value's layout to the layout a consumer reads (an op's operand, a training
  step's parameter written back where it was read): continuous variables
  ``e[s, t]`` whose row sums are the value's layout binaries and whose column sums are the
  consumer's (or a body's carry from its end to its start, ``length - 1`` times), priced at the planner's reshard seconds from ``s`` to ``t``. With one-hot ends the
  transport polytope has one vertex, so ``e`` needs no integrality. An end with one layout needs
  no ``e`` at all (its cost falls on the other end's binaries).
* A scan's loop costs what it moves in local memory each iteration (``loop_cost``): the
  stacked inputs' blocks and slices, the stacked outputs', the carries'.
* Memory, when a budget is given: at every op of every scope, the blocks of the values live
  there (the enclosing scopes' too) plus the reshard buffers the op's operands need, at most the
  budget per device.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from ..ir.program import Aval
from ..report.compute import DeviceSpec, Work
from ..sharding.dims import Sharding
from ..sharding.mesh import Mesh
from .candidates import OpCandidate, drop_leading, lift, local_bytes, op_candidates, value_specs
from .costs import ReshardCosts, compute_seconds
from .graph import Graph, Key, OpSite
from .milp import LinearModel

SCALE = 1e6  # the objective in microseconds: the solver's tolerances are absolute

Dist = dict[Sharding, list[int]]  # a layout -> the binaries whose sum says it is chosen


@dataclass(frozen=True)
class OpChoice:
    """An op's candidates, their binaries and their (unweighted) compute seconds."""

    site: OpSite
    rule: object
    candidates: tuple[OpCandidate, ...]
    vars: tuple[int, ...]
    compute: tuple[float, ...]


@dataclass(frozen=True)
class Edge:
    """A value read somewhere: its layouts and the reader's, priced ``weight`` times."""

    source: Key
    src: Dist
    dst: Dist
    aval: Aval
    weight: int
    site: int | None  # the op reading it (None: a body input, a written-back output)


class Search:
    """The integer program of one program on one mesh (module docstring)."""

    def __init__(self, graph: Graph, mesh: Mesh, costs: ReshardCosts, device: DeviceSpec,
                 budget: int | None = None, ties: Sequence[tuple[int, int]] = ()):
        self.graph, self.mesh, self.costs, self.device = graph, mesh, costs, device
        self.model = LinearModel()
        self.dist: dict[Key, Dist] = {}
        self.free: dict[Key, tuple[tuple[Sharding, int], ...]] = {}
        self.ops: list[OpChoice] = []
        self.edges: list[Edge] = []
        self.temps: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}  # site -> (variables, buffer bytes)
        self.sizes: dict = {}
        self.price_cache: dict = {}
        self.loops: list[tuple[int, float]] = []  # (binary, seconds) of the loops' local copies
        self.groups: list[tuple[int, ...]] = []  # the one-hot sets of binaries: one chosen of each
        self.output_layouts: list[Dist] = []  # per output, the layout it is returned in
        for k in graph.free:
            self.dist[k] = self.choose_layout(graph.values[k])
        for i, site in enumerate(graph.ops):
            self.add_op(site)
        for link in graph.links:
            if link.alias:
                self.dist[link.target] = {self.relayout(s, link): v for s, v in self.dist[link.source].items()}
        for link in graph.links:
            if link.iterations:
                self.loop_cost(link)
        for i, site in enumerate(graph.ops):
            self.read_operands(i, site)
        self.read_links()
        self.read_outputs(ties)
        self.memory_start = self.model.row_count  # rows from here on are the memory budget's
        if budget is not None:
            self.memory_rows(budget)

    def relayout(self, s: Sharding, link) -> Sharding:
        """The target's layout of a link from the source's: stacked, sliced or the same."""
        if link.lifted:
            return self.costs.intern(lift(s))
        return self.costs.intern(drop_leading(s)) if link.sliced else s

    def loop_cost(self, link) -> None:
        """What a scan's loop moves in local memory each iteration, as the estimate counts it: a
        stacked input's block read and its slice written (``xs``), a slice read and written into a
        stacked output (``ys``: three slices), a carry copied (two blocks). These are layout ops
        (``dynamic_slice``, ``dynamic_update_slice``, ``stop_gradient``), timed as the estimate
        times them (``Work.seconds``: nothing on a device class, whose kernels fold them into
        their loads; their bytes on a roofline device)."""
        src, aval, tgt = self.dist[link.source], self.graph.values[link.source], self.graph.values[link.target]
        for s, vs in src.items():
            # a slice written into a stacked output reads and writes the slice; a stacked input's
            # slice reads the whole block; a carry is copied
            whole = 2 * self.bytes(s, aval) if link.lifted else self.bytes(self.relayout(s, link), tgt)
            nbytes = self.bytes(s, aval) + whole
            seconds = link.weight * link.iterations * Work(0, nbytes, "layout").seconds(self.device)
            for v in vs:
                self.model.add_cost(v, seconds * SCALE)
                self.loops.append((v, seconds))

    def choose_layout(self, aval: Aval) -> Dist:
        specs = [self.costs.intern(s) for s in value_specs(aval, self.mesh)]
        vars_ = self.one_hot(np.zeros(len(specs)))
        self.groups.append(tuple(vars_))
        return {s: [v] for s, v in zip(specs, vars_)}

    def one_hot(self, costs: np.ndarray) -> tuple[int, ...]:
        """Binaries of these costs, exactly one of them chosen."""
        first = self.model.vars(costs)
        vars_ = tuple(range(first, first + len(costs)))
        self.model.rows(np.zeros(len(vars_), dtype=np.int64), np.asarray(vars_), np.ones(len(vars_)), [1], [1])
        return vars_

    def add_op(self, site: OpSite) -> None:
        rule, cands = op_candidates(site.eqn, self.mesh)
        cands = tuple(replace(c, operands=tuple(map(self.costs.intern, c.operands)),
                              results=tuple(map(self.costs.intern, c.results))) for c in cands)
        seconds = tuple(compute_seconds(site.eqn, c, self.device) for c in cands)
        vars_ = self.one_hot(np.asarray(seconds) * (site.weight * SCALE))
        self.groups.append(vars_)
        self.ops.append(OpChoice(site, rule, cands, vars_, seconds))
        for r, key in enumerate(site.results):
            d = self.dist.setdefault(key, {})
            for c, v in zip(cands, vars_):
                d.setdefault(c.results[r], []).append(v)

    def read_operands(self, i: int, site: OpSite) -> None:
        choice = self.ops[i]
        for p, key in enumerate(site.operands):
            if key is None:
                continue
            need: Dist = {}
            for c, v in zip(choice.candidates, choice.vars):
                need.setdefault(c.operands[p], []).append(v)
            self.edge(key, need, site.weight, i)

    def read_links(self) -> None:
        for link in self.graph.links:
            if link.alias:
                continue
            self.edge(link.source, self.dist[link.target], link.weight, None)

    def read_outputs(self, ties: Sequence[tuple[int, int]]) -> None:
        """Outputs are read whole (no pending sum); a tied one where its input was read from."""
        tied = dict(ties)
        for j, key in enumerate(self.graph.outputs):
            if j in tied:
                need = self.dist[self.graph.inputs[tied[j]]]
            else:
                need = self.choose_layout(self.graph.values[key])
            self.output_layouts.append(need)
            self.edge(key, need, 1, None)

    def edge(self, key: Key, need: Dist, weight: int, site: int | None) -> None:
        """Price reading ``key`` as ``need`` asks: where both ends have several layouts, a block of
        transport cells (one per pair, row ``i`` summing to the source's ``i``-th layout, column
        ``j`` to the need's ``j``-th), added as whole arrays."""
        src, aval, m = self.dist[key], self.graph.values[key], self.model
        self.edges.append(Edge(key, src, need, aval, weight, site))
        price, moved, size = self.prices(tuple(src), tuple(need), aval)
        price = price * (weight * SCALE)
        svars, nvars = list(src.values()), list(need.values())
        k, n = price.shape
        if k == 1 or n == 1:  # one end fixed: the cost falls on the other end's binaries
            ends = nvars if k == 1 else svars
            prices, buffers = (price[0], moved[0]) if k == 1 else (price[:, 0], moved[:, 0])
            sizes = size if k == 1 else np.full(k, size[0])
            for vs, p, buffer, nbytes in zip(ends, prices, buffers, sizes):
                for v in vs:
                    m.add_cost(v, p)
                if buffer and site is not None:
                    self.temps.setdefault(site, []).append((np.asarray(vs), np.full(len(vs), nbytes)))
            return
        first = m.vars(price, binary=False)
        cells = first + np.arange(k * n).reshape(k, n)
        rows = [np.repeat(np.arange(k), n), np.repeat(np.arange(k), [len(vs) for vs in svars]),
                k + np.tile(np.arange(n), k), k + np.repeat(np.arange(n), [len(vs) for vs in nvars])]
        cols = [cells.ravel(), np.concatenate([np.asarray(vs) for vs in svars]),
                cells.ravel(), np.concatenate([np.asarray(vs) for vs in nvars])]
        coeffs = [np.ones(k * n), -np.ones(len(rows[1])), np.ones(k * n), -np.ones(len(rows[3]))]
        m.rows(np.concatenate(rows), np.concatenate(cols), np.concatenate(coeffs), [0] * (k + n), [0] * (k + n))
        if site is not None:
            self.temps.setdefault(site, []).append((cells[moved], np.broadcast_to(size, (k, n))[moved]))

    def prices(self, src: tuple[Sharding, ...], need: tuple[Sharding, ...], aval: Aval):
        """The seconds of moving ``aval`` from each of ``src`` to each of ``need`` (a matrix),
        which pairs move at all, and each need's block bytes; cached per layouts and shape (a
        value read alike by several ops, a chain of element-wise ops, is priced once)."""
        key = (tuple(map(id, src)), tuple(map(id, need)), aval.shape, aval.dtype.itemsize)
        hit = self.price_cache.get(key)
        if hit is None:
            price = np.array([[self.costs.seconds(s, t, aval) for t in need] for s in src])
            moved = np.array([[s is not t for t in need] for s in src], dtype=bool)
            size = np.array([float(self.bytes(t, aval)) for t in need])
            hit = self.price_cache[key] = (price, moved, size)
        return hit

    def bytes(self, s: Sharding, aval: Aval) -> int:
        key = (id(s), aval.shape, aval.dtype.itemsize)
        if key not in self.sizes:
            self.sizes[key] = local_bytes(s, aval)
        return self.sizes[key]

    def set_budget(self, budget: int) -> None:
        """Every memory row's bound set to ``budget`` bytes."""
        for r in range(self.memory_start, self.model.row_count):
            self.model.ub[r] = budget + 0.5

    def memory_rows(self, budget: int) -> None:
        for point in self.graph.points:
            cols, coeffs = self.memory_terms(point)
            self.model.rows(np.zeros(len(cols), dtype=np.int64), cols, coeffs, [0], [budget + 0.5])  # whole bytes: the half absorbs the solver's tolerances

    def memory_terms(self, point) -> tuple[np.ndarray, np.ndarray]:
        """The variables and bytes of what is live at ``point``: the blocks of its live values
        (each layout's binaries) and the reshard buffers its op's operands need."""
        cols = [v for v, _ in self.temps.get(point.site, ())]
        coeffs = [c for _, c in self.temps.get(point.site, ())]
        for key in point.live:
            aval = self.graph.values[key]
            for s, vs in self.dist[key].items():
                cols.append(np.asarray(vs))
                coeffs.append(np.full(len(vs), float(self.bytes(s, aval))))
        if not cols:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        return np.concatenate(cols).astype(np.int64), np.concatenate(coeffs)


def chosen(dist: Dist, values) -> Sharding:
    """The layout whose binaries sum to one in ``values`` (else the largest sum)."""
    for s, vs in dist.items():
        if sum(values[v] for v in vs) > 0.5:
            return s
    return max(dist, key=lambda s: sum(values[v] for v in dist[s]))


__all__ = ["Edge", "OpChoice", "Search", "chosen"]
