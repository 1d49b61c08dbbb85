"""simshard/cli/summary.py: ranking strategies by a program's own cost within its groups."""

from simshard.cli.summary import StrategySummary, mark_cheapest


def summary(name, time, group=None, key=()):
    own = None if group is None else {"model": "CKKS", "group": group, "key": list(key), "rank": None, "values": {}}
    return StrategySummary(name=name, about="", mesh={"x": 1}, devices=1, verified=True, bitwise=True, max_ulp=None,
                           first_divergence=None, total_bytes=0, min_bytes=0, bytes_per_axis={}, messages=0,
                           collectives=0, estimated_time_s=time, peak_memory_bytes=[0], max_peak_memory_bytes=0,
                           wall_time_s=0.0, program_cost=own)


def test_without_a_program_cost_the_least_time_is_cheapest():
    out = mark_cheapest([summary("a", 2.0), summary("b", 1.0)])
    assert [s.cheapest for s in out] == [False, True]


def test_a_program_cost_ranks_first_within_each_group():
    out = mark_cheapest([summary("a", 1.0, "L1", (128,)), summary("b", 9.0, "L1", (100,)),
                         summary("c", 5.0, "L2", (4096,)), summary("d", 8.0, "L2", (784,)),
                         summary("e", 0.0, "L2", (784,))])
    assert [s.program_cost["rank"] for s in out] == [2, 1, 3, 2, 1]  # ties broken by time
    assert [s.name for s in out if s.cheapest] == ["b", "e"]
