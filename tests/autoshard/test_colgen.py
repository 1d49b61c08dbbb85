"""The relaxation with its transport cells priced lazily (``autoshard/colgen.py``) gives the
whole program's optimum: on small programs and meshes of one to three axes, the solve that starts
from a few cells and adds those of negative reduced cost reaches the optimum of the whole
program (every cell and every shared-read row given to HiGHS at once) and the best of every
strategy priced one by one, on a restricted program of fewer cells."""

from __future__ import annotations

import numpy as np
import pytest

import simshard as ss
from simshard.autoshard import colgen
from simshard.autoshard.costs import ReshardCosts
from simshard.autoshard.exhaustive import exhaustive
from simshard.autoshard.graph import build_graph
from simshard.autoshard.milp import LinearModel
from simshard.autoshard.model import SCALE, Search
from simshard.report.compute import device_of
from simshard.tracing.tracer import ShapeDtype, trace

pytest.importorskip("scipy")
pytest.importorskip("highspy")

TOPOLOGY = ss.Topology({"x": ss.Link(1e9, 1e-6), "y": ss.Link(4e9, 2e-6), "z": ss.Link(2e9, 1e-6)},
                       device={"flops": 1e9, "memory_bandwidth": 1e10})
F32 = np.float32


def mlp(x, w1, w2):
    return np.maximum(x @ w1, 0) @ w2


def shared(x, w):
    """One value read by three ops in two layouts: its reshard to a layout is paid once."""
    h = x @ w
    return (h + 1.0) * h, h.sum(axis=0)


def layers(h, ws):
    return ss.lax.scan(lambda h, w: (np.maximum(h @ w, 0), None), h, ws)[0]


ENUMERABLE = ("mlp-x", "shared-x")
CASES = {
    "mlp-x": (mlp, [(16, 8), (8, 32), (32, 8)], {"x": 2}),
    "mlp-xyz": (mlp, [(16, 8), (8, 32), (32, 8)], {"x": 2, "y": 2, "z": 2}),
    "shared-x": (shared, [(8, 16), (16, 8)], {"x": 2}),
    "shared-xy": (shared, [(8, 16), (16, 8)], {"x": 2, "y": 2}),
    "scan-xyz": (layers, [(8, 8), (4, 8, 8)], {"x": 2, "y": 2, "z": 2}),
}


def search(name, budget=None):
    f, shapes, axes = CASES[name]
    mesh = ss.Mesh(axes)
    program = trace(f, *[ShapeDtype(s, F32) for s in shapes], mesh=mesh)
    return Search(build_graph(program), mesh, ReshardCosts(TOPOLOGY, mesh.size), device_of(TOPOLOGY.device), budget)


@pytest.fixture
def restricted(monkeypatch):
    """The restricted programs the lazy solves ended on (``colgen.relax``'s)."""
    seen = []
    real = colgen.relax

    def spy(*args, **kw):
        got = real(*args, **kw)
        seen.append(got)
        return got

    monkeypatch.setattr(colgen, "relax", spy)
    return seen


@pytest.mark.parametrize("margin", [0.0, colgen.MARGIN])
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_lazy_optimum_is_the_whole_programs(name, margin, restricted, monkeypatch):
    """With or without the cells near entering added early (``MARGIN``): the whole optimum;
    without, on cells some of which HiGHS is never given."""
    monkeypatch.setattr(colgen, "MARGIN", margin)
    s = search(name)
    whole = LinearModel.solve(s.model, gap=0)  # every cell and row at once
    lazy = s.model.solve(gap=0)
    assert "integral" in lazy.status and len(restricted) == 1
    assert lazy.objective == pytest.approx(whole.objective, rel=1e-9, abs=1e-9)
    cells = sum(count for _, count in s.model.lazy)
    assert margin > 0 or restricted[0].columns < cells  # some cells never given to HiGHS
    if name in ENUMERABLE:  # the larger meshes have too many strategies to enumerate
        assert lazy.objective / SCALE == pytest.approx(exhaustive(s).seconds, rel=1e-9, abs=1e-15)


def test_the_lazy_solution_is_a_strategy_of_the_whole_program():
    """Every row of the whole program holds at the lazy solution (the cells never given are 0)."""
    s = search("mlp-xyz")
    lazy = s.model.solve(gap=0)
    constraint = s.model.constraints()[0]
    activity = constraint.A @ lazy.values
    assert np.all(activity >= np.asarray(constraint.lb) - 1e-7) and np.all(activity <= np.asarray(constraint.ub) + 1e-7)
    assert lazy.values @ s.model.costs() == pytest.approx(lazy.objective, rel=1e-9)


@pytest.mark.parametrize("name", ["mlp-x", "shared-x"])
def test_with_memory_rows_the_lazy_search_still_reaches_the_optimum(name, restricted):
    """The memory rows name cells too (their reshard buffers): priced by their duals, they keep the
    lazy solve exact; where its relaxation is fractional the whole program is solved."""
    low, high = peak_range(search(name))
    s = search(name, int(low + 0.3 * (high - low)))
    whole = LinearModel.solve(s.model, gap=0)
    s.model.plain_rows = s.model.row_count  # the lazy solve on the budget's rows too
    assert s.model.solve(gap=0).objective == pytest.approx(whole.objective, rel=1e-9, abs=1e-9)
    assert restricted  # the lazy solve ran


def test_shared_rows_are_substituted():
    """``u >= t_1`` and ``u >= t_2`` (``u`` in no other row) become ``z + (t_1 + t_2) / 2 - t_r >= 0``
    in ``u``'s column, the price of ``u`` spread as half on each read's terms; other rows stay."""
    from scipy.sparse import csr_array

    from simshard.autoshard.cuts import shared_rows

    a = csr_array(np.array([[1.0, -1.0, 0.0, 0.0], [1.0, 0.0, -1.0, -1.0], [0.0, 1.0, 1.0, 0.0]]))
    lb, ub = np.array([0.0, 0.0, 1.0]), np.array([np.inf, np.inf, 1.0])
    shared = shared_rows(a, lb, ub, np.array([0, 1, 1, 1]))
    assert shared.rows.tolist() == [0, 1] and shared.groups.tolist() == [0]
    assert shared.mean.toarray().tolist() == [[0.0, 0.5, 0.5, 0.5]]
    assert shared.cuts.toarray().tolist() == [[1.0, -0.5, 0.5, 0.5], [1.0, 0.5, -0.5, -0.5]]
    assert len(shared_rows(a, lb, ub, np.array([1, 1, 1, 1])).rows) == 0  # a binary is no u


def peak_range(s) -> tuple[int, int]:
    import itertools

    from simshard.autoshard.exhaustive import peak_bytes

    values, peaks = np.zeros(s.model.size), []
    for picks in itertools.product(*s.groups):
        values[:] = 0
        values[list(picks)] = 1
        peaks.append(peak_bytes(s, values))
    return min(peaks), max(peaks)


def gpt_search() -> Search:
    """``gpt``'s tiny SGD step on 2 x 2, whose lazy search adds cuts."""
    import optree

    from simshard.programs import gpt
    from simshard.programs.auto import step_and_ties

    f, args, ties = step_and_ties(gpt.program("tiny"), "sgd")
    mesh = ss.Mesh({"x": 2, "y": 2})
    abstract = optree.tree_map(lambda a: ShapeDtype(a.shape, a.dtype) if isinstance(a, np.ndarray) else a, args)
    program = trace(f, *abstract, mesh=mesh)
    topology = ss.Topology({}, "nvlink", device="h100")
    return Search(build_graph(program), mesh, ReshardCosts(topology, mesh.size), device_of("h100"), None, ties)


def test_gpt_step_with_cuts_reaches_the_whole_optimum(restricted):
    """Shared rows are violated and added as cuts over rounds (the small programs above need
    none); the optimum is the whole program's and every row of the whole program holds at it (a
    cut given wrong entries once left 14 violated on the 7B step)."""
    s = gpt_search()
    lazy = s.model.solve(gap=0)
    assert restricted[0].cuts > 0
    assert lazy.objective == pytest.approx(LinearModel.solve(s.model, gap=0).objective, rel=1e-9)
    constraint = s.model.constraints()[0]
    activity = constraint.A @ lazy.values
    assert np.all(activity >= np.asarray(constraint.lb) - 1e-7) and np.all(activity <= np.asarray(constraint.ub) + 1e-7)


def test_a_solution_breaking_a_row_is_refused_with_a_warning(monkeypatch):
    """Were the cuts' check wrong (here: it finds nothing), the solution breaking rows of the
    whole program is not returned: a warning says so and the whole program is solved."""
    s = gpt_search()
    monkeypatch.setattr(colgen, "violated", lambda r, x: np.zeros(0, dtype=np.int64))
    with pytest.warns(UserWarning, match="breaks .* rows of the whole program"):
        found = s.model.solve(gap=0)
    assert found.objective == pytest.approx(LinearModel.solve(s.model, gap=0).objective, rel=1e-9)
