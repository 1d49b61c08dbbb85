"""JAX's spelling: NamedSharding(mesh, P(...)) and type strings."""

import numpy as np
import pytest

import simshard as ss

MESH = ss.Mesh({"x": 2, "y": 4})


def test_named_sharding_is_the_same_layout_as_shardy_text():
    n = ss.NamedSharding(MESH, ss.P("x", None))
    s = ss.Sharding.parse('<@mesh, [{"x"}, {}]>', MESH)
    assert ss.equivalent(n, s, (8, 16))
    assert n.to_sharding(2) == s


def test_short_spec_pads_with_replicated_dims():
    n = ss.NamedSharding(MESH, ss.P(("x", "y")))
    assert str(n.to_sharding(3)) == '<@mesh, [{"x", "y"}, {}, {}]>'


def test_unconstrained_is_an_open_empty_dim():
    s = ss.NamedSharding(MESH, ss.P(ss.P.UNCONSTRAINED, "y")).to_sharding(2)
    assert s.dims[0].is_open and not s.dims[0].axes and not s.dims[1].is_open


def test_unreduced_in_p():
    s = ss.NamedSharding(MESH, ss.P(None, None, unreduced={"x"})).to_sharding(2)
    assert s.type_string((8, 32), np.float32) == "f32[8,32]{U:x}"


def test_duplicate_axis_in_p():
    with pytest.raises(ss.ShardingError) as e:
        ss.NamedSharding(MESH, ss.P("x", "x"))
    assert e.value.rule == "duplicate-axis" and e.value.axis == "x"


def test_spec_longer_than_rank():
    with pytest.raises(ss.ShardingError) as e:
        ss.layout(ss.NamedSharding(MESH, ss.P("x", "y")), (8,))
    assert e.value.rule == "rank-mismatch"


def test_to_named_round_trip_and_refusals():
    s = ss.Sharding.parse('<@mesh, [{"x", "y"}, {?}]>', MESH)
    n = s.to_named()
    assert n.spec == ss.P(("x", "y"), ss.P.UNCONSTRAINED)
    assert n.to_sharding(2) == s
    for text in ['<@mesh, [{"y":(1)2}]>', '<@mesh, [{"x"}p1]>', '<@mesh, [{"x", ?}]>',
                 '<@mesh, [{}], replicated={"x"}>', '<@mesh, [{}], unreduced(max)={"x"}>']:
        with pytest.raises(ss.ShardingError) as e:
            ss.Sharding.parse(text, MESH).to_named()
        assert e.value.rule == "not-expressible"


@pytest.mark.parametrize(
    "text, shape, dtype, want",
    [
        ('<@mesh, [{"x"}, {}]>', (8, 16), np.float32, "f32[8@x,16]"),
        ('<@mesh, [{"x", "y"}, {}]>', (8, 16), np.float32, "f32[8@(x,y),16]"),
        ('<@mesh, [{}, {"y"}]>', (8, 16), np.int32, "i32[8,16@y]"),
        ('<@mesh, [{}, {}], unreduced={"x", "y"}>', (8, 32), np.float32, "f32[8,32]{U:(x,y)}"),
        ('<@mesh, [{}], unreduced(max)={"x"}>', (4,), np.float64, "f64[4]{U(max):x}"),
        ('<@mesh, [{"y":(2)2}]>', (4,), np.bool_, "bool[4@y:(2)2]"),
        ("<@mesh, []>", (), np.float32, "f32[]"),
    ],
)
def test_type_strings(text, shape, dtype, want):
    assert ss.Sharding.parse(text, MESH).type_string(shape, dtype) == want


def _jax_typed_cases():
    from casedata import load_cases

    return [c for c in load_cases("jax_explicit.json") if "type_str" in c["result"]]


@pytest.mark.parametrize("case", _jax_typed_cases(), ids=lambda c: c["id"])
def test_type_string_matches_jax_recording(case):
    """The part after the dtype is exactly what jax.typeof printed for the recorded result."""
    r = case["result"]
    mesh = ss.Mesh(case["mesh"])
    spec = ss.P(*[tuple(e) if isinstance(e, list) else e for e in r["spec"]], unreduced=r.get("unreduced", ()))
    got = ss.NamedSharding(mesh, spec).to_sharding(len(r["shape"])).type_string(r["shape"], r["dtype"])
    want = r["type_str"].lstrip("~")
    assert got[got.index("[") :] == want[want.index("[") :]
    assert got[: got.index("[")] == {"float32": "f32", "int32": "i32", "bool": "bool"}[r["dtype"]]


def test_p_unreduced_is_a_set():
    assert ss.P(None, unreduced=("y", "x")) == ss.P(None, unreduced=("x", "y"))
    assert repr(ss.P(None, unreduced=("y", "x"))) == "P(None, unreduced={'x', 'y'})"


@pytest.mark.parametrize("text, spec", [
    ('P("x", None)', ss.P("x", None)),
    ("PartitionSpec(('x', 'y'), None)", ss.P(("x", "y"), None)),
    ('jax.sharding.P("x", P.UNCONSTRAINED, unreduced={"y"})', ss.P("x", ss.P.UNCONSTRAINED, unreduced=("y",))),
    ("P()", ss.P()),
])
def test_partition_spec_text_reads_back_its_repr(text, spec):
    assert ss.parse_partition_spec(text) == spec
    assert ss.parse_partition_spec(repr(spec)) == spec


@pytest.mark.parametrize("text, why", [
    ("P(x)", "an entry must be None, an axis name"),
    ('P("x"', "was never closed"),
    ("Q('x')", "expected P(...) or PartitionSpec(...)"),
    ("P(('x', None))", "a tuple entry holds axis names only"),
    ("P('x', reduced={'y'})", "the only keyword is unreduced"),
    ("P(__import__('os').getcwd())", "an entry must be None"),
    ("P('\ud800x')", "surrogate"),
    ("P('x')\x00", "null"),
])
def test_partition_spec_text_errors_say_why(text, why):
    with pytest.raises(ss.ShardingError, match="cannot read a PartitionSpec") as e:
        ss.parse_partition_spec(text)
    assert why in str(e.value)
