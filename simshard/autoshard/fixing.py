"""Reduced-cost fixing: most of a program's columns ruled out by a cheaper relaxation, before the
program itself is solved.

The shared reads (``reads``) make a program's relaxation slow: a pair several reads can move is
priced once, on a variable ``u`` at least each read's terms (``milp.Maximum``: a row per read,
94% of the rows of the 7B step on 8 x 32 x 32). Without those rows, each read's terms priced a
share of the pair's price instead (``price / k`` each of its ``k`` reads), the program is a
relaxation of the whole: for every solution of the whole, ``price * u >= price * max_r t_r >=
sum_r price / k * t_r``, and every other row is kept. Its linear relaxation (the *cheap* one) is
solved, and its dual gives every column ``j`` a reduced cost ``d_j`` and the program a bound
``LB``, so that every point of it (and so every solution of the whole) costs at least
``LB + d_j x_j`` where ``d_j > 0`` (weak duality; ``bound`` recomputes both from the duals
HiGHS returns, so that they hold whatever its tolerances). A column that is 0 or 1 in every
integer solution (a binary; a transport cell between one-hot ends, ``LinearModel.vars(unit=True)``)
with ``LB + d_j`` above the cost ``UB`` of a solution found is 0 in every solution no dearer
than that one, the optimum among them: it is dropped, and so is every row left empty or left
``u >= 0``. The solution found (``incumbent``: the cheap optimum, each ``u`` at its terms'
maximum, checked against every row) costs ``UB`` and is kept by the reduced program, so the
reduced program's optimum is the whole's; where the reduced solve says otherwise (it found
nothing no dearer), the incumbent is returned. The maxima's own ``u``, and any continuous column
not 0 or 1, are never fixed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, NamedTuple

import numpy as np

from ..errors import ShardingError
from .highs import Solution, Split, relaxation, split

FEASIBLE = 1e-6  # a row or bound may be off by this much (HiGHS's primal tolerance is 1e-7)
SAFETY = 1e-9  # relative: a column is fixed only where its bound exceeds UB by this much more


class Problem(NamedTuple):
    """A program as arrays: costs, 1 for a binary, True for a column 0 or 1 in every integer
    solution, upper bounds (lower ones are 0), and its rows (a ``LinearConstraint``, or none)."""

    cost: np.ndarray
    integer: np.ndarray
    zero_one: np.ndarray
    upper: np.ndarray
    constraints: list


class Shared(NamedTuple):
    """The maxima's rows and variables in a program."""

    rows: np.ndarray  # bool per row: the maxima's rows
    vars: np.ndarray  # each maximum's variable, in the order of its rows
    starts: np.ndarray  # each maximum's first row, counted among the maxima's rows
    weights: np.ndarray  # per maximum's row: its price shared among its rows


class Bound(NamedTuple):
    """What the cheap relaxation proves: every solution costs at least ``value + reduced[j] x_j``
    for each column ``j`` of a positive ``reduced`` (columns of the whole program; 0 for ``u``)."""

    value: float
    reduced: np.ndarray


def shared_of(problem: Problem, maxima) -> Shared | None:
    """The maxima's rows, where each is in the program and its variable in no other row (else None)."""
    a = problem.constraints[0].A.tocsc()
    maxima = sorted(maxima, key=lambda m: m.first)
    rows = np.zeros(a.shape[0], dtype=bool)
    for m in maxima:
        if m.first + m.count > a.shape[0]:
            return None
        rows[m.first:m.first + m.count] = True
    vars_ = np.array([m.var for m in maxima], dtype=np.int64)
    if a[:, vars_][~rows].nnz:
        return None
    counts = np.array([m.count for m in maxima])
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    weights = np.repeat([m.price / m.count for m in maxima], counts)
    return Shared(rows, vars_, starts, weights)


def cheap(problem: Problem, shared: Shared) -> tuple[Problem, np.ndarray]:
    """The relaxation without the maxima's rows and variables, each row's terms priced its share
    (module docstring); and the whole program's columns it keeps, in order."""
    from scipy.optimize import LinearConstraint

    c = problem.constraints[0]
    matrix = c.A.tocsr()
    keep = np.ones(len(problem.cost), dtype=bool)
    keep[shared.vars] = False
    kept = np.flatnonzero(keep)
    terms = -matrix[shared.rows][:, kept]  # row r: its read's terms (the maximum's ``u`` left out)
    cost = problem.cost[kept] + terms.T @ shared.weights
    lb, ub = np.asarray(c.lb, float)[~shared.rows], np.asarray(c.ub, float)[~shared.rows]
    rows = [LinearConstraint(matrix[~shared.rows][:, kept], lb, ub)]
    return Problem(cost, problem.integer[kept], problem.zero_one[kept], problem.upper[kept], rows), kept


def bound(problem: Problem, rows: Split, relaxed) -> tuple[float, np.ndarray] | None:
    """The bound and reduced costs the relaxation's duals prove (module docstring), each column
    bounded by its upper bound, 1 where it is 0 or 1 (a cell: its row sums to at most one binary
    of a one-hot set); None where a column of no finite bound has a negative reduced cost."""
    d, value = problem.cost.copy(), 0.0
    if rows.a_eq is not None:
        y = relaxed.eqlin.marginals
        d -= rows.a_eq.T @ y
        value += rows.b_eq @ y
    if rows.a_ub is not None:
        y = np.minimum(relaxed.ineqlin.marginals, 0.0)  # a wrong-signed dual would bound nothing
        d -= rows.a_ub.T @ y
        value += rows.b_ub @ y
    top = np.where(problem.zero_one, np.minimum(problem.upper, 1.0), problem.upper)
    negative = d < 0
    if np.any(negative & np.isinf(top)):
        return None
    return float(value + d[negative] @ top[negative]), d


def feasible(problem: Problem, x: np.ndarray) -> bool:
    """Every row and bound holds at ``x`` (to ``FEASIBLE``)."""
    c = problem.constraints[0]
    ax = c.A @ x
    return bool(np.all(x >= -FEASIBLE) and np.all(x <= problem.upper + FEASIBLE)
                and np.all(ax >= np.asarray(c.lb, float) - FEASIBLE) and np.all(ax <= np.asarray(c.ub, float) + FEASIBLE))


def incumbent(problem: Problem, shared: Shared, kept: np.ndarray, x: np.ndarray) -> np.ndarray | None:
    """A solution of the whole program from the cheap one ``x``: each maximum's variable at its
    terms' maximum. None where ``x`` is not integral or the result breaks a row."""
    whole = np.zeros(len(problem.cost))
    whole[kept] = x
    zo = problem.zero_one
    if np.any(np.abs(whole[zo] - np.round(whole[zo])) > FEASIBLE):
        return None
    whole[zo] = np.round(whole[zo])
    terms = -(problem.constraints[0].A.tocsr()[shared.rows] @ whole)  # each row's terms (``u`` is 0 here)
    whole[shared.vars] = np.maximum(np.maximum.reduceat(terms, shared.starts), 0.0)
    return whole if feasible(problem, whole) else None


def reduce(problem: Problem, shared: Shared, drop: np.ndarray) -> tuple[Problem, np.ndarray] | None:
    """The program without the columns ``drop`` (a mask) and the rows that leaves empty or holding
    only a maximum's ``u`` (``u >= 0``); and the columns kept. None where a row left empty is broken."""
    from scipy.optimize import LinearConstraint

    c = problem.constraints[0]
    keep = np.flatnonzero(~drop)
    matrix = c.A.tocsr()[:, keep]
    nnz = np.diff(matrix.indptr)
    lb, ub = np.asarray(c.lb, float), np.asarray(c.ub, float)
    empty = nnz == 0
    if np.any(empty & ((lb > FEASIBLE) | (ub < -FEASIBLE))):
        return None
    rows = ~empty & ~(shared.rows & (nnz == 1))
    reduced = LinearConstraint(matrix[rows], lb[rows], ub[rows])
    return Problem(problem.cost[keep], problem.integer[keep], problem.zero_one[keep], problem.upper[keep],
                   [reduced]), keep


def reduced_solve(problem: Problem, shared: Shared, proven: Bound, start: np.ndarray, limit: float,
                  optimum: Callable[[Problem], Solution]) -> Solution | None:
    """The optimum of the whole program: the columns whose bound exceeds ``limit`` dropped, the
    rest solved by ``optimum``. ``start`` is a solution of the whole (checked: None where it is
    not), returned where nothing in the reduced program costs less. Its cost is ``limit`` in the
    search; any other ``limit`` is a test's: a smaller one may drop the optimum, and then the start
    is returned, never a point of the reduced program that breaks the whole's rows."""
    if not feasible(problem, start):
        return None
    ub = float(problem.cost @ start)
    tol = SAFETY * max(abs(limit), 1.0)
    drop = problem.zero_one & (proven.value + proven.reduced > limit + tol)
    fixed = int(drop.sum())
    found = Solution(start, ub, "the cheap relaxation's optimum, no dearer than its bound", True, fixed=fixed)
    if proven.value >= ub - tol:
        return found
    cut = reduce(problem, shared, drop)
    if cut is None:
        return None
    reduced, keep = cut
    try:
        got = optimum(reduced)
    except ShardingError as e:
        if e.rule != "autoshard-infeasible":  # not solved (a time limit): the start, not proven optimal
            gap = (ub - proven.value) / max(abs(ub), 1e-300)
            return replace(found, optimal=False, gap=gap, status=f"{found.status}; the reduced program unsolved: {e}")
        return replace(found, optimal=ub <= limit + tol)  # nothing in the reduced program: nothing cheaper
    values = np.zeros(len(problem.cost))
    values[keep] = got.values
    objective = float(problem.cost @ values)
    if objective > ub or not feasible(problem, values):
        values, objective, status = start, ub, f"{found.status}: the reduced program found nothing cheaper"
    else:
        status = f"{got.status} ({fixed:,} of {len(drop):,} columns fixed at 0 by reduced costs)"
    # every solution of cost up to ``limit`` is in the reduced program: its optimum is the whole's
    # where it is within that (always, with the start's cost as the limit)
    return Solution(values, objective, status, got.optimal and objective <= limit + tol, got.gap, fixed)


def solve(problem: Problem, maxima, optimum: Callable[[Problem], Solution], time_limit: float | None) -> Solution | None:
    """The optimum of ``problem`` through the cheap relaxation (module docstring); None where
    that does not apply (the maxima are not as ``milp.Maximum`` says, the cheap relaxation is not
    solved or not integral): the caller then solves the whole program."""
    shared = shared_of(problem, maxima)
    if shared is None:
        return None
    relaxed_problem, kept = cheap(problem, shared)
    rows = split(relaxed_problem.constraints[0])
    # without presolve: on the 7B step over 8 x 32 x 32 it took 9 of the 24 s and removed 0.25% of the
    # columns; without it, 8.6 s (docs/autoshard.md, "Solve times", seventh session)
    relaxed = relaxation(relaxed_problem.cost, relaxed_problem.constraints, relaxed_problem.upper, time_limit, rows,
                         presolve=False)
    if relaxed.status != 0:
        return None
    start = incumbent(problem, shared, kept, relaxed.x)
    proven = bound(relaxed_problem, rows, relaxed)
    if start is None or proven is None:
        return None
    reduced = np.zeros(len(problem.cost))
    reduced[kept] = proven[1]
    return reduced_solve(problem, shared, Bound(proven[0], reduced), start, float(problem.cost @ start), optimum)


__all__ = ["Bound", "Problem", "Shared", "bound", "cheap", "incumbent", "reduce", "reduced_solve", "shared_of", "solve"]
