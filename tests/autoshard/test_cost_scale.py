"""The costs scaled by a power of two before HiGHS sees them (``highs.cost_scale``): where the
largest cost is over ``LARGEST_COST`` (HiGHS's "excessively large costs"), down to it; the
relaxation's objective and duals come back in the program's own unit, so the bound and reduced
costs that reduced-cost fixing reads from them (``fixing.bound``) are those of the unscaled
program, and the search's optimum is the enumeration's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simshard.autoshard import fixing, highs
from simshard.autoshard.milp import optimum as optimum_of
from tests.autoshard.test_fixing import enumerated
from tests.autoshard.test_reads import LAYOUTS, shared_model

pytest.importorskip("scipy")

LARGE = 2.0 ** 27  # prices of 1 to 50 times this: up to 6.6e9, scaled by 2**-13


def test_the_scale_is_the_power_of_two_highs_advises():
    assert highs.cost_scale(np.array([0.0, 5.0, highs.LARGEST_COST])) == 1.0
    assert highs.cost_scale(np.array([1e-6, -8e7])) == 2.0 ** -7  # HiGHS's advice on the 7B step over 8 x 32 x 32
    assert highs.cost_scale(np.array([1e7])) == 2.0 ** -4
    assert highs.cost_scale(np.zeros(0)) == 1.0
    s = highs.cost_scale(np.array([3.3e11]))
    assert math.log2(s) == int(math.log2(s)) and 3.3e11 * s <= highs.LARGEST_COST < 3.3e11 * s * 2


def large(seed: int):
    """``test_fixing.priced``'s program (its random prices and readers' costs) ``LARGE`` times dearer."""
    rng = np.random.default_rng(seed)
    prices = rng.integers(1, 50, (LAYOUTS, LAYOUTS)).astype(float) * LARGE
    np.fill_diagonal(prices, 0)
    model, src, readers = shared_model(prices, seed % LAYOUTS)
    own = rng.integers(0, 40, (2, LAYOUTS)).astype(float) * LARGE
    for r, dst in enumerate(readers):
        for t, v in enumerate(dst):
            model.add_cost(v, own[r, t])
    return model, prices, own, seed % LAYOUTS


def cheap_of(model):
    integer, cost = model.integrality(), model.costs()
    problem = fixing.Problem(cost, integer, model.zero_one(), np.where(integer == 1, 1.0, np.inf), model.constraints())
    shared = fixing.shared_of(problem, model.maxima)
    return fixing.cheap(problem, shared)[0]


@pytest.mark.parametrize("seed", range(6))
def test_the_relaxation_answers_in_the_programs_unit(monkeypatch, seed):
    """The scaled relaxation's objective, and the bound and reduced costs its duals prove, are the
    unscaled relaxation's (the scale off), to the solver's tolerance."""
    model = large(seed)[0]
    cheap = cheap_of(model)
    assert highs.cost_scale(cheap.cost) < 1.0
    rows = highs.split(cheap.constraints[0])
    scaled = highs.relaxation(cheap.cost, cheap.constraints, cheap.upper, None, rows)
    monkeypatch.setattr(highs, "cost_scale", lambda cost: 1.0)
    plain = highs.relaxation(cheap.cost, cheap.constraints, cheap.upper, None, rows)
    assert scaled.status == plain.status == 0
    assert scaled.fun == pytest.approx(plain.fun, rel=1e-9)
    (bound, reduced), (bound_plain, reduced_plain) = fixing.bound(cheap, rows, scaled), fixing.bound(cheap, rows, plain)
    assert bound == pytest.approx(bound_plain, rel=1e-9) and bound <= scaled.fun * (1 + 1e-12)
    assert bound == pytest.approx(scaled.fun, rel=1e-9)  # duals of the unit of the costs, not 2**13 smaller
    assert np.all(reduced >= -1e-6 * LARGE)


@pytest.mark.parametrize("seed", range(6))
def test_the_optimum_of_large_costs_is_the_enumerations(seed):
    """With fixing (the scaled cheap relaxation's duals) and without it, the optimum of the
    program of large prices is the enumeration's."""
    model, prices, own, fixed = large(seed)
    best = enumerated(prices, own, fixed)
    with_fixing = model.solve()
    assert with_fixing.objective == pytest.approx(best, rel=1e-9)
    assert model.solve(fix=False).objective == pytest.approx(best, rel=1e-9)
    integer, cost = model.integrality(), model.costs()
    problem = fixing.Problem(cost, integer, model.zero_one(), np.where(integer == 1, 1.0, np.inf), model.constraints())
    assert optimum_of(problem, None, 1e-4).objective == pytest.approx(best, rel=1e-9)
