"""A mixed-integer linear program, built row by row and solved by HiGHS (``scipy.optimize.milp``).

Kept apart from what the variables mean (``model``): variables with a cost and bounds, binary
or continuous; rows ``lb <= sum coeff * var <= ub``. scipy is imported when a model is solved,
so the package imports without the ``auto`` extra and says which extra to install when used.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ShardingError


@dataclass(frozen=True)
class Solution:
    values: np.ndarray  # per variable
    objective: float
    status: str
    optimal: bool


class LinearModel:
    def __init__(self):
        self.cost: list[float] = []
        self.integer: list[int] = []
        self.upper: list[float] = []
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.coeffs: list[float] = []
        self.lb: list[float] = []
        self.ub: list[float] = []

    @property
    def row_count(self) -> int:
        return len(self.lb)

    @property
    def size(self) -> int:
        return len(self.cost)

    def var(self, cost: float = 0.0, binary: bool = True) -> int:
        self.cost.append(float(cost))
        self.integer.append(1 if binary else 0)
        self.upper.append(1.0 if binary else np.inf)
        return len(self.cost) - 1

    def add_cost(self, var: int, cost: float) -> None:
        self.cost[var] += float(cost)

    def row(self, terms, lb: float, ub: float) -> None:
        """``lb <= sum(coeff * var for var, coeff in terms) <= ub``."""
        r = len(self.lb)
        for v, c in terms:
            self.rows.append(r)
            self.cols.append(v)
            self.coeffs.append(float(c))
        self.lb.append(lb)
        self.ub.append(ub)

    def solve(self, time_limit: float | None = None, gap: float = 1e-4, extra=(), upto: int | None = None) -> Solution:
        """The optimum, with ``extra`` rows ``(terms, lb, ub)`` added for this solve only, and only
        the first ``upto`` rows (None: all) kept. The linear relaxation is solved first: where its
        optimum is integral it is the integer optimum (the search's usually is: its transport
        edges are tight), and the branch and bound, with its heuristics, is skipped."""
        try:
            from scipy.optimize import Bounds, milp
        except ImportError:  # the optional extra
            raise ImportError("ss.autoshard solves an integer program with HiGHS through scipy: "
                              "pip install 'simshard[auto]'") from None
        constraints = self.constraints(extra, upto)
        bounds = Bounds(np.zeros(self.size), np.asarray(self.upper))
        options = {"disp": False} | ({} if time_limit is None else {"time_limit": time_limit})
        integer = np.asarray(self.integer)
        relaxed = milp(np.asarray(self.cost), integrality=np.zeros_like(integer), bounds=bounds,
                       constraints=constraints, options=options)
        if relaxed.status == 0 and np.all(np.abs(relaxed.x[integer == 1] - np.round(relaxed.x[integer == 1])) < 1e-7):
            return Solution(np.round(relaxed.x, 9), float(relaxed.fun), "the relaxation is integral", True)
        res = milp(np.asarray(self.cost), integrality=integer, bounds=bounds, constraints=constraints,
                   options=options | {"mip_rel_gap": gap})
        if res.x is None:
            if res.status == 2 or relaxed.status == 2:
                raise ShardingError("autoshard-infeasible", "no strategy fits: every candidate layout needs more "
                                    "memory per device than device_memory allows (or a tie cannot hold)")
            raise ShardingError("autoshard-unsolved", f"the solver found no strategy: {res.message}")
        return Solution(np.round(res.x, 9), float(res.fun), res.message, res.status == 0)

    def constraints(self, extra=(), upto: int | None = None) -> list:
        """The rows (the first ``upto``, and ``extra``) as scipy's ``LinearConstraint``."""
        from scipy.optimize import LinearConstraint
        from scipy.sparse import csr_array

        upto = len(self.lb) if upto is None else upto
        keep = [j for j, r in enumerate(self.rows) if r < upto]
        rows, cols, coeffs = [self.rows[j] for j in keep], [self.cols[j] for j in keep], [self.coeffs[j] for j in keep]
        lb, ub = self.lb[:upto], self.ub[:upto]
        for terms, lo, hi in extra:
            rows += [len(lb)] * len(terms)
            cols += [v for v, _ in terms]
            coeffs += [c for _, c in terms]
            lb.append(lo)
            ub.append(hi)
        if not lb:
            return []
        return [LinearConstraint(csr_array((coeffs, (rows, cols)), shape=(len(lb), self.size)), lb, ub)]
