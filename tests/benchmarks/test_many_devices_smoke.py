"""benchmarks/many_devices.py cannot rot: a small mesh runs and reports a bitwise result (the
local backend here; the Ray backend across nodes is tests/cluster/test_ray_nodes.py's)."""

from benchmark_loader import load_benchmark



def test_a_small_mesh_runs_bitwise(capsys):
    bench = load_benchmark("many_devices")
    bench.main(["--devices", "16", "--backend", "local"])
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("16 devices (1x4x4, 1 node)") and line.endswith("bitwise True"), line
