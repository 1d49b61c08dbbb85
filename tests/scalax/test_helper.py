"""with_sharding_constraint over pytrees, match_sharding_rule, local_data_to_global_array, meshes."""

import numpy as np
import pytest

import simshard as ss
from simshard import NamedSharding, P, make_mesh
from simshard.scalax import GlobalArray

X = np.ones((8, 8), np.float32)


def constraints(prog):
    return [e for e in prog.eqns if e.op == "sharding_constraint"]


# -- with_sharding_constraint ------------------------------------------------------------------------
def test_outside_a_trace_the_pytree_comes_back_unchanged():
    tree = {"a": X, "b": [X]}
    assert ss.with_sharding_constraint(tree, P("nonexistent")) is tree
    assert ss.with_sharding_annotation(tree, "h") is tree


def test_inside_a_plain_jit_it_uses_the_ambient_mesh_and_works_on_pytrees():
    mesh = make_mesh((2, 4), ("x", "y"))

    def f(a, b):
        t = ss.with_sharding_constraint({"a": a, "b": (b, b)}, {"a": P("x"), "b": ss.FSDPShardingRule("y", 4, 0)})
        return t["a"] + t["b"][0] + t["b"][1]

    with ss.use_mesh(mesh):
        prog = ss.jit(f).trace(X, X)
    got = [e.kw["sharding"] for e in constraints(prog)]
    assert got == [
        NamedSharding(mesh, P("x")).to_sharding(2),
        NamedSharding(mesh, P("y", None)).to_sharding(2),  # 8 x 8: tie -> dim 0
        NamedSharding(mesh, P("y", None)).to_sharding(2),
    ]


def test_a_single_array_with_a_concrete_sharding():
    mesh = make_mesh((4,), ("x",))
    s = NamedSharding(mesh, P(None, "x")).to_sharding(2)
    prog = ss.jit(lambda a: ss.with_sharding_constraint(a, s) * 2).trace(X)
    assert [e.kw["sharding"] for e in constraints(prog)] == [s]


def test_none_means_no_constraint():
    prog = ss.jit(lambda a, b: ss.with_sharding_constraint((a, b), (None, None))).trace(X, X)
    assert constraints(prog) == []


def test_p_without_a_mesh_is_an_error():
    with pytest.raises(ss.ShardingError, match=r"with_sharding_constraint: leaf the value .*needs a mesh") as e:
        ss.jit(lambda a: ss.with_sharding_constraint(a, P("x"))).trace(X)
    assert e.value.rule == "no-mesh"


def test_inside_sjit_it_refuses_another_mesh():
    h = ss.MeshShardingHelper((8,), ("x",))
    other = NamedSharding(make_mesh((8,), ("x",), name="other"), P("x"))
    with pytest.raises(ss.ShardingError, match=r"with_sharding_constraint: leaf 'h' .*but this MeshShardingHelper") as e:
        h.sjit(lambda a: ss.with_sharding_constraint({"h": a}, other)).trace(X)
    assert e.value.rule == "wrong-mesh"


def test_helper_context_for_manual_traces():
    h = ss.MeshShardingHelper((2, 4), ("dp", "fsdp"))

    def f(a):
        return ss.with_sharding_annotation(a * 2, "act")

    with h.get_context(annotation_shardings={"act": P("fsdp")}):
        prog = ss.jit(f).trace(X)
    assert [e.kw["sharding"] for e in constraints(prog)] == [NamedSharding(h.mesh, P("fsdp")).to_sharding(2)]


# -- match_sharding_rule -----------------------------------------------------------------------------
def test_match_sharding_rule_gives_named_shardings():
    h = ss.MeshShardingHelper((2, 4), ("dp", "fsdp"))
    tree = {"w": np.zeros((16, 8)), "b": np.zeros((8,)), "step": 3}
    got = h.match_sharding_rule(ss.FSDPShardingRule("fsdp", 4, min_fsdp_size=16), tree)
    assert got == {
        "w": NamedSharding(h.mesh, P("fsdp", None)),
        "b": NamedSharding(h.mesh, P()),
        "step": NamedSharding(h.mesh, P()),
    }
    got = h.match_sharding_rule({"w": P("dp"), "b": None, "step": P()}, tree)
    assert got == {"w": NamedSharding(h.mesh, P("dp")), "b": None, "step": NamedSharding(h.mesh, P())}


def test_match_sharding_rule_checks_rank():
    h = ss.MeshShardingHelper((2, 4), ("dp", "fsdp"))
    with pytest.raises(ss.ShardingError, match=r"match_sharding_rule: leaf 'b' \(f64\[8\]\) with spec P\('dp', None\)"):
        h.match_sharding_rule(P("dp", None), {"w": np.zeros((16, 8)), "b": np.zeros((8,))})


# -- local_data_to_global_array ----------------------------------------------------------------------
def test_local_data_to_global_array_shards_the_batch_axis():
    h = ss.MeshShardingHelper((2, 4), ("dp", "fsdp"))
    out = h.local_data_to_global_array({"x": X, "t": np.arange(8)})
    assert out["x"].sharding == NamedSharding(h.mesh, P(("dp", "fsdp")))
    assert out["t"].sharding == NamedSharding(h.mesh, P(("dp", "fsdp")))
    np.testing.assert_array_equal(out["t"], np.arange(8))
    out = h.local_data_to_global_array(np.zeros((3, 4, 5)), batch_axis=1, mesh_axis_subset=["fsdp"])
    assert isinstance(out, GlobalArray) and out.sharding == NamedSharding(h.mesh, P(None, "fsdp"))
    assert out[0].sharding is None  # derived arrays are plain


def test_local_data_to_global_array_errors():
    h = ss.MeshShardingHelper((2, 4), ("dp", "fsdp"))
    with pytest.raises(ss.ShardingError, match=r"leaf 'x' has 6 rows on batch_axis 0, not divisible by the 8 devices"):
        h.local_data_to_global_array({"x": np.zeros((6, 2))})
    with pytest.raises(ss.ShardingError, match=r"mesh_axis_subset names axis 'tp'"):
        h.local_data_to_global_array(X, mesh_axis_subset=("tp",))
    with pytest.raises(ss.ShardingError, match=r"leaf 'y' has shape \(8,\), no batch_axis 1"):
        h.local_data_to_global_array({"y": np.zeros(8)}, batch_axis=1)


# -- meshes ----------------------------------------------------------------------------------------
def test_helper_mesh():
    h = ss.MeshShardingHelper((2, -1), ("dp", "fsdp"), devices=8)
    assert h.mesh.shape == {"dp": 2, "fsdp": 4} and h.axis_dims == (2, 4)
    with pytest.raises(ss.ShardingError, match="needs devices="):
        ss.MeshShardingHelper((2, -1), ("dp", "fsdp"))
    with pytest.raises(ss.ShardingError, match="mesh_axis_splitting=True"):
        ss.MeshShardingHelper((8, 8), ("a", "b"), physical_shape=(4, 4, 4))
    split = ss.MeshShardingHelper((8, 8), ("a", "b"), mesh_axis_splitting=True, physical_shape=(4, 4, 4))
    assert split.mesh.shape == {"a": 8, "b": 8}
