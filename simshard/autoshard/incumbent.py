"""A feasible start for the budgeted search's branch and bound, found cheaply.

Under a tight budget HiGHS spends minutes on the root relaxation alone (the memory rows make it
fractional and degenerate: on ``gpt``'s SGD step over 2 x 4, 66,000 simplex iterations) before
its heuristics run, and finds no strategy in that time. Two cheaper solves give it one:

1. the search without the budget's rows (its relaxation is integral, no branch and bound);
   where that optimum fits the budget's rows it is the budgeted optimum too, and is returned as
   such;
2. else the budgeted search restricted, in each one-hot set (an op's candidates, a free
   value's layouts), to the choice of (1) and the choices holding the fewest bytes: each
   op or value may keep its unbudgeted choice or be split as far as it goes; a small program
   whose optimum is a strategy of the whole search (ZeRO-like: the largest values split).

The result is a start, not a claim: the whole search then runs from it (``milp.branch_and_bound``).
"""

from __future__ import annotations

import numpy as np

from ..errors import ShardingError
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
    """A solution of the budgeted search (None where the restricted search fits nothing) and
    whether it is the search's optimum (module docstring)."""
    if search.unbudgeted is None:  # the budget's rows left out: the same for every budget
        search.unbudgeted = search.model.solve(upto=search.memory_start, time_limit=time_limit)
    free = search.unbudgeted
    try:  # a start, not the answer: 1% from the restricted optimum is close enough
        blocks = search.model.solve(allowed=restriction(search, free.values), time_limit=time_limit, gap=START_GAP)
    except ShardingError as e:
        if e.rule != "autoshard-infeasible":
            raise
        return None, False
    # the budgeted optimum costs no less than the unbudgeted one: reaching it within the budget proves it
    same = abs(free.objective - blocks.objective) <= 1e-9 * max(1.0, abs(free.objective))
    return blocks, bool(free.optimal and same)


def lower_bound(search: Search, found: Solution) -> float:
    """The best bound proven on the budgeted optimum: the solver's, or the unbudgeted optimum."""
    solver = found.objective * (1 - found.gap) if np.isfinite(found.gap) else -np.inf
    free = search.unbudgeted.objective if search.unbudgeted is not None and search.unbudgeted.optimal else -np.inf
    return max(solver, free)


def restriction(search: Search, values: np.ndarray) -> np.ndarray:
    """The binaries kept: per one-hot set, the one ``values`` chooses and those of fewest bytes."""
    held = held_bytes(search)
    allowed = np.zeros(search.model.size, dtype=bool)
    for group in search.groups:
        group = np.asarray(group)
        allowed[group[values[group] > 0.5]] = True
        allowed[group[held[group] <= held[group].min()]] = True
    return allowed


__all__ = ["START_GAP", "held_bytes", "lower_bound", "restriction", "start"]
