"""One test per ShardingError rule: the error names the rule and the offending axis / dimension."""

import pytest

import simshard as ss
from simshard import AxisRef, DimSharding, Sharding

MESH = ss.Mesh({"x": 2, "y": 8, "z": 2})


def build(dims, replicated=(), unreduced=(), reduce_op="sum"):
    return Sharding(MESH, dims, replicated, unreduced, reduce_op)


@pytest.mark.parametrize(
    "make, rule, axis, dim",
    [
        (lambda: build([["x"], ["w"]]), "unknown-axis", "w", 1),
        (lambda: build([["x"], []], replicated=["q"]), "unknown-axis", "q", None),
        (lambda: build([["x"], ["x"]]), "duplicate-axis", "x", 1),
        (lambda: build([["x", "x"]]), "duplicate-axis", "x", 0),
        (lambda: build([["x"], []], replicated=["x"]), "duplicate-axis", "x", 0),
        (lambda: build([["x"], []], unreduced=["x"]), "duplicate-axis", "x", 0),
        (lambda: build([[AxisRef("y", (1, 4))], [AxisRef("y", (2, 4))]]), "overlapping-sub-axes", "y", 1),
        (lambda: build([["y"], [AxisRef("y", (2, 2))]]), "overlapping-sub-axes", "y", 1),
        (lambda: build([[AxisRef("y", (1, 3))]]), "invalid-sub-axis", "y", 0),
        (lambda: build([[AxisRef("y", (3, 2))]]), "invalid-sub-axis", "y", 0),
        (lambda: build([[AxisRef("y", (2, 1))]]), "invalid-sub-axis", "y", 0),
        (lambda: build([[AxisRef("y", (1, 8))]]), "invalid-sub-axis", "y", 0),
        (lambda: build([[DimSharding((), priority=1)]][0]), "priority-on-empty-closed-dim", None, 0),
        (lambda: build([DimSharding(("x",), priority=-1)]), "negative-priority", None, 0),
        (lambda: build([["x"]], unreduced=["y"], reduce_op="median"), "unknown-reduce-op", None, None),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_each_rule_names_itself_and_where(make, rule, axis, dim):
    with pytest.raises(ss.ShardingError) as e:
        make()
    err = e.value
    assert err.rule == rule
    assert str(err).startswith(rule + ":")
    if axis is not None:
        assert err.axis == axis and f'"{axis}"' in str(err)
    if dim is not None:
        assert err.dim == dim


def test_incompatible_sub_axes_from_two_different_splits():
    mesh = ss.Mesh({"x": 12})
    with pytest.raises(ss.ShardingError) as e:
        Sharding(mesh, [[AxisRef("x", (1, 2))], [AxisRef("x", (3, 2))]])
    assert e.value.rule == "incompatible-sub-axes" and e.value.axis == "x"


def test_rank_mismatch_names_both_ranks():
    s = build([["x"], ["y"]])
    with pytest.raises(ss.ShardingError) as e:
        ss.layout(s, (4, 8, 2))
    assert e.value.rule == "rank-mismatch" and "rank 3" in str(e.value) and "2 dimension" in str(e.value)


def test_shape_mismatch_when_sharding_an_array():
    import numpy as np

    lay = ss.layout(build([["x"]]), (4,))
    with pytest.raises(ss.ShardingError) as e:
        lay.shard(np.zeros(5))
    assert e.value.rule == "shape-mismatch"


@pytest.mark.parametrize(
    "make, msg",
    [
        (lambda: ss.Mesh({"x": 2, "y": 0}), "size 0"),
        (lambda: ss.Mesh([("x", 2), ("x", 2)]), 'axis "x" appears twice'),
        (lambda: ss.Mesh({"x": 4}, device_ids=[0, 1, 1, 3]), "permutation"),
        (lambda: ss.make_mesh((2, -1, -1), ("a", "b", "c"), devices=8), "at most one"),
        (lambda: ss.make_mesh((3, -1), ("a", "b"), devices=8), "cannot be split"),
        (lambda: ss.make_mesh((2, 2), ("a",), devices=4), "differ in length"),
    ],
)
def test_invalid_meshes(make, msg):
    with pytest.raises(ss.ShardingError) as e:
        make()
    assert e.value.rule == "invalid-mesh" and msg in str(e.value)


def test_errors_are_value_errors_for_callers_that_catch_broadly():
    assert issubclass(ss.ShardingError, ValueError)


# -- hostile input: a ShardingError naming the problem, never another exception (issue 11) -------------
@pytest.mark.parametrize("call, rule, words", [
    (lambda: ss.parse_partition_spec("P(x" + "{[" * 100), "parse", "nested too deeply"),
    (lambda: ss.parse_partition_spec("P(" + "'x', " * 5000 + ")"), "parse", "longer than any PartitionSpec"),
    (lambda: ss.parse_partition_spec(None), "parse", "got NoneType"),
    (lambda: ss.parse_placements("[S(" + "9" * 5000 + ")]"), "invalid-placement", "5000 digits"),
    (lambda: ss.parse_placements("[_S(0, sf=" + "7" * 40 + ")]"), "invalid-placement", "too large"),
    (lambda: ss.Sharding.parse('<@m, [{"x"}]>', None), "invalid-mesh", "got NoneType"),
    (lambda: ss.Sharding.parse('<@m, [{"x"}]>', {"m": "not a mesh"}), "invalid-mesh", "dict of mesh name"),
    (lambda: ss.Sharding.parse(None, ss.Mesh({"x": 2})), "parse", "got NoneType"),
    (lambda: ss.layout(ss.NamedSharding(ss.Mesh({"x": 2}), ss.P("x")), (10**12,)), "too-large", "1000000000000"),
    (lambda: ss.layout(ss.DTensorSpec(ss.Mesh({"x": 2}), (ss.Shard(0),)), (10**12,)), "too-large", "global indices"),
], ids=["deep-brackets", "long-text", "spec-none", "huge-dim", "huge-split-factor", "meshes-none",
        "meshes-not-meshes", "text-none", "huge-layout", "huge-placement-layout"])
def test_hostile_input_is_a_sharding_error(call, rule, words):
    with pytest.raises(ss.ShardingError) as e:
        call()
    assert e.value.rule == rule
    assert words in str(e.value)
