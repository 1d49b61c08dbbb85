"""benchmarks/autoshard_solve.py cannot rot: the tiny configuration is searched and its figures
are the search's."""


import pytest
from benchmark_loader import load_benchmark



def test_a_small_case_reports_the_searchs_figures():
    pytest.importorskip("scipy")
    bench = load_benchmark("autoshard_solve")
    r = bench.run_case("tiny:2x4")
    report = r["strategy"].report
    assert r["devices"] == 8 and r["seconds"] >= r["solve_seconds"] > 0
    assert r["variables"] == report.variables > 0 and r["step_seconds"] == report.breakdown.total > 0


def test_twice_the_layers_searches_the_same_program():
    """The layers are a scan whose body is searched once: twice as many layers, the same
    variables and rows (only the weights of the body's costs change). Both counts divide by
    every product of mesh axes: the stacked parameters' layouts (a layer dim split over axes)
    depend on that, not on the count."""
    pytest.importorskip("scipy")
    bench = load_benchmark("autoshard_solve")
    short, long = bench.run_case("tiny@8:2x4"), bench.run_case("tiny@16:2x4")
    assert (short["variables"], short["rows"]) == (long["variables"], long["rows"])
    assert long["step_seconds"] > short["step_seconds"]  # the layers are counted, just not searched again
