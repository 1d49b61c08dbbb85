"""The search's linear relaxation with its transport cells and shared-read rows given lazily.

Of the search's variables nearly all are transport cells (``model.Search.edge``: a cell per pair
of a value's layout and its reader's, up to 109 x 109 an edge on an 8 x 32 x 32 mesh), and of its
rows nearly all are shared reads (``reads.Reads.price``: ``u >= t_r``). In an optimum almost every
cell is zero and almost every shared row slack. So the relaxation is solved on a live
``highspy`` model holding a few of each (the *restricted* program), whose dual simplex goes on
from its basis each round:

* the shared rows are substituted (``cuts``: ``u = z + avg(t)``, an exact change of variables
  that spreads each shared price over its reads' terms) and left out: a relaxation;
* a cell (or a ``z``) left out whose reduced cost under the restricted duals is negative is
  added (column generation); where none is, the restricted optimum is that of every column on
  the rows present. Else a lower bound on it is the restricted optimum plus, per edge, the least
  reduced cost of its cells (an edge's cells sum to at most one, a ``z`` is at most one at any
  optimum): where that is within ``PROVEN`` (relative) the degenerate tail of entering cells that
  lower nothing is cut short. Where any cell enters, those of reduced cost under ``MARGIN`` enter
  with it (they would in the next rounds: on the 7B step over 8 x 32 x 32, 6 rounds of pricing
  instead of more than 9, each a few seconds);
* then every substituted row is checked at the solution: those violated are added (cuts), and
  the rounds go on. None violated: the solution is feasible for the whole program and optimal
  (to the bound) for a relaxation of it, so it is the whole relaxation's optimum.

Where that optimum is integral it is the search's (each ``u`` given back as ``z + avg(t)``); else
None, and the caller solves the whole program. The start: the cells that the strategy of each
one-hot set's cheapest binary needs (so that the restricted program is feasible), each
transport row's cheapest cell, and every cell moving nothing.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

from .cuts import Shared, shared_rows
from .milp import LinearModel, Solution, quiet_highs

TOLERANCE = 1e-6  # a reduced cost below minus this enters (the objective is in microseconds)
VIOLATED = 1e-7  # a substituted row's activity below minus this is violated (HiGHS's primal tolerance)
MARGIN = 10.0  # where some column enters, those of reduced cost below this (microseconds) enter with it
PROVEN = 1e-9  # the pricing stops where its bound is this close (relative) to the restricted optimum
ROUNDS = 2000  # rounds at most; then the whole program is solved (never hit in the benchmarks)


def one_hot_point(a, lb, ub, cost, integer, upper) -> np.ndarray:
    """A point of the binaries: in each one-hot row (``sum of binaries = 1``) its cheapest binary
    allowed, the others 0."""
    count = np.diff(a.indptr)
    x = np.zeros(len(cost))
    seen = np.zeros(len(cost), dtype=bool)
    for r in np.flatnonzero((lb == 1) & (ub == 1) & (count > 0)):
        cols = a.indices[a.indptr[r]:a.indptr[r + 1]]
        if not np.all(integer[cols] == 1) or np.any(seen[cols]):
            continue
        seen[cols] = True
        open_ = cols[upper[cols] > 0]
        if len(open_):
            x[open_[np.argmin(cost[open_])]] = 1.0
    return x


def start_cells(a_eq, point: np.ndarray, cells: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """The cells to start from: those the one-hot ``point`` moves through (both their equality
    rows' binaries at one), each transport row's cheapest cell by ``weight``, the cells of no
    weight (moving nothing)."""
    active = np.abs(a_eq @ point) > 0.5
    incidence = (a_eq[:, cells] != 0).tocsc()
    hit = np.asarray(incidence.T @ active.astype(np.float64)).ravel()
    rows_of = np.diff(incidence.indptr)
    keep = ((hit == rows_of) & (rows_of > 0)) | (weight[cells] <= 0)
    coo = incidence.tocoo()
    order = np.lexsort((weight[cells][coo.col], coo.row))
    first = np.r_[True, coo.row[order][1:] != coo.row[order][:-1]]
    keep[coo.col[order][first]] = True
    return cells[keep]


class Program(NamedTuple):
    """The substituted program: its rows (the kept ones, then the substituted shared rows, CSC
    and, transposed, CSR), their bounds, the spread costs, the columns given lazily and each
    one's bound group (its edge; a ``z`` its own), and the shared rows (``cuts.Shared``)."""

    rows: object
    by_row: object
    lb: np.ndarray
    ub: np.ndarray
    kept: int
    cost: np.ndarray
    upper: np.ndarray
    lazy: np.ndarray
    lazy_columns: object  # the lazy columns' entries, one row each (CSR: ``A^T y`` at once)
    group: np.ndarray
    groups: int
    shared: Shared


def substituted(cost, upper, a, lb, ub, edge_of: np.ndarray, shared: Shared) -> Program:
    from scipy.sparse import vstack

    rest = np.setdiff1d(np.arange(a.shape[0]), shared.rows)
    rows = vstack([a[rest], shared.cuts], format="csc")
    spread = cost + np.asarray(cost[shared.groups] @ shared.mean).ravel()  # P avg(t)
    lazy = edge_of >= 0
    lazy[shared.groups] = True
    cols = np.flatnonzero(lazy)
    edges = int(edge_of.max()) + 1
    group = np.where(edge_of[cols] >= 0, edge_of[cols], edges + np.arange(len(cols)))
    return Program(rows, rows.tocsr(), np.r_[lb[rest], np.zeros(len(shared.rows))],
                   np.r_[ub[rest], np.full(len(shared.rows), np.inf)], len(rest), spread, upper, cols,
                   rows[:, cols].T.tocsr(), group, edges + len(cols), shared)


class Restricted:
    """The live restricted program (module docstring): the columns not given lazily and those
    added, the kept rows and the cuts added (``highspy``, its basis kept between runs)."""

    def __init__(self, p: Program, time_limit):
        import highspy

        self.highspy, self.p, self.inf = highspy, p, highspy.kHighsInf
        self.col_of = np.full(len(p.cost), -1, dtype=np.int64)
        self.row_of = np.full(p.rows.shape[0], -1, dtype=np.int64)
        lazy = np.zeros(len(p.cost), dtype=bool)
        lazy[p.lazy] = True
        self.cols, self.rows = np.flatnonzero(~lazy), np.arange(p.kept)
        self.col_of[self.cols], self.row_of[self.rows] = np.arange(len(self.cols)), self.rows
        self.h = quiet_highs(highspy)
        if time_limit is not None:
            self.h.setOptionValue("time_limit", float(time_limit))
        sub, inf = p.rows[:p.kept][:, self.cols].tocsc(), self.inf
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_, lp.col_cost_ = len(self.cols), p.kept, p.cost[self.cols]
        lp.col_lower_ = np.zeros(len(self.cols))
        lp.col_upper_ = np.where(np.isinf(p.upper[self.cols]), inf, p.upper[self.cols])
        lp.row_lower_ = np.nan_to_num(p.lb[:p.kept], neginf=-inf, posinf=inf)
        lp.row_upper_ = np.nan_to_num(p.ub[:p.kept], neginf=-inf, posinf=inf)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = sub.indptr, sub.indices, sub.data
        self.h.passModel(lp)

    def add_columns(self, new: np.ndarray) -> None:
        """Columns, with their entries in the rows present."""
        start, index, value = entries(self.p.rows, new, self.row_of)
        first = self.h.getNumCol()
        self.h.addCols(len(new), self.p.cost[new], np.zeros(len(new)), np.full(len(new), self.inf), len(value),
                       start, index, value)
        self.col_of[new] = first + np.arange(len(new))
        self.cols = np.r_[self.cols, new]

    def add_rows(self, new: np.ndarray) -> None:
        """Substituted shared rows (``0 <= .``), with their entries in the columns present."""
        start, index, value = entries(self.p.by_row, new, self.col_of)
        first = self.h.getNumRow()
        self.h.addRows(len(new), self.p.lb[new], np.full(len(new), self.inf), len(value), start, index, value)
        self.row_of[new] = first + np.arange(len(new))
        self.rows = np.r_[self.rows, new]

    def run(self):
        """The restricted optimum (warm from the last basis): optimal or not, and the solution."""
        self.h.run()
        self.h.setOptionValue("presolve", "off")  # the later runs go on from the basis
        return self.h.getModelStatus() == self.highspy.HighsModelStatus.kOptimal, self.h.getSolution()


def entries(matrix, picked: np.ndarray, place: np.ndarray):
    """The entries of ``matrix``'s columns ``picked`` (CSC; a CSR's rows) in the places ``place``
    gives (-1: not present), as ``highspy`` takes a block: starts, indices, values."""
    sub = matrix[:, picked].tocoo() if matrix.format == "csc" else matrix[picked].tocoo().T
    present = place[sub.row] >= 0
    order = np.lexsort((sub.row[present], sub.col[present]))
    col, index, value = sub.col[present][order], place[sub.row[present]][order], sub.data[present][order]
    return np.searchsorted(col, np.arange(len(picked))).astype(np.int32), index.astype(np.int32), value


def entering(r: Restricted, solution, objective: float) -> tuple[np.ndarray, float]:
    """The columns left out whose reduced cost under the restricted duals is negative, and a
    lower bound on the optimum of every column on the rows present (module docstring)."""
    p = r.p
    y = np.zeros(p.rows.shape[0])
    y[r.rows] = solution.row_dual
    d = p.cost[p.lazy] - p.lazy_columns @ y
    absent = r.col_of[p.lazy] < 0
    new = absent & (d < -TOLERANCE)
    least = np.zeros(p.groups)
    np.minimum.at(least, p.group[new], d[new])
    if new.any():  # those about to enter too: fewer rounds of a degenerate tail
        new = absent & (d < MARGIN)
    return p.lazy[new], objective + float(least.sum())


def violated(r: Restricted, x: np.ndarray) -> np.ndarray:
    """The substituted shared rows left out that ``x`` (every variable's value) violates."""
    p = r.p
    out = np.flatnonzero((r.row_of[p.kept:] < 0) & (p.shared.cuts @ x < -VIOLATED))
    return out + p.kept


class Relaxed(NamedTuple):
    """The whole relaxation's optimum (``values``: every variable's, None where HiGHS stopped
    short), its objective and bound, the columns and cuts added and the rounds."""

    values: np.ndarray | None
    objective: float
    bound: float
    columns: int
    cuts: int
    rounds: int


def relax(p: Program, start: np.ndarray, time_limit) -> Relaxed:
    """The rounds of the module docstring: columns while any enters (or until their bound proves
    the restricted optimum), then the cuts violated; done where none is."""
    r = Restricted(p, time_limit)
    r.add_columns(start)
    columns, cuts = len(start), 0
    for round_ in range(ROUNDS):
        optimal, solution = r.run()
        if not optimal:
            break
        objective = float(r.h.getInfo().objective_function_value)
        new, bound = entering(r, solution, objective)
        if len(new) and objective - bound > PROVEN * max(abs(objective), 1.0):
            r.add_columns(new)
            columns += len(new)
            continue
        x = np.zeros(len(p.cost))
        x[r.cols] = solution.col_value
        rows = violated(r, x)
        if not len(rows):
            return Relaxed(x, objective, objective if not len(new) else bound, columns, cuts, round_)
        r.add_rows(rows)
        cuts += len(rows)
    return Relaxed(None, float("nan"), float("nan"), columns, cuts, ROUNDS)


def lazily(cost, integer, upper, constraint, edge_of: np.ndarray, time_limit) -> Solution | None:
    """The search's optimum with its cells and shared rows given lazily (module docstring), or
    None where that does not apply or proves nothing (the caller then solves the whole program).
    ``edge_of``: per variable, the edge whose transport cell it is (-1: not a cell)."""
    a, lb, ub = constraint.A.tocsr(), np.asarray(constraint.lb, float), np.asarray(constraint.ub, float)
    shared = shared_rows(a, lb, ub, integer)
    if shared is None or not np.any(edge_of >= 0):
        return None
    p = substituted(cost, upper, a, lb, ub, edge_of, shared)
    point = one_hot_point(a, lb, ub, cost, integer, upper)
    got = relax(p, start_cells(a[np.flatnonzero(lb == ub)], point, np.flatnonzero(edge_of >= 0), p.cost),
                time_limit)
    if got.values is None:
        return None
    x = got.values
    binaries = x[integer == 1]
    if not np.all(np.abs(binaries - np.round(binaries)) < 1e-7):
        return None
    x[shared.groups] += shared.mean @ x  # u = z + avg(t)
    activity = a @ x
    broken = int(np.sum((activity < lb - 1e-6) | (activity > ub + 1e-6)))
    if broken:  # a check of the substitution and the cuts: never seen, but never silent
        warnings.warn(f"autoshard: the lazily solved relaxation's solution breaks {broken} rows of the whole "
                      "program; solving the whole program instead (slower)", stacklevel=4)
        return None
    return Solution(np.round(x, 9), got.objective, f"the relaxation is integral ({got.rounds} rounds: "
                    f"{got.columns:,} of {len(p.lazy):,} columns, {got.cuts:,} of {len(shared.rows):,} shared "
                    "rows)", True)


class LazyModel(LinearModel):
    """A ``LinearModel`` whose transport cells are marked (``cells``): a solve without a start, of
    the rows up to ``plain_rows`` (those before the memory budget's), gives them and the shared
    rows lazily (``lazily``); any other solve, or one that proves nothing, is the whole program's."""

    def __init__(self):
        super().__init__()
        self.lazy: list[tuple[int, int]] = []  # (first variable, count) of each edge's cells
        self.plain_rows: int | None = None

    def cells(self, count: int) -> int:
        """A block of ``count`` transport cells of one edge (continuous, no cost): the first's index."""
        first = self.vars(np.zeros(count), binary=False)
        self.lazy.append((first, count))
        return first

    def solve(self, time_limit: float | None = None, gap: float = 1e-4, extra=(), upto: int | None = None,
              start: np.ndarray | None = None, allowed: np.ndarray | None = None) -> Solution:
        kept = self.row_count if upto is None else upto
        if start is None and self.lazy and self.plain_rows is not None and kept <= self.plain_rows:
            found = self.solve_lazily(time_limit, extra, upto, allowed)
            if found is not None:
                return found
        return super().solve(time_limit, gap, extra, upto, start, allowed)

    def solve_lazily(self, time_limit, extra, upto, allowed) -> Solution | None:
        constraints = self.constraints(extra, upto)
        if not constraints:
            return None
        integer = self.integrality()
        upper = np.where(integer == 1, 1.0, np.inf)
        if allowed is not None:
            upper = np.where((integer == 1) & ~allowed, 0.0, upper)
        edge_of = np.full(self.size, -1, dtype=np.int64)
        for k, (first, count) in enumerate(self.lazy):
            edge_of[first:first + count] = k
        return lazily(self.costs(), integer, upper, constraints[0], edge_of, time_limit)


__all__ = ["LazyModel", "Program", "Relaxed", "Restricted", "entering", "entries", "lazily", "one_hot_point",
           "relax", "start_cells", "substituted", "violated"]
