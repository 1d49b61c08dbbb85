"""A mixed-integer linear program, built in numpy blocks and solved by HiGHS (its relaxation by
``scipy.optimize.linprog``, the branch and bound by ``highspy``, HiGHS's own binding: unlike
``scipy.optimize.milp`` it takes a feasible start, which a budgeted search needs, ``incumbent``).

Kept apart from what the variables mean (``model``): variables with a cost and bounds, binary
or continuous; rows ``lb <= sum coeff * var <= ub``. scipy is imported when a model is solved,
so the package imports without the ``auto`` extra and says which extra to install when used.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import numpy as np

from ..errors import ShardingError


@dataclass(frozen=True)
class Solution:
    values: np.ndarray  # per variable
    objective: float
    status: str
    optimal: bool
    gap: float = 0.0  # relative, between the objective and the best bound proven (0: optimal)


def relaxation(cost: np.ndarray, constraints: list, upper: np.ndarray, time_limit: float | None):
    """The linear relaxation by ``scipy.optimize.linprog`` (HiGHS): ``milp`` with no integer
    variable would solve the same, but first builds a Python object per variable for their
    integrality (seconds on millions of transport cells). Rows ``lb <= a x <= ub`` become
    equalities where ``lb == ub``, else ``a x <= ub`` and, where ``lb`` is positive or the row
    has a negative term (else ``a x >= 0`` holds anyway), ``-a x <= -lb``."""
    from scipy.optimize import linprog
    from scipy.sparse import vstack

    options = {} if time_limit is None else {"time_limit": time_limit}
    bounds = np.c_[np.zeros(len(cost)), upper]
    if not constraints:
        return linprog(cost, bounds=bounds, method="highs", options=options)
    a, lb, ub = constraints[0].A.tocsr(), np.asarray(constraints[0].lb, float), np.asarray(constraints[0].ub, float)
    eq = lb == ub
    negative = a.min(axis=1).toarray().ravel() < 0
    below, above = ~eq & np.isfinite(ub), ~eq & np.isfinite(lb) & ((lb > 0) | negative)
    a_ub = vstack([a[below], -a[above]], format="csr")
    b_ub = np.concatenate([ub[below], -lb[above]])
    return linprog(cost, A_ub=a_ub if len(b_ub) else None, b_ub=b_ub if len(b_ub) else None,
                   A_eq=a[eq] if eq.any() else None, b_eq=lb[eq] if eq.any() else None,
                   bounds=bounds, method="highs", options=options)


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


def quiet_highs(highspy):
    """A ``Highs`` with its output off. Its C++ constructor prints a banner on the process's first
    (to the C stdout, before any option can be set), which would land in the middle of what
    ``simshard autoshard`` prints: that construction runs with descriptor 1 on /dev/null."""
    sys.stdout.flush()
    saved, null = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)
    h.setOptionValue("output_flag", False)
    return h


def branch_and_bound(cost, integer, upper, constraints, time_limit, gap, start, lower=None) -> Solution:
    """HiGHS's branch and bound (``highspy``), from ``start`` where given, the variables between
    ``lower`` (default 0) and ``upper``; stopped at ``time_limit`` seconds with the best solution
    found, reported not optimal with its gap."""
    try:
        import highspy
    except ImportError:  # the optional extra
        raise ImportError("ss.autoshard solves an integer program with HiGHS (highspy): "
                          "pip install 'simshard[auto]'") from None
    h, inf = quiet_highs(highspy), highspy.kHighsInf
    h.setOptionValue("mip_rel_gap", gap)
    if time_limit is not None:
        h.setOptionValue("time_limit", float(time_limit))
    lp = highspy.HighsLp()
    lp.num_col_, lp.col_cost_ = len(cost), cost
    lp.col_lower_ = np.zeros(len(cost)) if lower is None else lower
    lp.col_upper_ = np.where(np.isinf(upper), inf, upper)
    matrix = constraints[0].A.tocsc() if constraints else None
    lp.num_row_ = 0 if matrix is None else matrix.shape[0]
    if matrix is not None:
        lp.row_lower_ = np.nan_to_num(np.asarray(constraints[0].lb, float), neginf=-inf, posinf=inf)
        lp.row_upper_ = np.nan_to_num(np.asarray(constraints[0].ub, float), neginf=-inf, posinf=inf)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = matrix.indptr, matrix.indices, matrix.data
    lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous for i in integer]
    h.passModel(lp)
    if start is not None:
        h.setSolution(len(start), np.arange(len(start), dtype=np.int32), np.asarray(start, float))
    h.run()
    status, info = h.getModelStatus(), h.getInfo()
    if info.primal_solution_status == 0:  # no feasible point
        if status == highspy.HighsModelStatus.kInfeasible:
            raise ShardingError("autoshard-infeasible", "no strategy fits: every candidate layout needs more "
                                "memory per device than device_memory allows (or a tie cannot hold)")
        raise ShardingError("autoshard-unsolved", f"the solver found no strategy: {h.modelStatusToString(status)}")
    optimal = status == highspy.HighsModelStatus.kOptimal
    return Solution(np.round(np.asarray(h.getSolution().col_value), 9), float(info.objective_function_value),
                    h.modelStatusToString(status), optimal, 0.0 if optimal else float(info.mip_gap))


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

    @property
    def row_count(self) -> int:
        return len(self.lb)

    @property
    def size(self) -> int:
        return self.count

    def vars(self, costs: np.ndarray, binary: bool = True) -> int:
        """A block of ``len(costs)`` variables; returns the first's index (the rest follow it)."""
        costs = np.asarray(costs, dtype=np.float64).ravel()
        self.blocks.append((self.count, costs, binary))
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

    def add_cost(self, var: int, cost: float) -> None:
        self.added.append((var, float(cost)))

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
              start: np.ndarray | None = None, allowed: np.ndarray | None = None) -> Solution:
        """The optimum, with ``extra`` rows ``(terms, lb, ub)`` added for this solve only, and only
        the first ``upto`` rows (None: all) kept; ``allowed`` (a mask) keeps the binaries it is
        false for at zero; ``start``: a solution the branch and bound starts from (ignored where
        it does not fit). The linear relaxation is solved first: where its optimum is integral it
        is the integer optimum (the search's usually is: its transport edges are tight), and the
        branch and bound, with its heuristics, is skipped; where it is nearly integral, only its
        fractional binaries may be searched (``within_gap``)."""
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
        relaxed = relaxation(cost, constraints, upper, time_limit)
        if relaxed.status == 0 and np.all(np.abs(relaxed.x[integer == 1] - np.round(relaxed.x[integer == 1])) < 1e-7):
            return Solution(np.round(relaxed.x, 9), float(relaxed.fun), "the relaxation is integral", True)
        if relaxed.status == 2:
            raise ShardingError("autoshard-infeasible", "no strategy fits: every candidate layout needs more "
                                "memory per device than device_memory allows (or a tie cannot hold)")
        if relaxed.status == 0:
            near = within_gap(cost, integer, upper, constraints, relaxed, time_limit, gap)
            if near is not None:
                return near
        return branch_and_bound(cost, integer, upper, constraints, time_limit, gap, start)

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
