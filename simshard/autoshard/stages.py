"""Alpa's inter-op pass: the layers split into ``S`` contiguous stages and the batch into ``M``
microbatches, by a dynamic program over (layers placed, stages used), each stage's latency the
intra-op search's (Zheng et al., OSDI '22, section 5; ``docs/autoshard.md``).

A pipelined step costs ``sum_i t_i + (M - 1) max_i t_i + max_i sync_i`` (``report.staged``:
the estimate's own formula), ``t_i`` the slot of stage ``i`` (one microbatch's forward and
backward and its transfers), ``sync_i`` what it runs once per step. The max makes the objective
no sum over stages, so, as Alpa does, every distinct stage latency is tried as the bound
``t_max``; under it, the DP

    F(s, j) = min_{i < j} F(s - 1, i) + t(i, j, s - 1),   F(0, 0) = 0,

over stages ``t(i, j, s)`` that cover layers ``[i, j)`` as stage ``s`` with ``t <= t_max``,
``sync <= sync_max`` and memory within the budget, gives the least sum; the step is at most
``F(S, L) + (M - 1) t_max + sync_max``, with equality at the optimum's own bounds, which are
among those tried. So the least over the bounds is the optimum. A bound whose least possible
step (``S t_min + (M - 1) t_max + sync_max``, or the DP's sum without the sync bound) is no
better than the best found is not solved (Alpa's early stop).

A stage's cost depends on its layer count, its role (first, middle, last, only: the first also
runs what comes before the layers, the last the head and loss), ``M`` (a microbatch's size) and
the microbatches it holds at once (its memory: ``report.staged.held``), so the caller's
``StageCostFn`` is asked once per such key and may cache on it.
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..report.pipeline import Pipeline
from ..report.staged import held, pipeline_seconds


class Role(enum.Enum):
    """Where a stage sits: what it runs besides its layers."""

    FIRST = "first"  # the layers and what precedes them (an embedding)
    MIDDLE = "middle"  # the layers alone
    LAST = "last"  # the layers, the head and the loss
    ONLY = "only"  # one stage: all of it


def role(start: int, end: int, layers: int) -> Role:
    """The role of the stage covering layers ``[start, end)`` of ``layers``."""
    first, last = start == 0, end == layers
    return Role.ONLY if first and last else Role.FIRST if first else Role.LAST if last else Role.MIDDLE


@dataclass(frozen=True)
class StageCost:
    """A stage's slot seconds (microbatch forward and backward, transfers), its once-per-step
    seconds, its bytes per device with its held microbatches, and what it runs (``strategy``)."""

    slot: float
    sync: float
    bytes: int
    strategy: Any = field(default=None, compare=False)


# (layers in the stage, its role, microbatches, microbatches it holds) -> its cost; None: no strategy fits
StageCostFn = Callable[[int, Role, int, int], "StageCost | None"]


@dataclass(frozen=True)
class StagePlan:
    """The split found: layers per stage, ``M``, each stage's cost, and the step's seconds."""

    layers: tuple[int, ...]
    microbatches: int
    costs: tuple[StageCost, ...]
    seconds: float

    @property
    def bubble(self) -> float:
        slots = [c.slot for c in self.costs]
        return sum(slots) - max(slots)


def check(layers: int, stages: int, microbatches: Sequence[int]) -> None:
    """A clear error where no split exists."""
    if stages < 1:
        raise ValueError(f"a pipeline needs at least one stage, got {stages}")
    if layers < stages:
        raise ValueError(f"{layers} layers cannot fill {stages} pipeline stages (each stage needs a layer)")
    if not microbatches or any(m < 1 for m in microbatches):
        raise ValueError(f"microbatch counts must be positive, got {list(microbatches)}")


def step_of(costs: Sequence[StageCost], microbatches: int) -> float:
    return pipeline_seconds([c.slot for c in costs], [c.sync for c in costs], microbatches)


class _Table:
    """Every feasible stage (start, end, index) for one ``M``: its cost, as arrays for the DP."""

    def __init__(self, layers: int, stages: int, m: int, cost: StageCostFn, schedule: str, budget: int | None):
        shape = (stages, layers + 1, layers + 1)
        self.slot, self.sync = np.full(shape, np.inf), np.full(shape, np.inf)
        self.cost: dict[tuple[int, int, int], StageCost] = {}
        pipe = Pipeline(stages, m, schedule)
        for s in range(stages):
            for i in range(s, layers - stages + s + 1):
                for j in range(i + 1, layers - stages + s + 2):
                    c = cost(j - i, role(i, j, layers), m, held(pipe, s))
                    if c is None or (budget is not None and c.bytes > budget):
                        continue
                    self.cost[s, i, j] = c
                    self.slot[s, i, j], self.sync[s, i, j] = c.slot, c.sync

    def solve(self, t_max: float, sync_max: float) -> tuple[float, list[np.ndarray]]:
        """The least sum of slots under the bounds (inf where none), and the DP's choices."""
        stages, n = self.slot.shape[0], self.slot.shape[1]
        f = np.full(n, np.inf)
        f[0] = 0.0
        choices = []
        for s in range(stages):
            w = np.where((self.slot[s] <= t_max) & (self.sync[s] <= sync_max), self.slot[s], np.inf)
            total = f[:, None] + w
            choices.append(np.argmin(total, axis=0))
            f = total.min(axis=0)
        return float(f[-1]), choices

    def split(self, choices: list[np.ndarray]) -> list[tuple[int, int, int]]:
        j, out = self.slot.shape[1] - 1, []
        for s in reversed(range(len(choices))):
            i = int(choices[s][j])
            out.append((s, i, j))
            j = i
        return out[::-1]


def _best_for(table: _Table, m: int, best: float) -> StagePlan | None:
    """The least step for one ``M`` below ``best`` (module docstring), or None."""
    if not table.cost:
        return None
    stages = table.slot.shape[0]
    slots = sorted({c.slot for c in table.cost.values()})
    syncs = sorted({c.sync for c in table.cost.values()})
    found = None
    for t_max in slots:
        if stages * slots[0] + (m - 1) * t_max + syncs[0] >= best:
            break  # every later bound is larger still
        unbound, _ = table.solve(t_max, np.inf)
        for sync_max in syncs:
            if unbound + (m - 1) * t_max + sync_max >= best:
                break
            total, choices = table.solve(t_max, sync_max)
            if total == np.inf:
                continue
            costs = tuple(table.cost[k] for k in table.split(choices))
            seconds = step_of(costs, m)
            if seconds < best:
                best, found = seconds, StagePlan(tuple(j - i for _, i, j in table.split(choices)), m, costs, seconds)
    return found


def plan_stages(layers: int, stages: int, microbatches: Sequence[int], cost: StageCostFn, schedule: str = "1f1b",
                budget: int | None = None) -> StagePlan:
    """The split of ``layers`` into ``stages`` contiguous stages and the ``M`` among ``microbatches``
    of least pipelined step (module docstring); a ValueError where no split fits ``budget``."""
    check(layers, stages, microbatches)
    best, plan = np.inf, None
    for m in sorted(set(microbatches)):
        found = _best_for(_Table(layers, stages, m, cost, schedule, budget), m, best)
        if found is not None:
            best, plan = found.seconds, found
    if plan is None:
        raise ValueError(f"no split of {layers} layers into {stages} stages with {list(microbatches)} microbatches "
                         f"fits {budget:,} bytes per device" if budget is not None else
                         f"no stage of {layers} layers over {stages} stages has a strategy")
    return plan


def exhaustive_stages(layers: int, stages: int, microbatches: Sequence[int], cost: StageCostFn,
                      schedule: str = "1f1b", budget: int | None = None) -> StagePlan | None:
    """Every contiguous split and every ``M`` priced one by one (for tests: the DP's check)."""
    check(layers, stages, microbatches)
    best = None
    for m in sorted(set(microbatches)):
        pipe = Pipeline(stages, m, schedule)
        for cuts in itertools.combinations(range(1, layers), stages - 1):
            bounds = (0,) + cuts + (layers,)
            costs = [cost(b - a, role(a, b, layers), m, held(pipe, s)) for s, (a, b) in enumerate(zip(bounds, bounds[1:]))]
            if any(c is None or (budget is not None and c.bytes > budget) for c in costs):
                continue
            seconds = step_of(costs, m)
            if best is None or seconds < best.seconds:
                best = StagePlan(tuple(b - a for a, b in zip(bounds, bounds[1:])), m, tuple(costs), seconds)
    return best


__all__ = ["Role", "StageCost", "StageCostFn", "StagePlan", "exhaustive_stages", "plan_stages", "role", "step_of"]
