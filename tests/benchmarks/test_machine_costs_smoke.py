"""benchmarks/machine_costs.py cannot rot: its machine measurements run and give a time each."""

from benchmark_loader import load_benchmark



def test_every_cost_is_measured():
    costs = load_benchmark("machine_costs")
    assert 0 < costs.socket_hop(200) < 0.1
    assert 0 < costs.loop_turn("asyncio", 1000) < 0.01
    assert 0 < costs.per_call(lambda: None, 100) < 0.01
    assert 0 < costs.python_unit(10000) < 1e-4
