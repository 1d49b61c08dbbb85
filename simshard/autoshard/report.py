"""Why the search chose what it chose: the cost breakdown of a solution, and per large op the
factor split taken, the runner-up's cost and what decided between them.

The runner-up of an op is the optimum with the op's chosen strategy forbidden (one more solve):
the whole program re-balances around it, so its extra seconds are what that choice is worth.
What decided: the memory budget where the search without it picks another split for the op;
else the cost the runner-up raises most (compute, or the collectives on one link).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ShardingError
from ..units import fmt_bytes
from .candidates import local_bytes
from .model import SCALE, Search, chosen
from .milp import Solution
from .reads import moves


@dataclass(frozen=True)
class Breakdown:
    """A solution's estimated seconds: compute, and collectives per link (mesh axes)."""

    compute: float
    links: tuple[tuple[tuple[str, ...], float], ...]
    memory: int | None  # the model's peak bytes per device (None: not computed)

    @property
    def communication(self) -> float:
        return sum(s for _, s in self.links)

    @property
    def total(self) -> float:
        return self.compute + self.communication

    def components(self) -> dict[str, float]:
        return {"compute": self.compute} | {f"link {','.join(a) or '-'}": s for a, s in self.links}


@dataclass(frozen=True)
class OpExplanation:
    where: str
    op: str
    shapes: str
    chosen: str
    runner_up: str | None
    extra_seconds: float | None  # what the runner-up costs more, the whole step re-optimised
    decided_by: str
    proven: bool = True  # the runner-up's solve finished (else its best at the time limit: the cost at most)


@dataclass(frozen=True)
class SearchReport:
    seconds: float
    breakdown: Breakdown
    solve_seconds: float
    variables: int
    rows: int
    optimal: bool
    budget: int | None
    ops: tuple[OpExplanation, ...] = ()
    estimated_peak: int | None = None  # the estimate's peak bytes per device (with a budget)
    planned: bool = True  # reshards priced by planning each pair (else the closed form)
    gap: float = 0.0  # not optimal: relative, between its objective and the best bound proven

    def text(self) -> str:
        b = self.breakdown
        lines = [f"estimated step {b.total * 1e3:.4g} ms: compute {b.compute * 1e3:.4g} ms, communication "
                 f"{b.communication * 1e3:.4g} ms"
                 + "".join(f"; {','.join(a) or '-'} {s * 1e3:.4g} ms" for a, s in b.links),
                 f"memory per device (model): {fmt_bytes(b.memory or 0)}"
                 + (f" of {fmt_bytes(self.budget)}; estimated {fmt_bytes(self.estimated_peak)}"
                    if self.budget is not None else " (no budget given)"),
                 f"search: {self.variables} variables, {self.rows} constraints, solved in {self.solve_seconds:.2f} s"
                 + ("" if self.optimal else f" (not proven optimal: within {self.gap:.2%} of the best bound proven)")
                 + ("; reshards priced by the planner" if self.planned
                    else "; reshards priced by the planner's structured path in closed form (a large mesh)")]
        for e in self.ops:
            alt = ("no other split" if e.runner_up is None
                   else f"runner-up {e.runner_up} (+{e.extra_seconds * 1e3:.4g} ms"
                   + (")" if e.proven else " at most: its solve stopped at the time limit, unproven)"))
            lines.append(f"  {e.where} {e.shapes}: {e.chosen}; {alt}; decided by {e.decided_by}")
        return "\n".join(lines)


def picked(search: Search, values, i: int) -> int:
    op = search.ops[i]
    return max(range(len(op.vars)), key=lambda c: values[op.vars[c]])


def breakdown(search: Search, values) -> Breakdown:
    """The seconds of a solution by component, and the model's memory peak."""
    compute = sum(op.site.weight * op.compute[picked(search, values, i)] for i, op in enumerate(search.ops))
    compute += sum(seconds * values[v] for v, seconds in search.loops)
    links: dict[tuple[str, ...], float] = {}
    for move in moves(search.edges, values, chosen):  # each layout a value is resharded to, once
        for axes, sec in search.costs.by_link(move.src, move.dst, move.aval).items():
            links[axes] = links.get(axes, 0.0) + sec * move.weight
    return Breakdown(compute, tuple(sorted(links.items())), memory_peak(search, values))


def memory_peak(search: Search, values) -> int:
    peak = 0
    inside = search.loop_copies()
    for point in search.graph.points:
        terms = list(search.temps.get(point.site, ())) + search.held.get(point.site, []) + inside.get(point.site, [])
        total = sum(c * values[v] for v, c in terms)
        for key in point.live:
            total += local_bytes(chosen(search.dist[key], values), search.graph.values[key])
        peak = max(peak, int(round(total)))
    return peak


def explain(search: Search, best: Solution, budget: int | None, top: int = 4,
            limit: float | None = None) -> tuple[OpExplanation, ...]:
    """The ``top`` ops of most compute (replicated), each with its runner-up (module docstring);
    each extra solve stopped after ``limit`` seconds (its best then, perhaps not the optimum)."""
    free = best if budget is None else (search.unbudgeted if search.unbudgeted is not None  # (kept by ``incumbent``)
                                        else search.model.solve(upto=search.memory_start, time_limit=limit))
    base = breakdown(search, best.values).components()
    heavy = sorted(range(len(search.ops)), key=lambda i: -search.ops[i].site.weight * search.ops[i].compute[0])
    return tuple(_one(search, i, best, free, base, limit) for i in heavy[:top] if search.ops[i].compute[0] > 0)


def _one(search: Search, i: int, best: Solution, free: Solution, base: dict, limit: float | None) -> OpExplanation:
    op = search.ops[i]
    c = picked(search, best.values, i)
    shapes = " x ".join(str(x.aval) for x in op.site.eqn.inputs)
    describe = op.candidates[c].describe(op.rule)
    try:
        alt = search.model.solve(extra=[([(op.vars[c], 1)], 0, 0)], time_limit=limit)
    except ShardingError as e:
        why = ("memory: every other split exceeds the budget" if len(op.vars) > 1 else "the op's rule")
        if e.rule != "autoshard-infeasible":  # stopped at its time limit before finding one
            why = "unknown: the solver found no other split within its time limit"
        return OpExplanation(op.site.path, op.site.eqn.op, shapes, describe, None, None, why)
    r = picked(search, alt.values, i)
    extra = (alt.objective - best.objective) / SCALE
    if picked(search, free.values, i) != c:
        why = f"memory (without the budget it would take {op.candidates[picked(search, free.values, i)].describe(op.rule)})"
    else:
        diffs = breakdown(search, alt.values).components()
        keys = set(diffs) | set(base)
        worst = max(keys, key=lambda k: diffs.get(k, 0.0) - base.get(k, 0.0))
        why = f"{worst} (+{(diffs.get(worst, 0.0) - base.get(worst, 0.0)) * 1e3:.4g} ms)"
    return OpExplanation(op.site.path, op.site.eqn.op, shapes, describe, op.candidates[r].describe(op.rule), extra, why,
                         alt.optimal)
