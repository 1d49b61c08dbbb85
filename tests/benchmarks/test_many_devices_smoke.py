"""benchmarks/many_devices.py cannot rot: a small mesh runs and reports a bitwise result (the
local backend here; the Ray backend across nodes is tests/cluster/test_ray_nodes.py's)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_small_mesh_runs_bitwise(capsys):
    spec = importlib.util.spec_from_file_location("many_devices", ROOT / "benchmarks" / "many_devices.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.main(["--devices", "16", "--backend", "local"])
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("16 devices (1x4x4, 1 node)") and line.endswith("bitwise True"), line
