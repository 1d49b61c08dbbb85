"""Alpa's inter-op DP (``autoshard.stages``) against every contiguous split and microbatch count,
on random stage costs (layer counts, roles, held microbatches and budgets), and its clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from simshard.autoshard.stages import Role, StageCost, exhaustive_stages, plan_stages, role, step_of


def random_costs(seed: int, layers: int):
    """A cost function of random but fixed slots, syncs and bytes per (layers, role, M, held);
    a stage whose key draws a low number has no strategy (None)."""
    rng = np.random.default_rng(seed)
    table = {}

    def cost(k: int, r: Role, m: int, held: int) -> StageCost | None:
        key = (k, r, m, held)
        if key not in table:
            head = 3.0 if r in (Role.LAST, Role.ONLY) else 0.0
            slot = (k * rng.uniform(0.5, 1.5) + head) / m + rng.uniform(0, 0.2)
            table[key] = None if rng.uniform() < 0.05 else StageCost(
                slot, float(rng.integers(0, 4)) * 0.1, int(rng.integers(10, 100)) * held, key)
        return table[key]

    return cost


CASES = [(seed, layers, stages) for seed, (layers, stages) in enumerate(
    [(3, 1), (3, 3), (4, 2), (5, 2), (5, 3), (6, 3), (6, 4), (7, 3), (8, 4), (8, 2)])]


@pytest.mark.parametrize("seed,layers,stages", CASES)
@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize("budget", [None, 250, 120])
def test_the_dp_optimum_equals_every_split_priced_one_by_one(seed, layers, stages, schedule, budget):
    cost = random_costs(seed, layers)
    counts = (1, 2, 4, 8)
    best = exhaustive_stages(layers, stages, counts, cost, schedule, budget)
    if best is None:
        with pytest.raises(ValueError, match="fits"):
            plan_stages(layers, stages, counts, cost, schedule, budget)
        return
    plan = plan_stages(layers, stages, counts, cost, schedule, budget)
    assert plan.seconds == pytest.approx(best.seconds, rel=1e-12)
    assert sum(plan.layers) == layers and len(plan.layers) == stages and min(plan.layers) >= 1
    assert plan.seconds == step_of(plan.costs, plan.microbatches)  # the plan's own price, not the DP's bound
    assert budget is None or max(c.bytes for c in plan.costs) <= budget


def test_the_budget_cases_do_leave_splits_out():
    """The budgets above bind: at 120 bytes fewer (split, M) are feasible than without."""
    cost = random_costs(8, 8)
    free = exhaustive_stages(8, 4, (1, 2, 4, 8), cost)
    tight = exhaustive_stages(8, 4, (1, 2, 4, 8), cost, budget=120)
    assert tight is not None and tight.seconds > free.seconds and tight.layers != free.layers


def test_roles():
    assert [role(a, b, 4) for a, b in ((0, 4), (0, 2), (1, 3), (2, 4))] == [Role.ONLY, Role.FIRST, Role.MIDDLE,
                                                                          Role.LAST]


@pytest.mark.parametrize("layers,stages,counts,match", [(2, 3, (1,), "2 layers cannot fill 3"),
                                                        (4, 0, (1,), "at least one stage"),
                                                        (4, 2, (), "microbatch counts")])
def test_bad_input_is_a_clear_error(layers, stages, counts, match):
    with pytest.raises(ValueError, match=match):
        plan_stages(layers, stages, counts, random_costs(0, layers))
