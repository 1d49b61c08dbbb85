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
from .reads import Block, Reads

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
        self.temps: dict[int, list[tuple[int, float]]] = {}  # site -> (variable, buffer bytes)
        self.sizes: dict = {}
        self.price_cache: dict = {}
        self.loops: list[tuple[int, float]] = []  # (binary, seconds) of the loops' local copies
        self.groups: list[tuple[int, ...]] = []  # the one-hot sets of binaries: one chosen of each
        self.output_layouts: list[Dist] = []  # per output, the layout it is returned in
        self.reads = Reads()  # every read's reshard terms, priced once per layout (``reads``)
        self.held: dict[int, list[tuple[int, float]]] = {}  # site -> copies kept there (with a budget)
        self.gathered: list[tuple[int, list]] = []  # (body scope, terms): stacked inputs a loop holds whole
        for k in graph.free:
            self.dist[k] = self.choose_layout(graph.values[k], k in graph.stacked)
        for i, site in enumerate(graph.ops):
            self.add_op(site)
        for link in graph.links:
            if link.alias:
                self.alias(link)
        for link in graph.links:
            if link.iterations:
                self.loop_cost(link)
        for i, site in enumerate(graph.ops):
            self.read_operands(i, site)
        self.read_links()
        self.read_outputs(ties)
        self.reads.price(self.model)
        self.memory_start = self.model.row_count  # rows from here on are the memory budget's
        self.model.plain_rows = self.memory_start  # ``fixing`` only without them
        self.budget_rows: list[int] = []  # the rows bounded by the budget (``set_budget``)
        self.unbudgeted = None  # the optimum without the budget's rows, once solved (``incumbent``)
        self.family = None  # the whole-mesh family's optimum without the budget's rows (``incumbent``)
        if budget is not None:
            self.memory_rows(budget)

    def relayout(self, s: Sharding, link) -> Sharding:
        """The target's layout of a link from the source's: stacked, sliced or the same. A slice
        of a stacked input is of the layout the loop reads it in: its stacked dim gathered whole
        and its pending sums reduced first (``partition.loops``)."""
        if link.lifted:
            return self.costs.intern(lift(s))
        return self.costs.intern(drop_leading(held_whole(s))) if link.sliced else s

    def alias(self, link) -> None:
        """The target laid out as the source; a stacked input read by a loop pays, once per scan,
        for its stacked dim gathered and its pending sums reduced (``held_whole``)."""
        dist = self.dist[link.target] = {}
        source, aval = self.dist[link.source], self.graph.values[link.source]
        for s, vs in source.items():
            dist.setdefault(self.relayout(s, link), []).extend(vs)
        if link.sliced:
            held, need = {s: self.costs.intern(held_whole(s)) for s in source}, {}
            for s, vs in source.items():
                need.setdefault(held[s], []).extend(vs)
                price = link.weight * self.costs.seconds(s, held[s], aval) * SCALE
                self.reads.add(link.source, link.weight, s, held[s], price, [(v, 1) for v in vs])
                if held[s] is not s:  # the loop's whole copy, held while it runs
                    self.gathered.append((link.target[0], [(v, self.bytes(held[s], aval)) for v in vs]))
            self.edges.append(Edge(link.source, source, need, aval, link.weight, None))

    def loop_cost(self, link) -> None:
        """What a scan's loop moves in local memory each iteration, as the estimate counts it: a
        stacked input's block read and its slice written (``xs``), a slice read and written into a
        stacked output (``ys``: three slices), a carry copied (two blocks). These are layout ops
        (``dynamic_slice``, ``dynamic_update_slice``, ``stop_gradient``), timed as the estimate
        times them (``Work.seconds``: nothing on a device class, whose kernels fold them into
        their loads; their bytes on a roofline device)."""
        src, aval, tgt = self.dist[link.source], self.graph.values[link.source], self.graph.values[link.target]
        if link.lifted:  # a slice written into a stacked output (of its own layout) reads and writes the slice
            src, aval = {drop_leading(t): vs for t, vs in self.dist[link.target].items()}, aval
        for s, vs in src.items():
            # a stacked input's slice reads the whole block; a carry is copied
            whole = 2 * self.bytes(s, aval) if link.lifted else self.bytes(self.relayout(s, link), tgt)
            nbytes = self.bytes(held_whole(s) if link.sliced else s, aval) + whole
            seconds = link.weight * link.iterations * Work(0, nbytes, "layout").seconds(self.device)
            for v in vs:
                self.model.add_cost(v, seconds * SCALE)
                self.loops.append((v, seconds))

    def choose_layout(self, aval: Aval, stacked: bool = False) -> Dist:
        """A free value's layouts, one binary each (``stacked``: its leading dim whole)."""
        specs = [self.costs.intern(s) for s in value_specs(aval, self.mesh) if not (stacked and s.dims[0].axes)]
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
            need = self.dist[link.target]
            if link.lifted:  # a stacked output's slice
                need = {self.costs.intern(drop_leading(t)): vs for t, vs in need.items()}
            self.edge(link.source, need, link.weight, None)

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
        temps = self.temps.setdefault(site, []) if site is not None else []
        srcs, needs = list(src.items()), list(need.items())
        seconds, size = self.prices(tuple(src), tuple(need), aval)
        price = seconds * (weight * SCALE)
        k, n = price.shape
        if k == 1 or n == 1:  # one end fixed: the terms are the other end's binaries
            for i, (s, svars) in enumerate(srcs):
                for j, (t, tvars) in enumerate(needs):
                    vs = tvars if k == 1 else svars
                    self.reads.add(key, weight, s, t, price[i, j], [(v, 1) for v in vs], site, size[j])
                    temps += [(v, size[j]) for v in vs] if t is not s else []
            return
        cells = m.vars(np.zeros(k * n), binary=False, unit=True) + np.arange(k * n).reshape(k, n)
        svars, nvars = [vs for _, vs in srcs], [vs for _, vs in needs]
        rows = [np.repeat(np.arange(k), n), np.repeat(np.arange(k), [len(vs) for vs in svars]),
                k + np.tile(np.arange(n), k), k + np.repeat(np.arange(n), [len(vs) for vs in nvars])]
        cols = [cells.ravel(), np.concatenate([np.asarray(vs) for vs in svars]),
                cells.ravel(), np.concatenate([np.asarray(vs) for vs in nvars])]
        coeffs = [np.ones(k * n), -np.ones(len(rows[1])), np.ones(k * n), -np.ones(len(rows[3]))]
        m.rows(np.concatenate(rows), np.concatenate(cols), np.concatenate(coeffs), [0] * (k + n), [0] * (k + n))
        src_layouts, need_layouts = tuple(s for s, _ in srcs), tuple(t for t, _ in needs)
        self.reads.add_block(Block(key, weight, src_layouts, need_layouts, price, cells, site, size))
        moved = (np.array([id(s) for s in src_layouts])[:, None] != np.array([id(t) for t in need_layouts])[None, :]).ravel()
        temps.extend(zip(cells.ravel()[moved].tolist(), np.tile(size, k)[moved].tolist()))

    def prices(self, src: tuple[Sharding, ...], need: tuple[Sharding, ...], aval: Aval):
        """The seconds of moving ``aval`` from each of ``src`` to each of ``need`` (a matrix) and
        each need's block bytes; cached per layouts and shape (a
        value read alike by several ops, a chain of element-wise ops, is priced once)."""
        key = (tuple(map(id, src)), tuple(map(id, need)), aval.shape, aval.dtype.itemsize)
        hit = self.price_cache.get(key)
        if hit is None:
            price = np.array([[self.costs.seconds(s, t, aval) for t in need] for s in src])
            size = np.array([float(self.bytes(t, aval)) for t in need])
            hit = self.price_cache[key] = (price, size)
        return hit

    def bytes(self, s: Sharding, aval: Aval) -> int:
        key = (id(s), aval.shape, aval.dtype.itemsize)
        if key not in self.sizes:
            self.sizes[key] = local_bytes(s, aval)
        return self.sizes[key]

    def set_budget(self, budget: int) -> None:
        """Every memory row's bound set to ``budget`` bytes."""
        for r in self.budget_rows:
            self.model.ub[r] = budget + 0.5

    def loop_copies(self) -> dict[int, list[tuple[int, float]]]:
        """Site -> (binary, bytes) of the stacked inputs gathered whole for a loop the site runs in."""
        out: dict[int, list[tuple[int, float]]] = {}
        for i, site in enumerate(self.graph.ops):
            scope, chain = site.scope, set()
            while scope in self.graph.bodies:
                chain.add(scope)
                scope = self.graph.bodies[scope][0]
            for body, terms in self.gathered:
                if body in chain:
                    out.setdefault(i, []).extend(terms)
        return out

    def memory_rows(self, budget: int) -> None:
        self.held = self.reads.held(self.model, [p.site for p in self.graph.points])  # copies kept for later readers
        inside = self.loop_copies()
        blocks: dict[Key, int] = {}  # value -> a continuous variable equal to its block's bytes
        for point in self.graph.points:
            terms = list(self.temps.get(point.site, ())) + self.held.get(point.site, []) + inside.get(point.site, [])
            for key in point.live:
                if key not in blocks:
                    blocks[key] = self.block_var(key)
                terms.append((blocks[key], 1.0))
            # whole bytes: the half absorbs the solver's tolerances
            self.budget_rows.append(self.model.row(terms, 0, budget + 0.5))

    def block_var(self, key: Key) -> int:
        """A continuous variable equal to the bytes of ``key``'s block under its layout (a row
        defines it): the memory rows read it, not the value's layout binaries, so a value live
        at many points puts one term in each of their rows, not one per candidate of its producer."""
        aval = self.graph.values[key]
        block = self.model.var(0.0, binary=False)
        terms = [(block, 1.0)]
        for s, vs in self.dist[key].items():
            terms += [(v, -float(self.bytes(s, aval))) for v in vs]
        self.model.row(terms, 0, 0)
        return block


def held_whole(s: Sharding) -> Sharding:
    """A stacked input as a loop holds it: its leading dim whole, no pending sums."""
    if not s.unreduced and not s.dims[0].axes:
        return s
    return Sharding(s.mesh, ((),) + tuple(d.axes for d in s.dims[1:]))


def chosen(dist: Dist, values) -> Sharding:
    """The layout whose binaries sum to one in ``values`` (else the largest sum)."""
    for s, vs in dist.items():
        if sum(values[v] for v in vs) > 0.5:
            return s
    return max(dist, key=lambda s: sum(values[v] for v in dist[s]))


__all__ = ["Edge", "OpChoice", "Search", "chosen"]
