"""benchmarks/machine_costs.py cannot rot: its machine measurements run and give a time each."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_cost_is_measured():
    spec = importlib.util.spec_from_file_location("machine_costs", ROOT / "benchmarks" / "machine_costs.py")
    costs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(costs)
    assert 0 < costs.socket_hop(200) < 0.1
    assert 0 < costs.loop_turn("asyncio", 1000) < 0.01
    assert 0 < costs.per_call(lambda: None, 100) < 0.01
    assert 0 < costs.python_unit(10000) < 1e-4
