"""MeshShardingHelper.sjit: rules matched to arguments and outputs, static args, argument
constraints, annotations, and the errors that name the value and the rule."""

import collections
import dataclasses
import warnings

import numpy as np
import pytest

import simshard as ss
from simshard import NamedSharding, P, make_mesh
from simshard.scalax import GlobalArray, UnusedAnnotationWarning


@pytest.fixture
def helper():
    return ss.MeshShardingHelper((2, 4), ("dp", "fsdp"))


def sh(helper, *spec, rank):
    return NamedSharding(helper.mesh, P(*spec)).to_sharding(rank)


def params():
    return {
        "w1": np.arange(8 * 16, dtype=np.float32).reshape(8, 16) % 3,
        "w2": np.arange(16 * 4, dtype=np.float32).reshape(16, 4) % 5,
    }


def mlp(params, x):
    return np.tanh(x @ params["w1"]) @ params["w2"]


def by_name(program, which="in"):
    names = program.input_names
    shardings = program.in_shardings if which == "in" else program.out_shardings
    return dict(zip(names, shardings))


X = np.ones((8, 8), np.float32)


def test_rules_on_params_and_p_on_data_give_the_program_shardings(helper):
    f = helper.sjit(
        mlp,
        in_shardings=(ss.FSDPShardingRule("fsdp", fsdp_axis_size=4, min_fsdp_size=0), P("dp")),
        out_shardings=P("dp", None),
    )
    prog = f.trace(params(), X)
    assert prog.input_names == ("params['w1']", "params['w2']", "x")
    got = by_name(prog)
    assert got["params['w1']"] == sh(helper, None, "fsdp", rank=2)  # 16 > 8, both divisible by 4
    assert got["params['w2']"] == sh(helper, "fsdp", None, rank=2)
    assert got["x"] == sh(helper, "dp", rank=2)
    assert prog.out_shardings == (sh(helper, "dp", None, rank=2),)
    assert [e.op for e in prog.eqns] == ["dot_general", "tanh", "dot_general"]


def test_none_leaves_are_unspecified(helper):
    prog = helper.sjit(mlp, in_shardings=({"w1": P(None, "fsdp"), "w2": None}, None)).trace(params(), X)
    got = by_name(prog)
    assert got == {"params['w1']": sh(helper, None, "fsdp", rank=2), "params['w2']": None, "x": None}
    assert prog.out_shardings == (None,)
    assert helper.sjit(mlp).trace(params(), X).in_shardings == (None, None, None)


def test_one_rule_for_all_arguments_sees_the_argument_index_in_paths(helper):
    seen = []

    def policy(path, leaf):
        seen.append(path)
        return P("dp") if path == "1" else P()

    helper.sjit(mlp, in_shardings=ss.PolicyShardingRule(policy)).trace(params(), X)
    assert seen == ["0/w1", "0/w2", "1"]


def test_out_shardings_rule_is_matched_against_the_outputs(helper):
    def f(params, x):
        return {"logits": mlp(params, x), "hidden": np.tanh(x @ params["w1"])}

    rule = ss.TreePathShardingRule(("logits", P("dp")), ("hidden", P(None, "fsdp")))
    prog = helper.sjit(f, out_shardings=rule).trace(params(), X)
    # outputs in optree order: sorted dict keys
    assert prog.out_shardings == (sh(helper, None, "fsdp", rank=2), sh(helper, "dp", rank=2))


def test_calling_evaluates_like_numpy(helper):
    f = helper.sjit(mlp, in_shardings=(ss.FSDPShardingRule("fsdp", 4, 0), P("dp")), out_shardings=P("dp"))
    p = params()
    np.testing.assert_array_equal(f(p, X), mlp(p, X))
    assert len(f._cache) == 1
    f(p, X)
    assert len(f._cache) == 1  # same types: traced once
    f(p, np.ones((16, 8), np.float32))
    assert len(f._cache) == 2


def test_abstract_arguments_and_their_own_shardings(helper):
    a = {"w1": ss.ShapeDtype((8, 16)), "w2": ss.ShapeDtype((16, 4), sharding=P("fsdp"))}
    prog = helper.sjit(mlp, in_shardings=(None, P("dp"))).trace(a, ss.ShapeDtype((8, 8)))
    got = by_name(prog)
    assert got["params['w2']"] == sh(helper, "fsdp", rank=2)  # the ShapeDtype's own P, on the helper mesh
    assert got["params['w1']"] is None
    with pytest.raises(TypeError, match="use .trace"):
        helper.sjit(mlp)(a, ss.ShapeDtype((8, 8)))


# -- static args -------------------------------------------------------------------------------------
def test_static_args_are_excluded_from_in_shardings_and_constraints(helper):
    def f(x, n, params):
        return (x @ params["w1"]) * n

    g = helper.sjit(f, in_shardings=(P("dp"), {"w1": P(None, "fsdp"), "w2": None}), static_argnums=(1,),
                    args_sharding_constraint=(P(("dp", "fsdp")), None))
    prog = g.trace(X, 3.0, params())
    assert prog.input_names == ("x", "params['w1']", "params['w2']")
    assert by_name(prog)["x"] == sh(helper, "dp", rank=2)
    mul = [e for e in prog.eqns if e.op == "mul"][0]
    assert mul.inputs[1].value == 3.0  # the static value is a literal of the program
    np.testing.assert_array_equal(g(X, 2.0, params()), (X @ params()["w1"]) * 2.0)
    assert len({k[1] for k in g._cache}) == 1
    g(X, 5.0, params())
    assert len(g._cache) == 2  # one program per static value


def test_negative_static_argnums(helper):
    prog = helper.sjit(lambda x, n: x * n, in_shardings=(P("dp"),), static_argnums=-1).trace(X, 2)
    assert prog.input_names == ("x",)


def test_unhashable_static_arg_is_named(helper):
    f = helper.sjit(lambda x, cfg: x, static_argnums=1)
    with pytest.raises(ss.TraceError, match=r"static argument 1 \(cfg = \[1, 2\], a list\) is not hashable"):
        f.trace(X, [1, 2])


def test_static_argnums_out_of_range(helper):
    with pytest.raises(TypeError, match="static_argnums 3 is out of range"):
        helper.sjit(lambda x: x, static_argnums=3).trace(X)


def test_in_shardings_count_must_match_non_static_args(helper):
    f = helper.sjit(lambda x, n: x * n, in_shardings=(P("dp"), None), static_argnums=1)
    with pytest.raises(ss.ShardingError, match=r"in_shardings has 2 entries for 1 non-static arguments"):
        f.trace(X, 2)


# -- argument constraints ----------------------------------------------------------------------------
def test_args_sharding_constraint_becomes_constraints_at_the_start(helper):
    f = helper.sjit(mlp, in_shardings=(None, P("dp")),
                    args_sharding_constraint=(ss.FSDPShardingRule("fsdp", 4, 0), P(("dp", "fsdp"))))
    prog = f.trace(params(), X)
    head = prog.eqns[:3]
    assert [e.op for e in head] == ["sharding_constraint"] * 3
    assert [e.inputs[0] for e in head] == list(prog.inputs)
    assert [e.kw["sharding"] for e in head] == [
        sh(helper, None, "fsdp", rank=2), sh(helper, "fsdp", None, rank=2), sh(helper, ("dp", "fsdp"), rank=2)
    ]
    # the function computes on the constrained values
    dot = [e for e in prog.eqns if e.op == "dot_general"][0]
    assert dot.inputs == (head[2].outputs[0], head[0].outputs[0])
    assert by_name(prog)["x"] == sh(helper, "dp", rank=2)  # the input keeps its in_sharding


def test_no_constraints_without_args_sharding_constraint(helper):
    prog = helper.sjit(mlp, in_shardings=(None, P("dp"))).trace(params(), X)
    assert all(e.op != "sharding_constraint" for e in prog.eqns)


# -- annotations ------------------------------------------------------------------------------------
def annotated(params, x):
    h = ss.with_sharding_annotation(np.tanh(x @ params["w1"]), "hidden")
    h = ss.with_sharding_annotation(h, "not_configured")
    return ss.with_sharding_annotation({"out": h @ params["w2"]}, "logits")


def test_annotations_become_constraints_where_configured(helper):
    f = helper.sjit(annotated, annotation_shardings={
        "hidden": P("dp", "fsdp"),
        "logits": ss.TreePathShardingRule(("out", P("dp"))),
    })
    prog = f.trace(params(), X)
    cons = [e for e in prog.eqns if e.op == "sharding_constraint"]
    assert [e.kw["sharding"] for e in cons] == [sh(helper, "dp", "fsdp", rank=2), sh(helper, "dp", rank=2)]
    assert prog.producer(prog.outputs[0]) is cons[1]
    assert prog.producer(cons[0].inputs[0]).op == "tanh"


def test_annotations_are_plain_without_annotation_shardings(helper):
    prog = helper.sjit(annotated).trace(params(), X)
    assert all(e.op != "sharding_constraint" for e in prog.eqns)
    # and in a plain ss.jit trace
    prog = ss.jit(annotated).trace(params(), X)
    assert all(e.op != "sharding_constraint" for e in prog.eqns)


def test_unused_annotation_shardings_key_warns(helper):
    f = helper.sjit(annotated, annotation_shardings={"hiden": P("dp")})
    with pytest.warns(UnusedAnnotationWarning, match=r"\['hiden'\].*annotations met: \['hidden', 'logits', 'not_configured'\]"):
        f.trace(params(), X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        helper.sjit(annotated, annotation_shardings={"hidden": P("dp")}).trace(params(), X)


def test_annotation_errors_name_the_annotation(helper):
    f = helper.sjit(annotated, annotation_shardings={"hidden": P("dp", "fsdp", None)})
    with pytest.raises(ss.ShardingError, match=r"annotation 'hidden': .*has 3 entries but the tensor has rank 2"):
        f.trace(params(), X)


def test_annotation_names_must_be_strings(helper):
    with pytest.raises(TypeError, match="must be a string"):
        helper.sjit(annotated, annotation_shardings={1: P()})


# -- bad input ---------------------------------------------------------------------------------------
def test_rank_mismatch_names_leaf_and_rule(helper):
    rule = ss.TreePathShardingRule(("w1", P(None, "fsdp", None)), (".*", P()))
    with pytest.raises(ss.ShardingError,
                       match=r"leaf params\['w1'\] \(f32\[8,16\]\) with rule TreePathShardingRule\(.*giving "
                             r"P\(None, 'fsdp', None\): .*rank 2") as e:
        helper.sjit(mlp, in_shardings=(rule, None)).trace(params(), X)
    assert e.value.rule == "rank-mismatch"


def test_unknown_axis_names_leaf_and_axis(helper):
    with pytest.raises(ss.ShardingError, match=r"leaf x \(f32\[8,8\]\) with spec P\('model'\): axis \"model\"") as e:
        helper.sjit(mlp, in_shardings=(None, P("model"))).trace(params(), X)
    assert e.value.rule == "unknown-axis"


def test_axis_used_twice(helper):
    with pytest.raises(ss.ShardingError, match=r"out_shardings: .*axis \"dp\" is used twice") as e:
        helper.sjit(mlp, out_shardings=P("dp", "dp")).trace(params(), X)
    assert e.value.rule == "duplicate-axis"


def test_sharding_on_another_mesh(helper):
    other = make_mesh((2, 4), ("dp", "fsdp"), name="other")
    with pytest.raises(ss.ShardingError, match=r"leaf x .*on mesh Mesh\(.*name='other'\) but this MeshShardingHelper") as e:
        helper.sjit(mlp, in_shardings=(None, NamedSharding(other, P("dp")))).trace(params(), X)
    assert e.value.rule == "wrong-mesh"


def test_strict_rule_with_an_unmatched_leaf_in_sjit(helper):
    rule = ss.TreePathShardingRule(("w1", P()))
    with pytest.raises(ss.ShardingError, match=r"in_shardings: rule TreePathShardingRule.* on params: .*'w2'"):
        helper.sjit(mlp, in_shardings=(rule, None)).trace(params(), X)


def test_rules_not_a_prefix_of_the_arguments(helper):
    with pytest.raises(ss.ShardingError, match=r"not a prefix .*missing key\(s\): \['b'\]") as e:
        helper.sjit(mlp, in_shardings=({"w1": P(), "w2": P(), "b": P()}, None)).trace(params(), X)
    assert "array(" not in str(e.value)  # no dump of the values


# -- pytrees ----------------------------------------------------------------------------------------
Batch = collections.namedtuple("Batch", ["x", "y"])


@dataclasses.dataclass
class Params:
    w1: object
    w2: object


def test_namedtuple_and_dataclass_arguments(helper):
    def loss(p, batch):
        return ((np.tanh(batch.x @ p.w1) @ p.w2 - batch.y) ** 2).sum()

    p = Params(**params())
    batch = Batch(X, np.zeros((8, 4), np.float32))
    f = helper.sjit(loss, in_shardings=(ss.TreePathShardingRule(("w1", P(None, "fsdp")), ("w2", P("fsdp"))),
                                        Batch(P("dp"), P("dp", None))))
    prog = f.trace(p, batch)
    got = by_name(prog)
    assert got == {
        "p['w1']": sh(helper, None, "fsdp", rank=2), "p['w2']": sh(helper, "fsdp", rank=2),
        "batch[0]": sh(helper, "dp", rank=2), "batch[1]": sh(helper, "dp", rank=2),
    }
    expected = ((np.tanh(X @ p.w1) @ p.w2 - batch.y) ** 2).sum()
    np.testing.assert_allclose(f(p, batch), expected, rtol=1e-6)


def test_dataclass_outputs_of_a_registered_class(helper):
    def step(p):
        return Params(p.w1 * 2, p.w2)

    prog = helper.sjit(step, in_shardings=ss.FSDPShardingRule("fsdp", 4, 0),
                       out_shardings=ss.FSDPShardingRule("fsdp", 4, 0)).trace(Params(**params()))
    assert prog.out_shardings == (sh(helper, None, "fsdp", rank=2), sh(helper, "fsdp", None, rank=2))
    out = helper.sjit(step)(Params(**params()))
    assert isinstance(out, Params)
    np.testing.assert_array_equal(out.w1, params()["w1"] * 2)


# -- data ------------------------------------------------------------------------------------------
def test_global_arrays_bring_their_sharding(helper):
    batch = helper.local_data_to_global_array({"x": X, "y": np.zeros((8, 4), np.float32)}, mesh_axis_subset="dp")
    assert isinstance(batch["x"], GlobalArray) and batch["x"].sharding == NamedSharding(helper.mesh, P("dp"))
    prog = helper.sjit(lambda b: b["x"] * 2).trace(batch)
    assert by_name(prog) == {"b['x']": sh(helper, "dp", rank=2), "b['y']": sh(helper, "dp", rank=2)}
    np.testing.assert_array_equal(helper.sjit(lambda b: b["x"] * 2)(batch), X * 2)


# -- nesting ---------------------------------------------------------------------------------------
def test_sjit_inside_a_trace_inlines_with_constraints(helper):
    inner = helper.sjit(lambda x: np.tanh(x), in_shardings=P("dp"), out_shardings=P(None, "fsdp"))
    prog = helper.sjit(lambda x: inner(x * 2)).trace(X)
    assert [e.op for e in prog.eqns] == ["mul", "sharding_constraint", "tanh", "sharding_constraint"]
    assert prog.eqns[1].kw["sharding"] == sh(helper, "dp", rank=2)
    assert prog.eqns[3].kw["sharding"] == sh(helper, None, "fsdp", rank=2)


def test_none_inside_arguments_is_an_empty_subtree(helper):
    def f(state, x):
        return x @ state["w"]

    state = {"w": params()["w1"], "opt": None, "aux": [None, X]}
    rule = ss.TreePathShardingRule(("w", P(None, "fsdp")), ("aux", P("dp")))
    prog = helper.sjit(f, in_shardings=(rule, P("dp"))).trace(state, X)
    assert by_name(prog) == {
        "state['aux'][1]": sh(helper, "dp", rank=2), "state['w']": sh(helper, None, "fsdp", rank=2),
        "x": sh(helper, "dp", rank=2),
    }
    np.testing.assert_array_equal(helper.sjit(f, in_shardings=(rule, P("dp")))(state, X), X @ state["w"])
