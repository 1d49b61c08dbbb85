"""Placement lists (DTensor's view): conformance with real DTensor layouts and the extension contract."""


import numpy as np
import pytest

import simshard as ss
from user_placements import Cyclic
from casedata import load_cases

LAYOUT_CASES = load_cases("dtensor_layout.json")


parse_placement = ss.parse_placement


@pytest.mark.parametrize("case", LAYOUT_CASES, ids=[c["id"] for c in LAYOUT_CASES])
def test_dtensor_layout_conformance(case):
    mesh = ss.Mesh(list(zip(case["mesh_dim_names"], case["mesh_shape"])))
    spec = ss.DTensorSpec(mesh, [parse_placement(p) for p in case["placements"]])
    lay = ss.layout(spec, case["global_shape"])
    assert len(case["ranks"]) == mesh.size
    for rank in case["ranks"]:
        dev = mesh.device(rank["coord"])
        assert dev == rank["rank"]
        assert lay.local_shape(dev) == tuple(rank["local_shape"]), rank
        want = rank["global_indices_per_dim"] or [None] * len(case["global_shape"])
        for k, (got, expect) in enumerate(zip(lay.indices(dev), want)):
            if expect is None:  # not observable in the real run: the shard is empty along another dim
                assert 0 in lay.local_shape(dev)
            else:
                assert got.tolist() == expect, (k, rank)


def test_negative_shard_dim_is_normalized():
    mesh = ss.Mesh({"x": 4})
    spec = ss.DTensorSpec(mesh, [ss.Shard(-1)])
    assert ss.layout(spec, (4, 16)).same_as(ss.layout(ss.DTensorSpec(mesh, [ss.Shard(1)]), (4, 16)))
    assert spec.normalized(2).placements == (ss.Shard(1),)


def test_shard_dim_out_of_range():
    mesh = ss.Mesh({"x": 4})
    with pytest.raises(ss.ShardingError) as e:
        ss.layout(ss.DTensorSpec(mesh, [ss.Shard(2)]), (4, 4))
    assert e.value.rule == "invalid-placement"


def test_placement_count_must_match_mesh():
    with pytest.raises(ss.ShardingError) as e:
        ss.DTensorSpec(ss.Mesh({"x": 2, "y": 2}), [ss.Shard(0)])
    assert e.value.rule == "placement-count"


def test_nested_uneven_rule_10_over_2x4():
    mesh = ss.Mesh({"x": 2, "y": 4})
    lay = ss.layout(ss.DTensorSpec(mesh, [ss.Shard(0), ss.Shard(0)]), (10,))
    assert [lay.local_shape(d)[0] for d in mesh.device_ids] == [2, 2, 1, 0, 2, 2, 1, 0]


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "avg"])
def test_partial_round_trips_exactly(op):
    mesh = ss.Mesh({"x": 2, "y": 2})
    spec = ss.DTensorSpec(mesh, [ss.Partial(op), ss.Shard(0)])
    lay = ss.layout(spec, (6, 3))
    a = np.arange(18, dtype=np.float64).reshape(6, 3) - 7
    shards = lay.shard(a)
    assert np.array_equal(lay.assemble(shards), a)
    assert lay.reduce_groups() == [(0, 2), (1, 3)]


def test_partial_sum_contributions_are_really_reduced():
    mesh = ss.Mesh({"x": 4})
    lay = ss.layout(ss.DTensorSpec(mesh, [ss.Partial()]), (3,))
    parts = {d: np.array([1.0, 2.0, 3.0]) * (d + 1) for d in mesh.device_ids}
    assert lay.assemble(parts).tolist() == [10.0, 20.0, 30.0]


def test_mixed_partial_ops_are_refused():
    mesh = ss.Mesh({"x": 2, "y": 2})
    with pytest.raises(ss.ShardingError) as e:
        ss.layout(ss.DTensorSpec(mesh, [ss.Partial("sum"), ss.Partial("max")]), (4,))
    assert e.value.rule == "mixed-reduce-ops"


def test_unknown_partial_op():
    with pytest.raises(ss.ShardingError) as e:
        ss.Partial("median")
    assert e.value.rule == "unknown-reduce-op"


# -- the extension contract: a placement only says how it splits and joins ----------------------
def test_ragged_shard_layout_and_round_trip():
    mesh = ss.Mesh({"x": 2, "y": 2})
    spec = ss.DTensorSpec(mesh, [ss.RaggedShard(0, (3, 1)), ss.Shard(1)])
    lay = ss.layout(spec, (8, 4))
    assert [lay.local_shape(d) for d in mesh.device_ids] == [(6, 2), (6, 2), (2, 2), (2, 2)]
    assert lay.indices(2)[0].tolist() == [6, 7]
    a = np.arange(32).reshape(8, 4)
    assert np.array_equal(lay.assemble(lay.shard(a)), a)


def test_ragged_shard_join_inverts_split():
    p = ss.RaggedShard(0, (1, 0, 2))
    x = np.arange(12).reshape(6, 2)
    pieces = [x[ix] for ix in p.split(np.arange(6), 3)]
    assert [len(q) for q in pieces] == [2, 0, 4]
    assert np.array_equal(p.join(pieces, 0), x)


def test_ragged_shard_converts_when_a_standard_form_exists():
    mesh = ss.Mesh({"x": 2})
    assert ss.Sharding.from_dtensor(ss.DTensorSpec(mesh, [ss.RaggedShard(0, (1, 1))]), (6,)) == ss.Sharding(mesh, [["x"]])
    with pytest.raises(ss.ShardingError) as e:
        ss.Sharding.from_dtensor(ss.DTensorSpec(mesh, [ss.RaggedShard(0, (2, 1))]), (6,))
    assert e.value.rule == "not-expressible"


def test_ragged_shard_refuses_a_bad_piece():
    mesh = ss.Mesh({"x": 2})
    with pytest.raises(ss.ShardingError) as e:
        ss.layout(ss.DTensorSpec(mesh, [ss.RaggedShard(0, (2, 1))]), (7,))
    assert "not a multiple" in str(e.value)


def test_default_join_inverts_a_strided_split():
    p = ss.StridedShard(0, 2)
    x = np.arange(10) * 10
    pieces = [x[ix] for ix in p.split(np.arange(10), 4)]
    assert np.array_equal(ss.Placement.join(p, pieces, 0), x)


def test_a_user_placement_with_only_split_works_everywhere():
    mesh = ss.Mesh({"x": 4})
    spec = ss.DTensorSpec(mesh, [Cyclic(0)])
    lay = ss.layout(spec, (8,))
    assert lay.indices(1)[0].tolist() == [1, 5]
    a = np.arange(8.0)
    assert np.array_equal(lay.assemble(lay.shard(a)), a)
    pieces = [a[ix] for ix in Cyclic(0).split(np.arange(8), 4)]
    assert np.array_equal(Cyclic(0).join(pieces, 0), a)
    # Cyclic over 4 of 8 elements is exactly StridedShard(0, split_factor=2).
    assert ss.layout(ss.DTensorSpec(mesh, [ss.StridedShard(0, 2)]), (8,)).same_as(lay)


def test_a_user_placement_that_loses_data_is_refused():
    class Lossy(ss.Placement):
        dim = 0

        def split(self, indices, num):
            return [indices[:1]] * num

    with pytest.raises(ss.ShardingError) as e:
        ss.layout(ss.DTensorSpec(ss.Mesh({"x": 2}), [Lossy()]), (4,))
    assert e.value.rule == "invalid-placement"


def test_user_placement_with_a_negative_dim_is_normalized():
    mesh = ss.Mesh({"x": 2, "y": 2})
    lay = ss.layout(ss.DTensorSpec(mesh, [Cyclic(-1), ss.Replicate()]), (4, 6))
    assert lay.local_shape(0) == (4, 3) and lay.indices(2)[1].tolist() == [1, 3, 5]
    with pytest.raises(ss.ShardingError) as e:
        ss.layout(ss.DTensorSpec(mesh, [Cyclic(-3), ss.Replicate()]), (4, 6))
    assert e.value.rule == "invalid-placement"


def test_a_join_that_does_not_invert_split_is_refused():
    class BadJoin(ss.Placement):
        dim = 0

        def split(self, indices, num):
            return [indices[i::num] for i in range(num)]

        def join(self, pieces, axis):
            return np.concatenate(pieces, axis=axis)  # forgets to interleave

    with pytest.raises(ss.ShardingError) as e:
        ss.layout(ss.DTensorSpec(ss.Mesh({"x": 2}), [BadJoin()]), (4,))
    assert "join(split(piece))" in str(e.value)


def test_avg_round_trip_is_exact_on_integer_values():
    lay = ss.layout(ss.DTensorSpec(ss.Mesh({"x": 3}), [ss.Partial("avg")]), (4,))
    a = np.array([3.0, -7.0, 11.0, 0.0])
    assert np.array_equal(lay.assemble(lay.shard(a)), a)


@pytest.mark.parametrize(
    "text, want",
    [("Shard(-1)", ss.Shard(-1)), ("S(2)", ss.Shard(2)), ("Replicate()", ss.Replicate()), ("R", ss.Replicate()),
     ("Partial(max)", ss.Partial("max")), ("P", ss.Partial()), ("Partial(reduce_op='avg')", ss.Partial("avg")),
     ("_StridedShard(0, split_factor=4)", ss.StridedShard(0, 4)), ("_S(1, sf=2)", ss.StridedShard(1, 2))],
)
def test_parse_placement_reads_both_spellings(text, want):
    assert ss.parse_placement(text) == want
    assert ss.parse_placement(str(want)) == want


def test_parse_placement_refuses_nonsense():
    with pytest.raises(ss.ShardingError, match="cannot read a placement"):
        ss.parse_placement("Shard(x)")


@pytest.mark.parametrize("text, expected", [
    ("[Shard(0), Replicate()]", (ss.Shard(0), ss.Replicate())),
    ("(_StridedShard(0, split_factor=4), S(0))", (ss.StridedShard(0, 4), ss.Shard(0))),
    ("Partial(max), R", (ss.Partial("max"), ss.Replicate())),
    ("R", (ss.Replicate(),)),
])
def test_placement_lists_as_dtensor_code_writes_them(text, expected):
    assert ss.parse_placements(text) == expected


@pytest.mark.parametrize("text, why", [
    ("[]", "no placements"), ("[Shard(0)", "cannot read a placement"), ("[Shard(0)), R]", "unbalanced"),
    ("[Shard(0), Sharded(1)]", "cannot read a placement from ' Sharded(1)'"),
])
def test_placement_list_errors(text, why):
    with pytest.raises(ss.ShardingError, match="invalid-placement") as e:
        ss.parse_placements(text)
    assert why in str(e.value)
