"""A feasible start for the budgeted search's branch and bound, found cheaply.

Under a tight budget HiGHS spends minutes on the root relaxation alone (the memory rows make it
fractional and degenerate: on ``gpt``'s SGD step over 2 x 4, 66,000 simplex iterations) before
its heuristics run, and finds no strategy in that time. Cheaper solves give it one:

1. the search without the budget's rows (its relaxation is integral, no branch and bound);
   where that optimum fits the budget's rows it is the budgeted optimum too, and is returned as
   such;
2. a layout family, solved the same way (without the budget's rows): every op that can split
   over the whole mesh on one factor does so (``whole_mesh``: batch, sequence, heads, a weight's
   dims: whichever the model prices cheapest, op by op; free values as they like). Its ops'
   results are split over every device, so it holds little: it is checked against the budget with its
   layouts held (``fixed``), and where it fits it is a start;
3. the budgeted search restricted, in each one-hot set (an op's candidates, a free value's
   layouts), to the choices of (1) and (2): each op keeps its unbudgeted choice or its family's
   (the mixes between: a data-parallel step keeps its activations split as the family does and
   its parameters' updates replicated as the unbudgeted optimum does). Started from (2), so it
   is never worse than the family; two binaries a set at most, where presolve leaves little;
4. where (3) fits nothing, the same restricted to (1) and the choices holding the fewest bytes
   (each op or value may keep its unbudgeted choice or be split as far as it goes).

The result is a start, not a claim: the whole search then runs from it (``milp.branch_and_bound``).
"""

from __future__ import annotations

import numpy as np

from ..errors import ShardingError
from .candidates import split_axes
from .milp import Solution
from .model import Search

START_GAP = 1e-2  # the restricted search stops within 1% of its optimum: it only gives a start


def held_bytes(search: Search) -> np.ndarray:
    """Per variable, the bytes its binary puts in the layouts it chooses (0 for the rest)."""
    out = np.zeros(search.model.size)
    for key, dist in search.dist.items():
        aval = search.graph.values[key]
        for s, vs in dist.items():
            out[vs] += search.bytes(s, aval)
    return out


def start(search: Search, time_limit: float | None) -> tuple[Solution | None, bool]:
    """A solution of the budgeted search (None where no restricted search fits anything) and
    whether it is the search's optimum (module docstring)."""
    if search.unbudgeted is None:  # the budget's rows left out: the same for every budget
        search.unbudgeted = search.model.solve(upto=search.memory_start, time_limit=time_limit)
        search.family = unbudgeted_family(search, time_limit)
    free = search.unbudgeted
    family = None if search.family is None else fixed(search, search.family.values, time_limit)
    found = None  # a start, not the answer: 1% from a restricted optimum is close enough
    if search.family is not None:
        found = restricted(search, crossing(search, free.values, search.family.values), time_limit, family)
    if found is None:
        found = restricted(search, restriction(search, free.values), time_limit, None)
    if found is None or (family is not None and family.objective < found.objective):
        found = family  # HiGHS was started from it: only its tolerances could leave it better
    if found is None:
        return None, False
    # the budgeted optimum costs no less than the unbudgeted one: reaching it within the budget proves it
    same = abs(free.objective - found.objective) <= 1e-9 * max(1.0, abs(free.objective))
    return found, bool(free.optimal and same)


def unbudgeted_family(search: Search, time_limit) -> Solution | None:
    """The optimum of the family (``whole_mesh``) without the budget's rows; None where the
    solver stops before finding one."""
    try:
        return search.model.solve(upto=search.memory_start, allowed=whole_mesh(search), time_limit=time_limit)
    except ShardingError:
        return None


def restricted(search: Search, allowed: np.ndarray, time_limit, begin: Solution | None) -> Solution | None:
    """The budgeted search within ``allowed`` (from ``begin``, where given), to ``START_GAP``;
    None where nothing there fits."""
    try:
        return search.model.solve(allowed=allowed, time_limit=time_limit, gap=START_GAP,
                                  start=None if begin is None else begin.values)
    except ShardingError as e:
        if e.rule != "autoshard-infeasible":
            raise
        return None


def fixed(search: Search, values: np.ndarray, time_limit) -> Solution | None:
    """The budgeted search with every binary held where ``values`` sets it: the solution
    completed (its continuous variables: blocks, copies), or None where it does not fit."""
    return restricted(search, values > 0.5, time_limit, None)


def whole_mesh(search: Search) -> np.ndarray:
    """The family's binaries (module docstring): of each op that has candidates putting every
    split axis on a single factor, those; every other binary allowed."""
    axes = set(split_axes(search.mesh))
    allowed = np.ones(search.model.size, dtype=bool)
    for op in search.ops:
        whole = [v for c, v in zip(op.candidates, op.vars)
                 if len(c.assignment) == 1 and set(c.assignment[0][1]) == axes]
        if whole:
            allowed[list(op.vars)] = False
            allowed[whole] = True
    return allowed


def lower_bound(search: Search, found: Solution) -> float:
    """The best bound proven on the budgeted optimum: the solver's, or the unbudgeted optimum."""
    solver = found.objective * (1 - found.gap) if np.isfinite(found.gap) else -np.inf
    free = search.unbudgeted.objective if search.unbudgeted is not None and search.unbudgeted.optimal else -np.inf
    return max(solver, free)


def crossing(search: Search, *solutions: np.ndarray) -> np.ndarray:
    """The binaries kept: per one-hot set, those any of ``solutions`` chooses."""
    allowed = np.zeros(search.model.size, dtype=bool)
    for group in search.groups:
        group = np.asarray(group)
        for values in solutions:
            allowed[group[values[group] > 0.5]] = True
    return allowed


def restriction(search: Search, values: np.ndarray) -> np.ndarray:
    """The binaries kept: per one-hot set, the one ``values`` chooses and those of fewest bytes."""
    held = held_bytes(search)
    allowed = np.zeros(search.model.size, dtype=bool)
    for group in search.groups:
        group = np.asarray(group)
        allowed[group[values[group] > 0.5]] = True
        allowed[group[held[group] <= held[group].min()]] = True
    return allowed


__all__ = ["START_GAP", "crossing", "fixed", "held_bytes", "lower_bound", "restriction", "start", "whole_mesh"]
