"""Reduced-cost fixing (``autoshard/fixing.py``): the columns a cheaper relaxation (the shared
reads' rows left out, their price shared among the reads) rules out of every solution no dearer
than one found are dropped before the program is solved. The optimum does not change (the
whole program's, and the enumeration's), columns are dropped, and a wrong limit (one below the
optimum, which would drop the optimum's own columns) returns the start, a solution of the whole,
never a point of the reduced program that breaks the whole's rows."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import simshard as ss
from simshard.autoshard import fixing
from simshard.errors import ShardingError
from simshard.autoshard.costs import ReshardCosts
from simshard.autoshard.exhaustive import exhaustive
from simshard.autoshard.graph import build_graph
from simshard.autoshard.milp import optimum as optimum_of
from simshard.autoshard.model import SCALE, Search
from simshard.report.compute import device_of
from simshard.tracing.tracer import ShapeDtype, trace
from tests.autoshard.test_exhaustive import TOPOLOGY
from tests.autoshard.test_reads import LAYOUTS, shared_model

pytest.importorskip("scipy")


def priced(seed: int):
    """``test_reads``'s value of three layouts read by two readers of their own layouts and one
    of a fixed layout, with random reshard prices and random costs on the readers' choices."""
    rng = np.random.default_rng(seed)
    prices = rng.integers(1, 50, (LAYOUTS, LAYOUTS)).astype(float)
    np.fill_diagonal(prices, 0)
    model, src, readers = shared_model(prices, seed % LAYOUTS)
    own = rng.integers(0, 40, (2, LAYOUTS)).astype(float)
    for r, dst in enumerate(readers):
        for t, v in enumerate(dst):
            model.add_cost(v, own[r, t])
    return model, prices, own, seed % LAYOUTS


def enumerated(prices, own, fixed) -> float:
    """The least cost over every choice of the source's layout and the two readers': their own
    costs and each copy made (a target other than the source's) paid once."""
    return min(own[0, a] + own[1, b] + sum(prices[s, t] for t in {a, b, fixed} - {s})
               for s, a, b in itertools.product(range(LAYOUTS), repeat=3))


def problem_of(model) -> fixing.Problem:
    integer = model.integrality()
    return fixing.Problem(model.costs(), integer, model.zero_one(), np.where(integer == 1, 1.0, np.inf),
                          model.constraints())


def pieces(model):
    problem = problem_of(model)
    shared = fixing.shared_of(problem, model.maxima)
    cheap, kept = fixing.cheap(problem, shared)
    rows = fixing.split(cheap.constraints[0])
    relaxed = fixing.relaxation(cheap.cost, cheap.constraints, cheap.upper, None, rows)
    value, reduced = fixing.bound(cheap, rows, relaxed)
    whole = np.zeros(len(problem.cost))
    whole[kept] = reduced
    start = fixing.incumbent(problem, shared, kept, relaxed.x)
    return problem, shared, fixing.Bound(value, whole), start


def test_the_optimum_with_fixing_is_the_optimum_without_and_the_enumerations():
    """On 24 random pricings: the same optimum each time, and columns fixed in most of them (a
    column goes only where its bound exceeds the start's cost: not always on 33 columns)."""
    fixed_counts = []
    for seed in range(24):
        model, prices, own, fixed = priced(seed)
        assert model.maxima  # shared reads: pairs several reads can move
        with_fixing, without = model.solve(gap=0), model.solve(gap=0, fix=False)
        assert with_fixing.objective == pytest.approx(without.objective, rel=1e-9, abs=1e-9)
        assert with_fixing.objective == pytest.approx(enumerated(prices, own, fixed), rel=1e-9, abs=1e-9)
        assert without.fixed == 0
        fixed_counts.append(with_fixing.fixed)
    assert sum(n > 0 for n in fixed_counts) >= 12, fixed_counts


def copy_program():
    prices = np.array([[0, 10, 10], [1, 0, 1], [1, 1, 0]], dtype=float)
    model, src, readers = shared_model(prices, fixed=1)
    for dst in readers:
        model.add_cost(dst[1], 3)
        model.add_cost(dst[2], 3)
    model.add_cost(src[1], 100)
    model.add_cost(src[2], 100)
    return model, src


def test_the_shared_reads_matter_and_their_columns_go():
    """Where sharing decides the bound: the source held in layout 0 (its others cost 100), the
    two readers cheapest in layout 0 (3 elsewhere), the third reading layout 1 (a copy of 10).
    The optimum makes that one copy, 10; the cheap relaxation prices the pair (0, 1), which all
    three reads can make, a third to each, so its bound is 10 / 3: the reduced program is solved
    (the source's other layouts dropped), and gives the optimum."""
    model, src = copy_program()
    problem, shared, proven, start = pieces(model)
    assert proven.value == pytest.approx(10 / 3, rel=1e-9)
    assert problem.cost @ start == pytest.approx(10)
    got = model.solve(gap=0)
    assert got.objective == pytest.approx(10) and got.fixed >= 2
    assert "columns fixed at 0" in got.status
    assert got.values[src[1]] == got.values[src[2]] == 0


def heads(x, w1, w2):
    h = np.maximum(x, 0)
    return h @ w1, h @ w2, h * 2


def residual(x, w1, w2):
    return np.maximum(x @ w1, 0) @ w2 + x


SHARED = {  # programs whose values several ops read: the model has maxima
    "heads": (heads, [(16, 8), (8, 32), (8, 16)]),
    "residual": (residual, [(16, 8), (8, 32), (32, 8)]),
}


def shared_search(name: str, budget: int | None = None) -> Search:
    f, shapes = SHARED[name]
    mesh = ss.Mesh({"x": 2})
    program = trace(f, *[ShapeDtype(s, np.float32) for s in shapes], mesh=mesh)
    return Search(build_graph(program), mesh, ReshardCosts(TOPOLOGY, mesh.size), device_of(TOPOLOGY.device), budget)


@pytest.mark.parametrize("name", sorted(SHARED))
def test_search_programs_keep_their_optimum(name):
    s = shared_search(name)
    best = exhaustive(s)
    assert best.count > 10_000
    solved = s.model.solve(gap=0)
    assert s.model.maxima and solved.fixed > 0
    assert solved.objective == pytest.approx(s.model.solve(gap=0, fix=False).objective, rel=1e-9, abs=1e-12)
    assert solved.objective / SCALE == pytest.approx(best.seconds, rel=1e-9, abs=1e-15)


def test_a_budget_s_rows_keep_the_whole_program():
    """Under a budget the memory rows make the cheap relaxation fractional (its solve would be
    wasted): fixing is tried only on the rows before them (the budgeted search's unbudgeted
    start), not where they are kept."""
    s = shared_search("residual", budget=10**9)
    assert s.model.row_count > s.memory_start
    free, budgeted = s.model.solve(gap=0, upto=s.memory_start), s.model.solve(gap=0)
    assert free.fixed > 0 and budgeted.fixed == 0
    assert budgeted.objective == pytest.approx(free.objective, rel=1e-9)  # a budget that binds nothing


@pytest.mark.parametrize("seed", range(8))
def test_a_limit_below_the_optimum_never_returns_a_broken_point(monkeypatch, seed):
    """A limit below the optimum (the cheap bound less one) drops columns every solution needs:
    the reduced program then leaves a one-hot row empty (refused: the whole program is solved)
    or holds nothing no dearer than the start (the start comes back, a solution of the whole at
    its own cost, not claimed optimal unless it is); never a point that breaks a row of the whole,
    nor a cost below the optimum."""
    model, prices, own, fixed = priced(seed)
    best = enumerated(prices, own, fixed)
    real, seen = fixing.reduced_solve, []

    def too_small(problem, shared, proven, start, limit, optimum):
        got = real(problem, shared, proven, start, proven.value - 1.0, optimum)
        seen.append(got)
        return got

    monkeypatch.setattr(fixing, "reduced_solve", too_small)
    got = model.solve(gap=0)
    problem = problem_of(model)
    assert fixing.feasible(problem, got.values)
    assert got.objective == pytest.approx(problem.cost @ got.values, rel=1e-12)
    assert got.objective >= best - 1e-9
    assert not got.optimal or got.objective == pytest.approx(best, rel=1e-9, abs=1e-9)
    assert seen  # the wrong limit was used


def test_the_reduced_program_below_a_wrong_limit_returns_the_start():
    """``test_the_shared_reads_matter_and_their_columns_go``'s program with the limit at its bound
    (10 / 3, below the optimum 10): columns go, the reduced program's optimum is the start (the
    cheap optimum's columns stay: their reduced costs are 0), above the limit, so not claimed
    optimal: with such a limit the reduced program need not hold the optimum."""
    model, _ = copy_program()
    problem, shared, proven, start = pieces(model)
    got = fixing.reduced_solve(problem, shared, proven, start, proven.value, lambda p: optimum_of(p, None, 0))
    np.testing.assert_allclose(got.values, start, atol=1e-9)
    assert got.objective == pytest.approx(10) and not got.optimal and got.fixed > 0


def test_a_reduced_program_left_unsolved_returns_the_start_not_claimed_optimal():
    """Where the reduced program is not solved (a time limit, HiGHS finding no point in it:
    ``autoshard-unsolved``), the start comes back with the gap to the bound proven, not claimed
    optimal; only a reduced program with no point at all (``autoshard-infeasible``) proves that
    nothing is cheaper than the start."""
    model, _ = copy_program()
    problem, shared, proven, start = pieces(model)

    def unsolved(p):
        raise ShardingError("autoshard-unsolved", "the solver found no strategy: Time limit reached")

    got = fixing.reduced_solve(problem, shared, proven, start, float(problem.cost @ start), unsolved)
    np.testing.assert_allclose(got.values, start, atol=1e-9)
    assert not got.optimal and "unsolved" in got.status
    assert got.gap == pytest.approx((10 - 10 / 3) / 10, rel=1e-9)


def test_a_start_that_breaks_a_row_is_refused():
    """``reduced_solve`` checks its start against every row: a broken one (no layout chosen, so
    it costs less than any strategy) gives None, and ``solve`` then solves the whole program."""
    model, prices, own, fixed = priced(1)
    problem, shared, proven, start = pieces(model)
    broken = start.copy()
    broken[problem.integer == 1] = 0.0
    assert problem.cost @ broken < problem.cost @ start
    assert fixing.reduced_solve(problem, shared, proven, broken, float(problem.cost @ broken),
                                lambda p: pytest.fail("solved from a broken start")) is None


def test_a_broken_incumbent_falls_back_to_the_whole_program(monkeypatch):
    """Where the cheap relaxation gives no solution of the whole (here: forced), ``solve`` returns
    None and the whole program is solved: the same optimum, nothing fixed."""
    model, prices, own, fixed = priced(3)
    monkeypatch.setattr(fixing, "incumbent", lambda *a: None)
    got = model.solve(gap=0)
    assert got.fixed == 0
    assert got.objective == pytest.approx(enumerated(prices, own, fixed), rel=1e-9, abs=1e-9)
