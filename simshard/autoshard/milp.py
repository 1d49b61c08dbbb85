"""A mixed-integer linear program, built in numpy blocks and solved by HiGHS (``highs``: its
relaxation and the branch and bound, both by ``highspy``); where it holds
maxima (``add_maxima``: the shared reads), first reduced by the reduced costs of a cheaper
relaxation without their rows (``fixing``).

Kept apart from what the variables mean (``model``): variables with a cost and bounds, binary
or continuous; rows ``lb <= sum coeff * var <= ub``. scipy is imported when a model is solved,
so the package imports without the ``auto`` extra and says which extra to install when used.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from ..errors import ShardingError
from . import fixing
from .highs import Solution, branch_and_bound, infeasible, relaxation


def within_gap(cost, integer, upper, constraints, relaxed, time_limit, gap: float) -> Solution | None:
    """The optimum where the relaxation is nearly integral, without the whole branch and bound:
    the binaries the relaxation sets to 0 or 1 are held there and only the fractional ones are
    searched (a program of a few dozen binaries where the search's has hundreds of thousands).
    Its objective is an upper bound on the optimum and the relaxation's a lower one, so where the
    two are within ``gap`` (relative, HiGHS's ``mip_rel_gap``) it is optimal to the tolerance the
    branch and bound itself stops at; else (or where holding them leaves nothing feasible) None,
    and the whole program is searched."""
    x = relaxed.x
    held = (integer == 1) & (np.abs(x - np.round(x)) < 1e-7)
    try:
        res = branch_and_bound(cost, integer, np.where(held, np.round(x), upper), constraints, time_limit, gap,
                               None, lower=np.where(held, np.round(x), 0.0))
    except ShardingError:  # nothing feasible with them held
        return None
    if not res.optimal or res.objective - float(relaxed.fun) > gap * max(abs(res.objective), 1e-9):
        return None
    return Solution(res.values, res.objective, "within the gap of the relaxation (its integral binaries held)", True)


def left_of(time_limit: float | None, began: float, least: int) -> float | None:
    """What is left of ``time_limit`` seconds since ``began`` (``time.perf_counter``) for a later
    step, ``1 / least`` of it at least (None: no limit)."""
    return None if time_limit is None else max(time_limit - (time.perf_counter() - began), time_limit / least)


def optimum(problem, time_limit: float | None, gap: float) -> Solution:
    """The optimum of ``problem`` (``fixing.Problem``). The linear relaxation is solved first:
    where its optimum is integral it is the integer optimum (the search's usually is: its
    transport edges are tight), and the branch and bound, with its heuristics, is skipped; where
    it is nearly integral, only its fractional binaries may be searched (``within_gap``).
    ``time_limit``: seconds for all of it, the relaxation's included (the branch and bound gets what
    is left, a tenth at least)."""
    cost, integer, upper, constraints = problem.cost, problem.integer, problem.upper, problem.constraints
    began = time.perf_counter()
    relaxed = relaxation(cost, constraints, upper, time_limit)
    time_limit = left_of(time_limit, began, 10)  # what the relaxation left, for the branch and bound
    if relaxed.status == 0 and np.all(np.abs(relaxed.x[integer == 1] - np.round(relaxed.x[integer == 1])) < 1e-7):
        return Solution(np.round(relaxed.x, 9), float(relaxed.fun), "the relaxation is integral", True)
    if relaxed.status == 2:
        raise infeasible()
    if relaxed.status == 0:
        near = within_gap(cost, integer, upper, constraints, relaxed, time_limit, gap)
        if near is not None:
            return near
    return branch_and_bound(cost, integer, upper, constraints, time_limit, gap, None)


class Maximum(NamedTuple):
    """A continuous ``var`` held at or above each of several term sets by the ``count`` rows from
    ``first`` (``var - terms >= 0``), priced ``price`` (positive), so the optimum holds it at their
    maximum: a reshard several reads can make, paid once (``reads``). It appears in no other row."""

    var: int
    price: float
    first: int
    count: int


class LinearModel:
    """Variables and rows, kept as numpy blocks: the search adds them an edge at a time (a block of
    transport cells and its rows at once, ``vars``/``rows``), so building a model of millions of
    variables costs a few array operations per edge, not a Python call per coefficient."""

    def __init__(self):
        self.blocks: list[tuple[int, np.ndarray, bool]] = []  # (first variable, costs, binary)
        self.count = 0
        self.added: list[tuple[int, float]] = []  # costs added to existing variables (``add_cost``)
        self.entries: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (rows, cols, coeffs)
        self.lb: list[float] = []
        self.ub: list[float] = []
        self.matrix = None  # the rows as one CSR matrix, built at the first solve after a change
        self.units: list[tuple[int, int]] = []  # (first, count): continuous, 0 or 1 in every integer solution
        self.maxima: list[Maximum] = []  # the variables ``add_maxima`` made, and their rows
        # fixing is tried only where no row from here on is kept (None: every row): rows after it
        # (a memory budget's) make the cheap relaxation fractional, and its solve wasted
        self.plain_rows: int | None = None

    @property
    def row_count(self) -> int:
        return len(self.lb)

    @property
    def size(self) -> int:
        return self.count

    def vars(self, costs: np.ndarray, binary: bool = True, unit: bool = False) -> int:
        """A block of ``len(costs)`` variables; returns the first's index (the rest follow it).
        ``unit``: continuous, but 0 or 1 in every solution whose binaries are (transport cells
        between one-hot ends): ``fixing`` may fix them by their reduced costs as it does binaries."""
        costs = np.asarray(costs, dtype=np.float64).ravel()
        self.blocks.append((self.count, costs, binary))
        if unit and not binary:
            self.units.append((self.count, len(costs)))
        self.count += len(costs)
        return self.count - len(costs)

    def var(self, cost: float = 0.0, binary: bool = True) -> int:
        """One variable (``vars`` of a single cost): returns its index."""
        return self.vars(np.array([cost]), binary)

    def row(self, terms, lb: float, ub: float) -> int:
        """One row ``lb <= sum(coeff * var for var, coeff in terms) <= ub``: returns its index."""
        terms = list(terms)
        cols = np.array([v for v, _ in terms], dtype=np.int64)
        coeffs = np.array([c for _, c in terms], dtype=np.float64)
        return self.rows(np.zeros(len(terms), dtype=np.int64), cols, coeffs, [lb], [ub])

    def add_maxima(self, prices: np.ndarray, counts: np.ndarray, which: np.ndarray, cols: np.ndarray,
                   coeffs: np.ndarray) -> int:
        """Continuous variables, each held at or above several term sets (a ``Maximum``), given as
        arrays: maximum ``m`` of cost ``prices[m]`` (positive) at least each of its ``counts[m]``
        term sets, the term sets in order (entry ``k`` puts ``coeffs[k]`` of variable ``cols[k]``
        into term set ``which[k]``); a row ``u - terms >= 0`` per term set. Returns the first
        variable (the rest follow it)."""
        first_var, first_row = self.vars(prices, binary=False), len(self.lb)
        rows = int(np.sum(counts))
        owner = np.repeat(np.arange(len(prices)), counts)
        self.rows(np.r_[np.arange(rows), which], np.r_[first_var + owner, cols], np.r_[np.ones(rows), -coeffs],
                  np.zeros(rows), np.full(rows, np.inf))
        starts = first_row + np.r_[0, np.cumsum(counts)[:-1]]
        self.maxima.extend(Maximum(first_var + m, p, r, c) for m, (p, r, c) in
                           enumerate(zip(np.asarray(prices, float).tolist(), starts.tolist(), np.asarray(counts).tolist())))
        return first_var

    def zero_one(self) -> np.ndarray:
        """True for a variable that is 0 or 1 in every integer solution: a binary, a ``unit``."""
        out = self.integrality() == 1
        for first, count in self.units:
            out[first:first + count] = True
        return out

    def add_cost(self, var: int, cost: float) -> None:
        self.added.append((var, float(cost)))

    def add_costs(self, vars_: np.ndarray, costs: np.ndarray) -> None:
        """``add_cost`` of each variable and cost, in order."""
        self.added.extend(zip(np.asarray(vars_, dtype=np.int64).tolist(), np.asarray(costs, dtype=np.float64).tolist()))

    def rows(self, rows: np.ndarray, cols: np.ndarray, coeffs: np.ndarray, lb, ub) -> int:
        """A block of rows at once: entry ``k`` puts ``coeffs[k]`` at (row ``rows[k]``, counted
        from this block's first, variable ``cols[k]``); row ``i`` bounded by ``lb[i]``, ``ub[i]``.
        Returns the first row's index."""
        first = len(self.lb)
        self.matrix = None
        self.entries.append((np.asarray(rows, dtype=np.int64) + first, np.asarray(cols, dtype=np.int64),
                             np.asarray(coeffs, dtype=np.float64)))
        self.lb.extend(float(x) for x in lb)
        self.ub.extend(float(x) for x in ub)
        return first

    def costs(self) -> np.ndarray:
        """Every variable's cost."""
        out = np.empty(self.count)
        for first, costs, _ in self.blocks:
            out[first:first + len(costs)] = costs
        if self.added:
            at, add = zip(*self.added)
            np.add.at(out, np.asarray(at, dtype=np.int64), np.asarray(add))
        return out

    def integrality(self) -> np.ndarray:
        """1 for a binary, 0 for a continuous variable."""
        out = np.empty(self.count, dtype=np.int64)
        for first, costs, binary in self.blocks:
            out[first:first + len(costs)] = 1 if binary else 0
        return out

    def solve(self, time_limit: float | None = None, gap: float = 1e-4, extra=(), upto: int | None = None,
              start: np.ndarray | None = None, allowed: np.ndarray | None = None, fix: bool = True) -> Solution:
        """The optimum, with ``extra`` rows ``(terms, lb, ub)`` added for this solve only, and only
        the first ``upto`` rows (None: all) kept; ``allowed`` (a mask) keeps the binaries it is
        false for at zero; ``start``: a solution the branch and bound starts from (ignored where
        it does not fit). Without a start, where the model holds maxima, the columns a cheaper
        relaxation's reduced costs rule out of every solution no dearer than one found are
        dropped first (``fixing``; ``fix=False``: not); then ``optimum``."""
        try:
            import scipy  # noqa: F401  (the relaxation and the rows)
        except ImportError:  # the optional extra
            raise ImportError("ss.autoshard solves an integer program with HiGHS (scipy, highspy): "
                              "pip install 'simshard[auto]'") from None
        constraints = self.constraints(extra, upto)
        integer, cost = self.integrality(), self.costs()
        upper = np.where(integer == 1, 1.0, np.inf)
        if allowed is not None:
            upper = np.where((integer == 1) & ~allowed, 0.0, upper)
        if start is not None:  # a budgeted search: its relaxation is fractional, the branch and bound solves it
            return branch_and_bound(cost, integer, upper, constraints, time_limit, gap, start)
        problem = fixing.Problem(cost, integer, self.zero_one(), upper, constraints)
        plain = self.plain_rows is None or (self.row_count if upto is None else upto) <= self.plain_rows
        if not (fix and plain and self.maxima and constraints):
            return optimum(problem, time_limit, gap)
        began = time.perf_counter()  # ``time_limit`` shared with the cheap relaxation (a quarter at least)
        fixed = fixing.solve(problem, self.maxima, lambda p: optimum(p, left_of(time_limit, began, 4), gap), time_limit)
        return fixed if fixed is not None else optimum(problem, left_of(time_limit, began, 4), gap)

    def constraints(self, extra=(), upto: int | None = None) -> list:
        """The rows (the first ``upto``, and ``extra``) as scipy's ``LinearConstraint``."""
        from scipy.optimize import LinearConstraint
        from scipy.sparse import csr_array, vstack

        if not self.lb and not extra:
            return []
        if self.matrix is None:
            rows, cols, coeffs = (np.concatenate([e[k] for e in self.entries]) if self.entries else np.zeros(0)
                                  for k in range(3))
            self.matrix = csr_array((coeffs, (rows, cols)), shape=(len(self.lb), self.size))
        upto = len(self.lb) if upto is None else upto
        matrix, lb, ub = self.matrix[:upto], self.lb[:upto], self.ub[:upto]
        if extra:
            rows = [r for r, (terms, _, _) in enumerate(extra) for _ in terms]
            cols = [v for terms, _, _ in extra for v, _ in terms]
            coeffs = [c for terms, _, _ in extra for _, c in terms]
            matrix = vstack([matrix, csr_array((coeffs, (rows, cols)), shape=(len(extra), self.size))], format="csr")
            lb, ub = lb + [lo for _, lo, _ in extra], ub + [hi for _, _, hi in extra]
        return [LinearConstraint(matrix, lb, ub)]
