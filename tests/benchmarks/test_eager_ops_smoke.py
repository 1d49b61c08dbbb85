"""benchmarks/eager_ops.py cannot rot: it runs each op once more than it compiles it."""

from benchmark_loader import load_benchmark



def test_every_eager_op_runs_and_is_timed():
    bench = load_benchmark("eager_ops")
    rows = bench.main(["--reps", "1", "--size", "16"])
    assert [r["op"] for r in rows] == list(bench.ops(16))
    assert all(r["first_ms"] > 0 and r["again_ms"] > 0 for r in rows)
