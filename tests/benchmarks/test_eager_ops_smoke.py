"""benchmarks/eager_ops.py cannot rot: it runs each op once more than it compiles it."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_eager_op_runs_and_is_timed():
    spec = importlib.util.spec_from_file_location("eager_ops", ROOT / "benchmarks" / "eager_ops.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.main(["--reps", "1", "--size", "16"])
    assert [r["op"] for r in rows] == list(bench.ops(16))
    assert all(r["first_ms"] > 0 and r["again_ms"] > 0 for r in rows)
