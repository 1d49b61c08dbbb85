"""The calls into HiGHS, through ``highspy`` (HiGHS's own binding): a linear relaxation, and the
branch and bound (unlike ``scipy.optimize.milp`` it takes a feasible start, which a budgeted
search needs, ``incumbent``). Arrays in, a ``Solution`` out; what the variables mean is
``milp``'s and ``model``'s. scipy and highspy are imported when a program is solved, so the package
imports without the ``auto`` extra and says which extra to install when used."""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..errors import ShardingError

LARGEST_COST = 1e6  # (see ``cost_scale``): HiGHS's threshold for an "excessively large" cost


@dataclass(frozen=True)
class Solution:
    values: np.ndarray  # per variable
    objective: float
    status: str
    optimal: bool
    gap: float = 0.0  # relative, between the objective and the best bound proven (0: optimal)
    fixed: int = 0  # columns held at 0 by reduced costs before the solve (``fixing``)


class Split(NamedTuple):
    """Rows ``lb <= a x <= ub`` as ``linprog`` takes them: equalities where ``lb == ub``, else
    ``a x <= ub`` and, where ``lb`` is positive or the row has a negative term (else ``a x >= 0``
    holds anyway), ``-a x <= -lb``."""

    a_ub: object  # scipy sparse, or None
    b_ub: np.ndarray
    a_eq: object
    b_eq: np.ndarray


def split(constraint) -> Split:
    """One ``LinearConstraint`` as ``Split`` rows."""
    from scipy.sparse import vstack

    a, lb, ub = constraint.A.tocsr(), np.asarray(constraint.lb, float), np.asarray(constraint.ub, float)
    eq = lb == ub
    negative = a.min(axis=1).toarray().ravel() < 0
    below, above = ~eq & np.isfinite(ub), ~eq & np.isfinite(lb) & ((lb > 0) | negative)
    a_ub = vstack([a[below], -a[above]], format="csr")
    b_ub = np.concatenate([ub[below], -lb[above]])
    return Split(a_ub if len(b_ub) else None, b_ub, a[eq] if eq.any() else None, lb[eq])


def cost_scale(cost: np.ndarray) -> float:
    """The power of two the costs are multiplied by before HiGHS sees them: where the largest exceeds
    ``LARGEST_COST``, down to it. HiGHS's own advice: on such a program it warns of "excessively
    large costs" against its absolute dual feasibility tolerance (1e-7) and suggests
    ``user_objective_scale = -ceil(log2(largest / 1e6))`` (its log on the 7B step over 8 x 32 x 32:
    costs up to 8e7 us, -7). A power of two changes no bit of a cost, objective or dual but the
    exponent."""
    top = float(np.max(np.abs(cost), initial=0.0))
    return 1.0 if top <= LARGEST_COST else 2.0 ** -math.ceil(math.log2(top / LARGEST_COST))


class Duals(NamedTuple):
    """A block of rows' duals (``marginals``: scipy's name, which the callers read)."""

    marginals: np.ndarray


class Relaxed(NamedTuple):
    """A linear relaxation's answer: ``x`` and ``fun`` (None where not solved), ``status`` as
    ``scipy.optimize.linprog`` numbers it (0 optimal, 1 a time or iteration limit, 2 infeasible, 3
    unbounded, 4 anything else), and the duals of the ``Split`` rows, equalities and ``<=``."""

    x: np.ndarray | None
    fun: float | None
    status: int
    eqlin: Duals
    ineqlin: Duals


def relaxation(cost: np.ndarray, constraints: list, upper: np.ndarray, time_limit: float | None,
               rows: Split | None = None, presolve: bool = True) -> Relaxed:
    """The linear relaxation, by HiGHS's dual simplex through ``highspy``: the program
    ``scipy.optimize.linprog`` would pass it (the ``<=`` rows, then the equalities), without its
    Python loop over the columns for their bounds' duals (2.7 s on the 7B step's two relaxations
    over 8 x 32 x 32) or ``milp``'s object per variable for its integrality. The rows as ``split``
    gives them (``rows``, where already split). The costs go in scaled by ``cost_scale``, and the
    objective and the duals come back in the program's own unit. ``presolve=False``: HiGHS's
    presolve left out (``fixing``'s cheap relaxation, where it costs more than it saves)."""
    from scipy.sparse import csc_array, vstack

    highspy = _highspy()
    r = split(constraints[0]) if rows is None and constraints else rows
    blocks = [] if r is None else [a for a in (r.a_ub, r.a_eq) if a is not None]
    ub_rows = 0 if r is None or r.a_ub is None else r.a_ub.shape[0]
    inf, scale = highspy.kHighsInf, cost_scale(cost)
    h = quiet_highs(highspy)
    h.setOptionValue("simplex_strategy", 1)  # the dual simplex, as linprog's "highs" asks for
    h.setOptionValue("presolve", "on" if presolve else "off")
    if time_limit is not None:
        h.setOptionValue("time_limit", float(time_limit))
    matrix = row_lower = row_upper = None
    if blocks:
        matrix = csc_array(vstack(blocks, format="csc"))
        row_upper = np.concatenate([r.b_ub if r.a_ub is not None else np.zeros(0), r.b_eq if r.a_eq is not None else np.zeros(0)])
        row_lower = np.concatenate([np.full(ub_rows, -inf), row_upper[ub_rows:]])
    h.passModel(_lp(highspy, np.asarray(cost, float) * scale, np.zeros(len(cost)), upper, matrix, row_lower, row_upper))
    h.run()
    return _answer(h, highspy, scale, ub_rows)


def _lp(highspy, cost, lower, upper, matrix, row_lower, row_upper):
    """A ``HighsLp``: columns of ``cost`` between ``lower`` and ``upper`` (inf: HiGHS's), and the rows
    of ``matrix`` (CSC, or None) between ``row_lower`` and ``row_upper``."""
    lp = highspy.HighsLp()
    lp.num_col_, lp.col_cost_ = len(cost), cost
    lp.col_lower_, lp.col_upper_ = lower, np.where(np.isinf(upper), highspy.kHighsInf, upper)
    lp.num_row_ = 0 if matrix is None else matrix.shape[0]
    if matrix is not None:
        lp.row_lower_, lp.row_upper_ = row_lower, row_upper
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = matrix.indptr, matrix.indices, matrix.data
    return lp


def infeasible() -> ShardingError:
    """The error of a program no strategy satisfies."""
    return ShardingError("autoshard-infeasible", "no strategy fits: every candidate layout needs more "
                         "memory per device than device_memory allows (or a tie cannot hold)")


def _answer(h, highspy, scale: float, ub_rows: int) -> Relaxed:
    """What ``h`` found, in the program's unit (its costs were multiplied by ``scale``)."""
    status = h.getModelStatus()
    states = highspy.HighsModelStatus
    code = {states.kOptimal: 0, states.kModelEmpty: 0, states.kTimeLimit: 1, states.kIterationLimit: 1, states.kInfeasible: 2,
            states.kUnbounded: 3}.get(status, 4)
    if code != 0:
        return Relaxed(None, None, code, Duals(None), Duals(None))
    solution = h.getSolution()
    duals = np.asarray(solution.row_dual, float) / scale
    return Relaxed(np.asarray(solution.col_value, float), h.getInfo().objective_function_value / scale, 0,
                   Duals(duals[ub_rows:]), Duals(duals[:ub_rows]))


def _highspy():
    """``highspy``, or the error naming the extra that installs it."""
    try:
        import highspy
    except ImportError:  # the optional extra
        raise ImportError("ss.autoshard solves an integer program with HiGHS (highspy): "
                          "pip install 'simshard[auto]'") from None
    return highspy


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
    highspy = _highspy()
    h, inf = quiet_highs(highspy), highspy.kHighsInf
    h.setOptionValue("mip_rel_gap", gap)
    if time_limit is not None:
        h.setOptionValue("time_limit", float(time_limit))
    rows = constraints[0] if constraints else None
    bounds = [None, None] if rows is None else [np.nan_to_num(np.asarray(b, float), neginf=-inf, posinf=inf)
                                                for b in (rows.lb, rows.ub)]
    lp = _lp(highspy, cost, np.zeros(len(cost)) if lower is None else lower, upper,
             None if rows is None else rows.A.tocsc(), *bounds)
    lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous for i in integer]
    h.passModel(lp)
    if start is not None:
        h.setSolution(len(start), np.arange(len(start), dtype=np.int32), np.asarray(start, float))
    h.run()
    status, info = h.getModelStatus(), h.getInfo()
    if info.primal_solution_status == 0:  # no feasible point
        if status == highspy.HighsModelStatus.kInfeasible:
            raise infeasible()
        raise ShardingError("autoshard-unsolved", f"the solver found no strategy: {h.modelStatusToString(status)}")
    optimal = status == highspy.HighsModelStatus.kOptimal
    return Solution(np.round(np.asarray(h.getSolution().col_value), 9), float(info.objective_function_value),
                    h.modelStatusToString(status), optimal, 0.0 if optimal else float(info.mip_gap))


__all__ = ["LARGEST_COST", "Solution", "Split", "branch_and_bound", "cost_scale", "infeasible", "quiet_highs", "relaxation",
           "split"]
