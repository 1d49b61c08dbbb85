"""benchmarks/ray_bench.py cannot rot: each benchmark function runs at a toy size on Ray and
returns numbers. Not a speed test (no figure is compared with a goal). Reuses an initialised Ray."""

import math

import pytest
from benchmark_loader import load_benchmark

ray = pytest.importorskip("ray")

bench = load_benchmark("ray_bench")


def number(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v) and v >= 0


@pytest.fixture(scope="module")
def mesh2(ray_session):
    import simshard as ss

    with bench.ray_mesh_cls()(ss.Mesh({"x": 1, "y": 2})) as devices:  # few actors: each is a process to start
        yield devices


def test_collectives_return_numbers(mesh2):
    res = bench.bench_collectives(mib=1 / 16, devices=2, reps=1, trials=1, mesh=mesh2)
    assert set(res) == set(bench.KINDS)
    for kind, r in res.items():
        assert r["bytes"] > 0, kind
        for k in ("seconds", "gbps", "raw_seconds", "raw_gbps", "ratio"):
            assert number(r[k]), (kind, k, r[k])


def test_mlp_returns_numbers(mesh2):
    r = bench.bench_mlp(batch=16, d=16, d_ff=32, x=1, y=2, trials=1, mesh=mesh2)
    for k in ("ray_seconds", "numpy_seconds", "ratio", "compile_seconds", "max_abs_err"):
        assert number(r[k]), (k, r[k])
    assert r["max_abs_err"] < 1e-4
    assert r["calls_per_run"]["line"] == 2  # one run call per device, on its control line
    assert r["calls_per_run_total"] > 0


def test_startup_returns_numbers(ray_session):
    r = bench.bench_startup(devices=2, batch=8, d=8, d_ff=16)
    for k in ("start_seconds", "compile_seconds", "first_run_seconds", "run_seconds"):
        assert number(r[k]), (k, r[k])
    assert r["calls_per_run"]["line"] == 2


def test_the_script_parses_its_flags():
    with pytest.raises(SystemExit) as e:
        bench.main(["--help"])
    assert e.value.code == 0
