"""Sharding rules on pytrees: FSDP, tree-path regexes, policies; scalax's path strings."""

import collections
import dataclasses

import numpy as np
import pytest

import simshard as ss
from simshard import P
from simshard.scalax import named_tree_map, register_dataclass


def mlp_params():
    return {
        "layer1": {"kernel": np.zeros((64, 256), np.float32), "bias": np.zeros((256,), np.float32)},
        "layer2": {"kernel": np.zeros((256, 32), np.float32), "bias": np.zeros((32,), np.float32)},
        "scale": np.float32(1.0),
    }


# -- FSDP ------------------------------------------------------------------------------------------
def test_fsdp_shards_the_largest_divisible_dim_and_replicates_small_leaves():
    rule = ss.FSDPShardingRule("fsdp", fsdp_axis_size=8, min_fsdp_size=1024)
    specs = rule.apply(mlp_params())
    assert specs == {
        "layer1": {"kernel": P(None, "fsdp"), "bias": P()},  # 256 elements < 1024
        "layer2": {"kernel": P("fsdp", None), "bias": P()},
        "scale": P(),
    }


def test_fsdp_min_size_is_inclusive():
    x = {"w": np.zeros((32, 32))}
    assert ss.FSDPShardingRule("f", 4, min_fsdp_size=1024).apply(x)["w"] == P("f", None)
    assert ss.FSDPShardingRule("f", 4, min_fsdp_size=1025).apply(x)["w"] == P()


def test_fsdp_with_axis_size_skips_dims_it_does_not_divide():
    rule = ss.FSDPShardingRule("fsdp", fsdp_axis_size=4, min_fsdp_size=0)
    # largest dim 30 is not divisible by 4, next largest 12 is
    assert rule.apply(np.zeros((12, 30))) == P("fsdp", None)
    # nothing divisible: replicated
    assert rule.apply(np.zeros((3, 5, 7))) == P()


def test_fsdp_ties_go_to_the_lowest_dimension():
    rule = ss.FSDPShardingRule("fsdp", fsdp_axis_size=2, min_fsdp_size=0)
    assert rule.apply(np.zeros((16, 16, 16))) == P("fsdp", None, None)
    assert rule.apply(np.zeros((4, 16, 16))) == P(None, "fsdp", None)
    guess = ss.FSDPShardingRule("fsdp", min_fsdp_size=0)  # power-of-two guess
    assert guess.apply(np.zeros((24, 8))) == P("fsdp", None)  # both divisible by 8: lowest wins


def test_fsdp_without_axis_size_picks_the_largest_power_of_two_divisor():
    rule = ss.FSDPShardingRule("fsdp", min_fsdp_size=0)
    assert rule.apply(np.zeros((96, 1024))) == P(None, "fsdp")  # 2**10 beats 2**5
    assert rule.apply(np.zeros((1, 6, 3))) == P(None, "fsdp", None)  # 2 beats 1
    assert rule.apply(np.zeros((1, 3))) == P(None, "fsdp")  # odd but > 1 still sharded
    assert rule.apply(np.zeros((1, 1))) == P()  # only size-1 dims: nothing to shard


def test_fsdp_default_min_size_is_2_to_the_20():
    rule = ss.FSDPShardingRule()
    assert rule.fsdp_axis_name == "fsdp"
    assert rule.apply(ss.ShapeDtype((1024, 1023))) == P()
    assert rule.apply(ss.ShapeDtype((1024, 1024))) == P("fsdp", None)


def test_fsdp_accepts_a_tuple_of_axes():
    rule = ss.FSDPShardingRule(("dp", "fsdp"), fsdp_axis_size=8, min_fsdp_size=0)
    assert rule.apply(np.zeros((4, 16))) == P(None, ("dp", "fsdp"))


# -- tree paths ------------------------------------------------------------------------------------
def test_tree_path_first_match_wins_and_regex_searches_anywhere():
    rule = ss.TreePathShardingRule(
        ("layer1/kernel", P(None, "tp")),
        ("kernel", P("tp", None)),
        (r"bias$", P("tp")),
    )
    specs = rule.apply(mlp_params())
    assert specs["layer1"]["kernel"] == P(None, "tp")
    assert specs["layer2"]["kernel"] == P("tp", None)
    assert specs["layer1"]["bias"] == P("tp")
    assert specs["scale"] == P()  # scalars are never partitioned, even in strict mode


def test_tree_path_strict_error_names_the_leaf_path_and_the_patterns():
    rule = ss.TreePathShardingRule(("kernel", P("tp")))
    with pytest.raises(ss.ShardingError, match=r"'layer1/bias'.*patterns tried: 'kernel'") as e:
        rule.apply(mlp_params())
    assert e.value.rule == "no-matching-rule"


def test_tree_path_non_strict_replicates_unmatched_leaves():
    rule = ss.TreePathShardingRule(("kernel", P("tp")), strict=False)
    specs = rule.apply(mlp_params())
    assert specs["layer1"]["bias"] == P() and specs["layer1"]["kernel"] == P("tp")


def test_tree_path_pattern_matching_no_leaf_is_an_error_in_strict_mode():
    # scalax never checks patterns against leaves; the issue asks for it (a typo'd path is silent)
    rule = ss.TreePathShardingRule(("no_such_param", P("tp")), (".*", P()))
    with pytest.raises(ss.ShardingError) as e:
        rule.apply(mlp_params())
    assert e.value.rule == "rule-matches-nothing" and "'no_such_param'" in str(e.value)
    lenient = ss.TreePathShardingRule(("no_such_param", P("tp")), (".*", P()), strict=False)
    assert lenient.apply(mlp_params())["layer1"]["kernel"] == P()


def test_tree_path_size_one_leaves_get_replicated_before_matching():
    rule = ss.TreePathShardingRule(("w", P("tp", None)))
    assert rule.apply({"w": np.zeros((1, 1))}) == {"w": P()}


def test_tree_path_rejects_bad_rules_at_construction():
    with pytest.raises(ValueError, match=r"invalid regex '\('"):
        ss.TreePathShardingRule(("(", P()))
    with pytest.raises(TypeError, match="must be a pair"):
        ss.TreePathShardingRule(P("x"))
    with pytest.raises(TypeError, match="not a PartitionSpec"):
        ss.TreePathShardingRule(("w", 3))


# -- policy ----------------------------------------------------------------------------------------
def test_policy_gets_path_and_leaf():
    seen = []

    def policy(path, leaf):
        seen.append((path, leaf.shape))
        return P("tp") if leaf.ndim == 2 and "layer2" in path else P()

    specs = ss.PolicyShardingRule(policy).apply(mlp_params())
    assert specs["layer2"]["kernel"] == P("tp") and specs["layer1"]["kernel"] == P()
    assert ("layer1/kernel", (64, 256)) in seen and ("scale", ()) in seen
    assert len(seen) == 5


def test_policy_returning_a_non_spec_names_the_leaf():
    rule = ss.PolicyShardingRule(lambda path, leaf: "tp")
    with pytest.raises(TypeError, match=r"returned 'tp' for the leaf at tree path 'layer1/bias'"):
        rule.apply(mlp_params())


# -- pytrees ---------------------------------------------------------------------------------------
Layer = collections.namedtuple("Layer", ["kernel", "bias"])


@dataclasses.dataclass
class Model:
    embed: object
    layers: list
    name: str = dataclasses.field(default="m", metadata={"static": True})


def test_paths_of_lists_tuples_namedtuples_and_dataclasses():
    register_dataclass(Model)
    model = Model(np.zeros((8, 4)), [Layer(np.zeros((4, 4)), np.zeros(4)), (np.zeros(2),)])
    paths = []
    named_tree_map(lambda p, x: paths.append(p), model)
    assert paths == ["embed", "layers/0/kernel", "layers/0/bias", "layers/1/0"]


def test_rules_keep_namedtuple_and_dataclass_structure():
    register_dataclass(Model)
    model = Model(np.zeros((8, 4)), [Layer(np.zeros((4, 4)), np.zeros(4))], name="x")
    specs = ss.TreePathShardingRule(("embed", P("tp")), ("kernel", P(None, "tp")), ("bias", P())).apply(model)
    assert isinstance(specs, Model) and specs.name == "x"
    assert isinstance(specs.layers[0], Layer)
    assert specs.embed == P("tp") and specs.layers[0].kernel == P(None, "tp") and specs.layers[0].bias == P()


def test_none_is_an_empty_subtree():
    specs = ss.FSDPShardingRule("f", 2, 0).apply({"w": np.zeros((4,)), "opt": None})
    assert specs == {"w": P("f"), "opt": None}


def test_unregistered_dataclasses_are_registered_when_a_rule_meets_them():
    @dataclasses.dataclass
    class Params:
        w: object
        b: object

    specs = ss.FSDPShardingRule("f", 4, 0).apply({"p": Params(np.zeros((3, 8)), np.zeros((4,)))})
    assert isinstance(specs["p"], Params)
    assert specs["p"].w == P(None, "f") and specs["p"].b == P("f")


def test_apply_gives_named_shardings_on_the_mesh_as_the_seed_states():
    """Seed 004: ``rule.apply(pytree)`` returns a pytree of NamedSharding (here on the ambient
    mesh, or the one given); ``specs`` keeps the bare PartitionSpecs."""
    mesh = ss.Mesh({"fsdp": 4})
    params = {"w": np.zeros((64, 32), np.float32), "b": np.zeros(1, np.float32)}
    rule = ss.FSDPShardingRule("fsdp", 4, min_fsdp_size=16)
    with ss.use_mesh(mesh):
        got = rule.apply(params)
    assert got == {"w": ss.NamedSharding(mesh, P("fsdp", None)), "b": ss.NamedSharding(mesh, P())}
    assert rule.apply(params, mesh=mesh) == got and rule.specs(params) == {"w": P("fsdp", None), "b": P()}
    tree = ss.TreePathShardingRule(("w", P(None, "fsdp")), ("b", P()))
    assert tree.apply(params, mesh=mesh)["w"] == ss.NamedSharding(mesh, P(None, "fsdp"))
