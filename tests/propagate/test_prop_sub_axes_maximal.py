"""Propagation builds shardings from pieces of axes; where consecutive sub-axes meet it merges
them itself (a Sharding refuses non-maximal sub-axes, Shardy's invariant)."""

import simshard as ss
from simshard.propagate.user_priority import initial_sharding, released_sharding

M = ss.Mesh({"x": 4, "y": 2}, name="m")


def test_held_back_sub_axes_are_replicated_merged_and_released_one_priority_at_a_time():
    s = ss.Sharding.parse('<@m, [{"x":(1)2}p1, {"x":(2)2}p2]>', M)
    start = initial_sharding(s)
    assert str(start) == '<@m, [{}, {}], replicated={"x"}>'
    p1 = released_sharding(start, s, 1)
    assert str(p1) == '<@m, [{"x":(1)2}, {}], replicated={"x":(2)2}>'
    assert str(released_sharding(p1, s, 2)) == '<@m, [{"x":(1)2}, {"x":(2)2}]>'


def test_propagation_with_split_priorities_runs():
    from simshard.tracing import ShapeDtype, trace

    s = ss.Sharding.parse('<@m, [{"x":(1)2}p1, {"x":(2)2}p2]>', M)
    q = ss.propagate(trace(lambda a: a * 2.0, ShapeDtype((8, 8)), in_shardings=(s,)))
    assert str(q.sharding_of(0)) == '<@m, [{"x":(1)2, ?}, {"x":(2)2, ?}]>'


def test_reshape_back_projection_merges_what_it_split():
    # 16 -> 4x4 splits "x" (8) into "x":(1)4 and "x":(4)2; merging 4x4 back to 16 gives "x"
    from simshard.tracing import ShapeDtype, trace

    m = ss.Mesh({"x": 8}, name="m")
    s = ss.Sharding.parse('<@m, [{"x"}]>', m)
    q = ss.propagate(trace(lambda a: a.reshape(4, 4).reshape(16) + 1.0, ShapeDtype((16,)), in_shardings=(s,)))
    assert str(q.sharding_of(0)) == '<@m, [{"x", ?}]>'
