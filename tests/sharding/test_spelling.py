"""``sharding.spelling``: placement text and bare placement lists read as DTensorSpecs, Shardy text
as Shardings, everything else passed through; no mesh, no reading."""

import pytest

import simshard as ss
from simshard import DTensorSpec, Partial, Replicate, Shard, ShardingError, StridedShard
from simshard.sharding.spelling import from_spelling, is_placement_list

MESH = ss.Mesh({"x": 2, "y": 4})


@pytest.mark.parametrize("text, placements", [
    ("[S(0), R]", (Shard(0), Replicate())),
    ("[Shard(0), Partial(sum)]", (Shard(0), Partial("sum"))),
    ("(Replicate(), _StridedShard(1, split_factor=2))", (Replicate(), StridedShard(1, 2))),
    ("R, P(max)", (Replicate(), Partial("max"))),
])
def test_placement_text_is_a_dtensor_spec(text, placements):
    assert from_spelling(text, MESH) == DTensorSpec(MESH, placements)


def test_bare_placement_lists_and_tuples():
    assert from_spelling([Shard(1), Shard(0)], MESH) == DTensorSpec(MESH, (Shard(1), Shard(0)))
    assert from_spelling((Replicate(), Shard(0)), MESH).placements == (Replicate(), Shard(0))
    assert is_placement_list([Shard(0)]) and not is_placement_list([]) and not is_placement_list([Shard(0), None])
    assert not is_placement_list([[Shard(0)]])  # a tree of placement lists is no placement list


def test_shardy_text_and_other_spellings():
    s = from_spelling('<@mesh, [{"x"}, {}]>', MESH)
    assert isinstance(s, ss.Sharding) and str(s) == '<@mesh, [{"x"}, {}]>'
    p = ss.P("x")
    assert from_spelling(p, MESH) is p and from_spelling(None, MESH) is None


def test_errors_name_where_and_what():
    with pytest.raises(ShardingError, match=r"^no-mesh: input w: the placement list \[S\(0\), R\] needs a mesh"):
        from_spelling([Shard(0), Replicate()], None, "input w")
    with pytest.raises(ShardingError, match="no-mesh: out: the sharding '\\[S\\(0\\)\\]' is placement text"):
        from_spelling("[S(0)]", None, "out")
    with pytest.raises(ShardingError, match="^placement-count: input w: 1 placements for mesh"):
        from_spelling("[S(0)]", MESH, "input w")
    with pytest.raises(ShardingError, match="cannot read a placement from ' Bogus'"):
        from_spelling("[S(0), Bogus]", MESH)
