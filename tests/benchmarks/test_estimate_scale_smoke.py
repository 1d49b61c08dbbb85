"""benchmarks/estimate_scale.py cannot rot: a small case runs and its figures are the estimate's."""

from benchmark_loader import load_benchmark



def test_a_small_case_reports_the_estimates_figures():
    bench = load_benchmark("estimate_scale")
    r = bench.run_case("mlp:dp:2x4")
    est = bench.load("mlp").estimate("dp", mesh={"x": 2, "y": 4}, mode="sgd")
    assert r["devices"] == 8 and r["seconds"] > 0
    assert r["received_per_device"] == est.comm.total_received / 8 > 0
    assert r["max_peak"] == est.memory.max_peak


def test_a_pipeline_case_reports_the_pipeline_estimates_figures():
    bench = load_benchmark("estimate_scale")
    r = bench.run_case("tiny:3d:2x2x2:4")
    assert r["devices"] == 8 and r["seconds"] > 0 and r["received_per_device"] > 0 and r["max_peak"] > 0
