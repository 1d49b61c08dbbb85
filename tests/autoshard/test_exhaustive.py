"""The integer program's optimum is the best of every strategy priced one by one: on small
programs (a matmul chain, a scan whose body is searched once), 1-D and 2-D meshes, with and
without a memory budget."""

from __future__ import annotations

import numpy as np
import pytest

import simshard as ss
from simshard.autoshard import incumbent
from simshard.autoshard.costs import ReshardCosts
from simshard.autoshard.exhaustive import exhaustive, peak_bytes
from simshard.autoshard.graph import build_graph
from simshard.autoshard.model import SCALE, Search
from simshard.errors import ShardingError
from simshard.report.compute import device_of
from simshard.tracing.tracer import ShapeDtype, trace

pytest.importorskip("scipy")

# slow links and a slow device, so that compute and communication both weigh
TOPOLOGY = ss.Topology({"x": ss.Link(1e9, 1e-6), "y": ss.Link(4e9, 2e-6)},
                       device={"flops": 1e9, "memory_bandwidth": 1e10})
F32 = np.float32


def mlp(x, w1, w2):
    return np.maximum(x @ w1, 0) @ w2


def matmul(x, w):
    return x @ w


def layers(h, ws):
    return ss.lax.scan(lambda h, w: (np.maximum(h @ w, 0), None), h, ws)[0]


CASES = {
    "mlp": (mlp, [(16, 8), (8, 32), (32, 8)], {"x": 2}),
    "matmul-2d": (matmul, [(8, 16), (16, 8)], {"x": 2, "y": 2}),
    "scan": (layers, [(8, 8), (3, 8, 8)], {"x": 2}),
}


def search(name, budget=None):
    f, shapes, axes = CASES[name]
    mesh = ss.Mesh(axes)
    program = trace(f, *[ShapeDtype(s, F32) for s in shapes], mesh=mesh)
    return Search(build_graph(program), mesh, ReshardCosts(TOPOLOGY, mesh.size), device_of(TOPOLOGY.device), budget)


def smallest_fitting(s) -> int:
    """The least peak of any strategy: budgets from there on leave some strategies out."""
    return min(exhaustive_peaks(s))


def peak_range(s) -> tuple[int, int]:
    peaks = list(exhaustive_peaks(s))
    return min(peaks), max(peaks)


def exhaustive_peaks(s):
    import itertools

    from simshard.autoshard.exhaustive import peak_bytes

    values = np.zeros(s.model.size)
    for picks in itertools.product(*s.groups):
        values[:] = 0
        values[list(picks)] = 1
        yield peak_bytes(s, values)


@pytest.mark.parametrize("name", sorted(CASES))
def test_optimum_equals_enumeration_without_budget(name):
    s = search(name)
    best = exhaustive(s)
    assert best.count > 100  # a real search, not a forced choice
    assert s.model.solve(gap=0).objective / SCALE == pytest.approx(best.seconds, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("name", ["mlp", "scan"])
@pytest.mark.parametrize("where", [0.0, 0.3, 0.7])
def test_optimum_equals_enumeration_within_budget(name, where):
    low, high = peak_range(search(name))
    budget = int(low + where * (high - low))
    s = search(name, budget)
    best = exhaustive(s, budget)
    assert 0 < best.fitting < best.count  # the budget leaves strategies out
    solved = s.model.solve(gap=0)
    assert solved.objective / SCALE == pytest.approx(best.seconds, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("name", ["mlp", "scan"])
@pytest.mark.parametrize("where", [0.0, 0.3, 0.7, 1.0])
def test_the_budgeted_search_from_its_start_equals_enumeration(name, where):
    """The start (``incumbent``; None where the restricted search fits nothing: the tightest
    budgets) fits and costs no less than the optimum; the branch and bound from it reaches the
    optimum; where the start claims optimality (the budget does not bind) it is."""
    low, high = peak_range(search(name))
    budget = int(low + where * (high - low))
    s = search(name, budget)
    best = exhaustive(s, budget)
    first, proven = incumbent.start(s, None)
    if first is not None:
        assert first.objective / SCALE >= best.seconds * (1 - 1e-9)
        assert peak_bytes(s, first.values) <= budget  # a strategy that fits, by the enumeration's count
    if proven:
        assert first.objective / SCALE == pytest.approx(best.seconds, rel=1e-9, abs=1e-15)
    assert proven or where < 1.0  # at the largest peak nothing binds: the unbudgeted optimum fits
    solved = s.model.solve(gap=0, start=None if first is None else first.values)
    assert solved.objective / SCALE == pytest.approx(best.seconds, rel=1e-9, abs=1e-15)
    assert incumbent.lower_bound(s, solved) <= solved.objective * (1 + 1e-12)


def test_a_budget_below_every_strategy_is_refused_by_name():
    low = smallest_fitting(search("mlp"))
    with pytest.raises(ShardingError, match="no strategy fits"):
        search("mlp", low - 1).model.solve(gap=0)


def test_scan_body_is_searched_once_whatever_its_length():
    mesh = ss.Mesh({"x": 2})

    def of(length):
        program = trace(layers, ShapeDtype((8, 8), F32), ShapeDtype((length, 8, 8), F32), mesh=mesh)
        return Search(build_graph(program), mesh, ReshardCosts(TOPOLOGY, mesh.size), device_of(TOPOLOGY.device))

    short, long = of(4), of(96)
    assert [len(g) for g in long.groups] == [len(g) for g in short.groups]
    assert long.model.size == short.model.size
    body_ops = [op for op in long.ops if op.site.scope == 1]
    assert body_ops and all(op.site.weight == 96 for op in body_ops)
