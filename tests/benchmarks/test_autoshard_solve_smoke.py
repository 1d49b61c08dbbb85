"""benchmarks/autoshard_solve.py cannot rot: the tiny configuration is searched and its figures
are the search's."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_a_small_case_reports_the_searchs_figures():
    pytest.importorskip("scipy")
    spec = importlib.util.spec_from_file_location("autoshard_solve", ROOT / "benchmarks" / "autoshard_solve.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    r = bench.run_case("tiny:2x4")
    report = r["strategy"].report
    assert r["devices"] == 8 and r["seconds"] >= r["solve_seconds"] > 0
    assert r["variables"] == report.variables > 0 and r["step_seconds"] == report.breakdown.total > 0
