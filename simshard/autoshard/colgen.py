"""The search's linear relaxation by column generation: the transport cells are priced lazily.

Of the search's variables nearly all are transport cells (``model.Search.edge``: a cell per pair
of a value's layout and its reader's, up to 109 x 109 an edge on an 8 x 32 x 32 mesh), and of its
rows nearly all say a shared read's ``u`` is at least one read's cell (``reads.Reads.price``,
``u - e >= 0``: a *link row*). In an optimum almost every cell is zero. So the relaxation is
solved on a few of them (the *restricted* program, a live ``highspy`` model), and the others are
priced by their reduced costs under its duals; cells that would lower the objective are added
to the live model, whose simplex goes on from its basis (warm), until none would:

* a cell without a link row: its reduced cost ``d = c - A^T y`` (the rows present) is >= 0;
* the cells of one ``u`` without their link rows: give each absent link row the dual
  ``max(0, -d)`` (a link row's right-hand side is 0, so the dual objective does not change);
  that makes every such cell's reduced cost >= 0, and ``u``'s stays >= 0 while those duals sum
  to at most ``u``'s reduced cost under the rows present.

When neither finds a cell, those duals are feasible for the whole program and their objective is
the restricted optimum's: by weak duality it is the whole relaxation's optimum (exact, to
HiGHS's tolerance). Where that optimum is integral it is the search's optimum; else the
restricted program's branch and bound is kept only where it is within the gap of that bound
(proven optimal to the branch and bound's own tolerance); else None, and the caller solves the
whole program. The start: the cells a strategy of each one-hot set's cheapest binary needs (so
the restricted program is feasible), each layout's cheapest partner, and every cell moving
nothing.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import NamedTuple

import numpy as np

from ..errors import ShardingError
from .milp import LinearModel, Solution, branch_and_bound, quiet_highs, within_gap

TOLERANCE = 1e-6  # a reduced cost below minus this adds its cell (the objective is in microseconds)
ROUNDS = 400  # pricing rounds at most; then the whole program is solved (never hit in the benchmarks)


class Links(NamedTuple):
    """The link rows ``u - e >= 0``: per row, its ``u`` and its cell; per cell, its row (-1: none)."""

    rows: np.ndarray
    u: np.ndarray
    cell: np.ndarray
    of_cell: np.ndarray


def link_rows(a, lb: np.ndarray, ub: np.ndarray, lazy: np.ndarray) -> Links | None:
    """The link rows of ``a`` (CSR): two entries, +1 on a variable that is not a cell and -1 on a
    cell, ``0 <= . < inf``. None where another inequality names a cell with a coefficient of
    its own sign structure unknown here (then column generation does not apply)."""
    count = np.diff(a.indptr)
    two = np.flatnonzero((count == 2) & (lb == 0) & np.isinf(ub))
    first, second = a.indptr[two], a.indptr[two] + 1
    cols, vals = a.indices, a.data
    pick = np.where(lazy[cols[first]], first, second)
    other = np.where(lazy[cols[first]], second, first)
    ok = lazy[cols[pick]] & ~lazy[cols[other]] & (vals[pick] == -1) & (vals[other] == 1)
    rows, u, cell = two[ok], cols[other[ok]], cols[pick[ok]]
    of_cell = np.full(len(lazy), -1, dtype=np.int64)
    of_cell[cell] = np.arange(len(rows))
    if len(np.unique(cell)) != len(cell):
        return None  # a cell in two link rows: not the search's structure
    return Links(rows, u, cell, of_cell)


def one_hot_point(a, lb, ub, cost, integer, upper) -> np.ndarray | None:
    """A point of the binaries: in each one-hot row (``sum of binaries = 1``) its cheapest binary
    allowed, the others 0. None where a binary is in two such rows (not the search's structure)."""
    count = np.diff(a.indptr)
    rows = np.flatnonzero((lb == 1) & (ub == 1) & (count > 0))
    x = np.zeros(len(cost))
    seen = np.zeros(len(cost), dtype=bool)
    for r in rows:
        cols = a.indices[a.indptr[r]:a.indptr[r + 1]]
        if not np.all(integer[cols] == 1) or np.any(seen[cols]):
            continue
        seen[cols] = True
        open_ = cols[upper[cols] > 0]
        if len(open_):
            x[open_[np.argmin(cost[open_])]] = 1.0
    return x


def start_cells(a_eq, point: np.ndarray, lazy: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """The cells to start from: those the one-hot ``point`` moves through (each equality row's
    binaries at one: both its rows), each transport row's cheapest cell by ``weight``, and
    the cells of no weight (moving nothing)."""
    cells = np.flatnonzero(lazy)
    active = np.abs(a_eq @ point) > 0.5  # the transport rows whose binaries are chosen
    csc = a_eq[:, cells].tocsc()
    hit = np.asarray((csc != 0).T @ active.astype(np.float64)).ravel()
    rows_of = np.asarray((csc != 0).sum(axis=0)).ravel()
    need = (hit == rows_of) & (rows_of > 0)
    keep = need | (weight[cells] <= 0)
    coo = csc.tocoo()
    order = np.lexsort((weight[cells][coo.col], coo.row))
    first = np.r_[True, coo.row[order][1:] != coo.row[order][:-1]]
    keep[coo.col[order][first]] = True
    return cells[keep]


class Restricted:
    """The live restricted program: every variable but the cells, the cells added so far; every
    row but the link rows, those of the cells added (``highspy``, its basis kept between runs)."""

    def __init__(self, cost, upper, a, lb, ub, lazy: np.ndarray, links: Links, cells: np.ndarray, time_limit):
        import highspy

        self.highspy, self.cost, self.upper, self.links = highspy, cost, upper, links
        self.csc = a.tocsc()
        self.col_of = np.full(len(cost), -1, dtype=np.int64)
        self.row_of = np.full(a.shape[0], -1, dtype=np.int64)
        self.cols = np.flatnonzero(~lazy)
        self.rows = np.setdiff1d(np.arange(a.shape[0]), links.rows)
        self.col_of[self.cols] = np.arange(len(self.cols))
        self.row_of[self.rows] = np.arange(len(self.rows))
        self.h = quiet_highs(highspy)
        if time_limit is not None:
            self.h.setOptionValue("time_limit", float(time_limit))
        sub = self.csc[self.rows][:, self.cols].tocsc()
        inf = highspy.kHighsInf
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_, lp.col_cost_ = len(self.cols), len(self.rows), cost[self.cols]
        lp.col_lower_, lp.col_upper_ = np.zeros(len(self.cols)), np.where(np.isinf(upper[self.cols]), inf, upper[self.cols])
        lp.row_lower_ = np.nan_to_num(lb[self.rows], neginf=-inf, posinf=inf)
        lp.row_upper_ = np.nan_to_num(ub[self.rows], neginf=-inf, posinf=inf)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = sub.indptr, sub.indices, sub.data
        self.h.passModel(lp)
        self.add(cells)

    def add(self, cells: np.ndarray) -> None:
        """Cells as columns (their entries in the rows present), then their link rows."""
        sub = self.csc[:, cells].tocoo()
        present = self.row_of[sub.row] >= 0
        order = np.lexsort((sub.row[present], sub.col[present]))
        col, row, val = sub.col[present][order], self.row_of[sub.row[present]][order], sub.data[present][order]
        starts = np.searchsorted(col, np.arange(len(cells))).astype(np.int32)
        first = self.h.getNumCol()
        self.h.addCols(len(cells), self.cost[cells], np.zeros(len(cells)), np.full(len(cells), self.highspy.kHighsInf),
                       len(val), starts, row.astype(np.int32), val)
        self.col_of[cells] = first + np.arange(len(cells))
        self.cols = np.r_[self.cols, cells]
        linked = self.links.of_cell[cells] >= 0
        k = self.links.of_cell[cells[linked]]
        if not len(k):
            return
        index = np.c_[self.col_of[self.links.u[k]], self.col_of[cells[linked]]].ravel().astype(np.int32)
        value = np.tile([1.0, -1.0], len(k))
        self.row_of[self.links.rows[k]] = self.h.getNumRow() + np.arange(len(k))
        self.rows = np.r_[self.rows, self.links.rows[k]]
        self.h.addRows(len(k), np.zeros(len(k)), np.full(len(k), self.highspy.kHighsInf), len(value),
                       (2 * np.arange(len(k))).astype(np.int32), index, value)

    def run(self):
        """The restricted optimum (warm from the last basis): its status and solution."""
        self.h.run()
        self.h.setOptionValue("presolve", "off")  # else each later run presolves again and starts cold
        return self.h.getModelStatus(), self.h.getSolution()


class Pricing(NamedTuple):
    """What the pricing of the cells needs, computed once: the cells, their columns transposed
    (for ``A^T y``), and each linked cell's ``u``."""

    cells: np.ndarray
    columns: object
    u_of: np.ndarray


def pricing(a, lazy: np.ndarray, links: Links) -> Pricing:
    cells = np.flatnonzero(lazy)
    k = links.of_cell[cells]
    return Pricing(cells, a[:, cells].T.tocsr(), np.append(links.u, -1)[k])


def entering(r: Restricted, p: Pricing, solution, rows: int) -> np.ndarray:
    """The absent cells whose reduced cost, with the duals of the absent link rows chosen as the
    module docstring says, is negative: none means the restricted optimum is the whole one."""
    y = np.zeros(rows)
    y[r.rows] = solution.row_dual
    d = r.cost[p.cells] - p.columns @ y
    absent = r.col_of[p.cells] < 0
    alone = absent & (p.u_of < 0) & (d < -TOLERANCE)
    need = np.where(absent & (p.u_of >= 0), np.maximum(-d, 0.0), 0.0)
    col_dual = np.asarray(solution.col_dual)
    linked = p.u_of >= 0
    total = np.bincount(p.u_of[linked], weights=need[linked], minlength=len(r.cost))
    over = np.zeros(len(r.cost), dtype=bool)
    us = np.flatnonzero(total > 0)
    over[us] = total[us] > col_dual[r.col_of[us]] + TOLERANCE
    shared = linked & (need > TOLERANCE) & over[np.maximum(p.u_of, 0)]
    return p.cells[alone | shared]


def relax(cost, upper, a, lb, ub, lazy, links: Links, cells: np.ndarray, time_limit):
    """The whole relaxation's optimum through the restricted one: (restricted program, HiGHS's
    status, solution, rounds), or None where it did not converge within ``ROUNDS``."""
    r = Restricted(cost, upper, a, lb, ub, lazy, links, cells, time_limit)
    p = pricing(a, lazy, links)
    for round_ in range(ROUNDS):
        status, solution = r.run()
        if status != r.highspy.HighsModelStatus.kOptimal:
            return r, status, solution, round_
        new = entering(r, p, solution, a.shape[0])
        if not len(new):
            return r, status, solution, round_
        r.add(new)
    return None


def start_of(a, lb, ub, cost, integer, upper, lazy, links: Links) -> np.ndarray:
    """The cells the restricted program starts with (``start_cells``), weighed by their price:
    their own cost and, for a shared read, its ``u``'s."""
    point = one_hot_point(a, lb, ub, cost, integer, upper)
    cells = np.flatnonzero(lazy)
    k = links.of_cell[cells]
    weight = cost.copy()
    weight[cells[k >= 0]] += cost[links.u[k[k >= 0]]]
    return start_cells(a[np.flatnonzero(lb == ub)], point, lazy, weight)


def lazily(cost, integer, upper, constraint, lazy: np.ndarray, time_limit, gap: float) -> Solution | None:
    """The search's optimum with its cells priced lazily (module docstring), or None where that
    does not apply or proves nothing (the caller then solves the whole program)."""
    a, lb, ub = constraint.A.tocsr(), np.asarray(constraint.lb, float), np.asarray(constraint.ub, float)
    links = link_rows(a, lb, ub, lazy)
    if links is None:
        return None
    got = relax(cost, upper, a, lb, ub, lazy, links, start_of(a, lb, ub, cost, integer, upper, lazy, links),
                time_limit)
    if got is None or got[1] != got[0].highspy.HighsModelStatus.kOptimal:
        return None
    r, _, solution, rounds = got
    x, bound = np.asarray(solution.col_value), float(r.h.getInfo().objective_function_value)
    values = np.zeros(len(cost))
    values[r.cols] = x
    binaries = values[integer == 1]
    if np.all(np.abs(binaries - np.round(binaries)) < 1e-7):
        return Solution(np.round(values, 9), bound, f"the relaxation is integral ({rounds} rounds of pricing)", True)
    return restricted_optimum(r, integer, upper, a, lb, ub, x, bound, time_limit, gap)


def restricted_optimum(r: Restricted, integer, upper, a, lb, ub, x, bound, time_limit, gap) -> Solution | None:
    """The restricted program's integer optimum where it is within ``gap`` of the whole
    relaxation's ``bound`` (so optimal to the branch and bound's tolerance), else None."""
    from scipy.optimize import LinearConstraint

    cols, rows = r.cols, r.rows
    sub = [LinearConstraint(a[rows][:, cols], lb[rows], ub[rows])]
    relaxed = SimpleNamespace(x=x, fun=bound)
    found = within_gap(r.cost[cols], integer[cols], upper[cols], sub, relaxed, time_limit, gap)
    if found is None:
        try:
            found = branch_and_bound(r.cost[cols], integer[cols], upper[cols], sub, time_limit, gap, None)
        except ShardingError:
            return None
        if not found.optimal or found.objective - bound > gap * max(abs(found.objective), 1e-9):
            return None
    values = np.zeros(len(r.cost))
    values[cols] = found.values
    return Solution(values, found.objective, "within the gap of the whole relaxation (cells priced lazily)", True)


class LazyModel(LinearModel):
    """A ``LinearModel`` whose transport cells are marked (``cells``): a solve without a start,
    of the rows up to ``plain_rows`` (those before the memory budget's), prices them lazily
    (``lazily``); any other solve, or one that proves nothing, is the whole program's."""

    def __init__(self):
        super().__init__()
        self.lazy: list[tuple[int, int]] = []  # (first variable, count) of each block of cells
        self.plain_rows: int | None = None

    def cells(self, count: int) -> int:
        """A block of ``count`` transport cells (continuous, no cost): the first's index."""
        first = self.vars(np.zeros(count), binary=False)
        self.lazy.append((first, count))
        return first

    def solve(self, time_limit: float | None = None, gap: float = 1e-4, extra=(), upto: int | None = None,
              start: np.ndarray | None = None, allowed: np.ndarray | None = None) -> Solution:
        kept = self.row_count if upto is None else upto
        if start is None and self.lazy and self.plain_rows is not None and kept <= self.plain_rows:
            found = self.solve_lazily(time_limit, gap, extra, upto, allowed)
            if found is not None:
                return found
        return super().solve(time_limit, gap, extra, upto, start, allowed)

    def solve_lazily(self, time_limit, gap, extra, upto, allowed) -> Solution | None:
        constraints = self.constraints(extra, upto)
        if not constraints:
            return None
        integer, cost = self.integrality(), self.costs()
        upper = np.where(integer == 1, 1.0, np.inf)
        if allowed is not None:
            upper = np.where((integer == 1) & ~allowed, 0.0, upper)
        lazy = np.zeros(self.size, dtype=bool)
        for first, count in self.lazy:
            lazy[first:first + count] = True
        return lazily(cost, integer, upper, constraints[0], lazy, time_limit, gap)


__all__ = ["LazyModel", "Links", "Pricing", "Restricted", "entering", "lazily", "link_rows", "pricing", "relax",
           "one_hot_point", "restricted_optimum", "start_cells", "start_of"]
