"""Explicit mode's API: axis types on meshes, typeof, get_abstract_mesh, auto_axes / explicit_axes,
concrete vs type shardings, out_sharding in auto mode, the program it records, and the numbers."""

from __future__ import annotations

import numpy as np
import pytest

import simshard as ss
import simshard.numpy as snp
from simshard import P
from simshard.tracing.explicit.types import spec_of

EXPLICIT = ss.make_mesh((2, 4), ("X", "Y"), axis_types=ss.AxisType.Explicit)
AUTO = ss.make_mesh((2, 4), ("X", "Y"))


def trace(f, *inputs, mesh=EXPLICIT):
    with ss.use_mesh(mesh):
        return ss.jit(f).trace(*inputs)


def sd(shape, *spec, dtype=np.float32):
    return ss.ShapeDtype(shape, dtype, sharding=P(*spec))


# -- meshes ------------------------------------------------------------------------------------------
def test_mesh_axis_types_default_auto_and_are_part_of_identity():
    assert AUTO.axis_types == (ss.AxisType.Auto, ss.AxisType.Auto)
    assert EXPLICIT.explicit_axes == ("X", "Y") and AUTO.auto_axes == ("X", "Y")
    assert EXPLICIT != AUTO and hash(EXPLICIT) != hash(AUTO)
    assert EXPLICIT == ss.make_mesh((2, 4), ("X", "Y"), axis_types=(ss.AxisType.Explicit,) * 2)
    assert str(EXPLICIT) == str(AUTO)  # Shardy text has no axis types
    assert "axis_types=(Explicit, Explicit)" in repr(EXPLICIT) and "axis_types" not in repr(AUTO)
    mixed = EXPLICIT.update_axis_types({"X": ss.AxisType.Auto})
    assert mixed.axis_types == (ss.AxisType.Auto, ss.AxisType.Explicit)
    assert mixed.renamed("m").axis_types == mixed.axis_types
    with pytest.raises(ss.ShardingError):
        ss.make_mesh((2, 4), ("X", "Y"), axis_types=(ss.AxisType.Explicit,))
    with pytest.raises(Exception):
        EXPLICIT.axis_types = ()


def test_get_abstract_mesh_prints_like_jax():
    assert repr(ss.get_abstract_mesh()) == "AbstractMesh((), axis_types=())"
    with ss.use_mesh(EXPLICIT):
        m = ss.get_abstract_mesh()
        assert repr(m) == "AbstractMesh('X': 2, 'Y': 4, axis_types=(Explicit, Explicit))"
        assert m.are_all_axes_explicit and m.shape == {"X": 2, "Y": 4}


# -- typeof ------------------------------------------------------------------------------------------
def test_typeof_under_jit_follows_the_seed():
    seen = {}

    def add_arrays(x, y):
        ans = x + y
        seen.update(x=ss.typeof(x), y=ss.typeof(y), ans=ss.typeof(ans))
        return ans

    program = trace(add_arrays, sd((4, 1), "X", None), sd((1, 8), None, "Y"))
    assert str(seen["x"]) == "float32[4@X,1]" and str(seen["y"]) == "float32[1,8@Y]"
    assert str(seen["ans"]) == "float32[4@X,8@Y]"
    assert repr(seen["ans"]) == "ShapedArray(float32[4@X,8@Y])"
    assert seen["ans"].str_short() == "f32[4@X,8@Y]" and seen["ans"].type_string(long=False) == "f32[4@X,8@Y]"
    assert seen["ans"].sharding.spec == P("X", "Y")
    assert program.mode == "explicit" and program.type_string(program.outputs[0]) == "f32[4@X,8@Y]"
    assert "f32[4@X,8@Y] = add" in program.pretty()


def test_typeof_of_plain_values():
    assert str(ss.typeof(np.arange(8).reshape(4, 2))) == "int64[4,2]"
    assert str(ss.typeof(1.0)) == "~float32[]" and str(ss.typeof(True)) == "bool[]"


# -- errors --------------------------------------------------------------------------------------------
def test_axis_twice_error_names_op_and_operand_types():
    with pytest.raises(ss.ShardingTypeError) as e:
        trace(lambda x, y: x + y, sd((4, 4), "X", None), sd((4, 4), None, "X"))
    assert e.value.op == "add"
    assert str(e.value) == "add operation with inputs: f32[4@X,4], f32[4,4@X] produces an illegally sharded result: f32[4@X,4@X]"


def test_out_sharding_resolves_the_ambiguous_contraction():
    a, b = sd((8, 16), None, "X"), sd((16, 32), "X", None)
    with pytest.raises(ss.ShardingTypeError, match="out_sharding"):
        trace(lambda a, b: a @ b, a, b)
    p = trace(lambda a, b: snp.matmul(a, b, out_sharding=P(None, "Y")), a, b)
    assert p.type_string(p.outputs[0]) == "f32[8,32@Y]"


def test_uneven_inputs_are_refused_at_the_jit_boundary_in_explicit_mode_only():
    with pytest.raises(ValueError, match="does not evenly divide the dimension size 6"):
        trace(lambda a: a + 1, sd((6, 16), "Y", None))
    trace(lambda a: a + 1, sd((6, 16), "Y", None), mesh=AUTO)  # auto mode: Shardy pads


def test_plain_numpy_code_is_typed_too():
    def f(x, w):
        return np.tanh(x @ w).sum(axis=1)

    p = trace(f, sd((8, 16), "X", None), sd((16, 32), None, "Y"))
    assert p.type_string(p.outputs[0]) == "f32[8@X]"


# -- auto_axes / explicit_axes ----------------------------------------------------------------------
def test_auto_axes_escape_hatch_from_the_seed():
    seen = {}

    @ss.auto_axes
    def add(x, y):
        seen["mesh"] = repr(ss.get_abstract_mesh())
        seen["x"] = str(ss.typeof(x))
        return x + y

    p = trace(lambda x, y: add(x, y, out_sharding=P("X", None)), sd((4, 4), "X", None), sd((4, 4), None, "X"))
    assert seen["mesh"] == "AbstractMesh('X': 2, 'Y': 4, axis_types=(Auto, Auto))"
    assert seen["x"] == "float32[4,4]"  # auto axes are hidden from the type
    assert p.type_string(p.outputs[0]) == "f32[4@X,4]"
    ops = [e.op for e in p.eqns]
    assert ops == ["add", "reshard"]
    assert p.shardings.get(p.eqns[0].outputs[0]) is None  # made in an auto region: left to propagation


def test_auto_axes_over_some_axes_mixes_modes():
    seen = {}

    def g(y):
        seen["mesh"] = repr(ss.get_abstract_mesh())
        seen["y"] = str(ss.typeof(y))
        z = y * 2
        seen["z"] = str(ss.typeof(z))
        return z

    def f(arr):
        x = np.sin(arr)
        z = ss.auto_axes(g, axes="X")(x, out_sharding=P("X", "Y"))
        seen["after"] = str(ss.typeof(z))
        return z + 1

    p = trace(f, sd((4, 4), "X", "Y"))
    assert seen["mesh"] == "AbstractMesh('X': 2, 'Y': 4, axis_types=(Auto, Explicit))"
    assert seen["y"] == "float32[4,4@Y]" and seen["z"] == "float32[4,4@Y]"
    assert seen["after"] == "float32[4@X,4@Y]"
    mul = next(e for e in p.eqns if e.op == "mul")
    assert all(d.is_open for d in p.shardings[mul.outputs[0]].dims)  # open for the auto axis X


def test_auto_axes_needs_out_sharding():
    with pytest.raises(TypeError, match="out_sharding"):
        trace(lambda a: ss.auto_axes(lambda x: x)(a), sd((8,), "X"))


def test_explicit_axes_in_an_auto_program():
    seen = {}

    @ss.explicit_axes(axes=("X", "Y"))
    def explicit_g(y):
        seen["mesh"] = repr(ss.get_abstract_mesh())
        z = y * 2
        seen["z"] = str(ss.typeof(z))
        return z

    def f(arr):
        x = np.sin(arr)
        seen["x"] = str(ss.typeof(x))
        return explicit_g(x, in_sharding=P("X", "Y")) + 1

    p = trace(f, sd((4, 4), "X", "Y"), mesh=AUTO)
    assert seen["x"] == "float32[4,4]"
    assert seen["mesh"] == "AbstractMesh('X': 2, 'Y': 4, axis_types=(Explicit, Explicit))"
    assert seen["z"] == "float32[4@X,4@Y]"
    assert [e.op for e in p.eqns] == ["sin", "reshard", "mul", "add"]


def test_concrete_sharding_vs_type_sharding():
    seen = {}

    @ss.auto_axes
    def check(x):
        seen["concrete"] = x.sharding
        seen["type"] = ss.typeof(x).sharding.spec
        return x

    trace(lambda a: check(a, out_sharding=P("X")), sd((8,), "X"))
    assert spec_of(seen["concrete"], 1) == (("X",),)  # what the value really is
    assert seen["type"] == P(None)  # what the type may say under Auto axes


# -- auto mode ---------------------------------------------------------------------------------------
def test_out_sharding_in_auto_mode_is_a_sharding_constraint():
    p = trace(lambda a, b: snp.matmul(a, b, out_sharding=P("X", "Y")), sd((8, 16)), sd((16, 32)), mesh=AUTO)
    assert [e.op for e in p.eqns] == ["dot_general", "sharding_constraint"]
    c = p.eqns[-1]
    assert spec_of(c.kw["sharding"], 2) == (("X",), ("Y",))
    assert p.mode == "auto"


def test_reshard_in_auto_mode_records_the_target():
    p = trace(lambda a: ss.reshard(a, P(None, "X")), sd((8, 16)), mesh=AUTO)
    (e,) = p.eqns
    assert e.op == "reshard" and spec_of(e.kw["sharding"], 2) == ((), ("X",))


# -- numbers: everything traced still computes what numpy computes ---------------------------------
def test_programs_evaluate_like_numpy():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal((16, 8)).astype(np.float32)

    def f(a, b):
        x = snp.matmul(a, b, out_sharding=P("X", None))
        y = ss.lax.dynamic_update_slice(x, snp.ones((2, 8), out_sharding=P("X", None)), (3, 0))
        z = ss.lax.dynamic_slice(y, (2, 0), (4, 8))
        s = snp.argsort(a, axis=1)
        t = a.at[:, 0].set(5.0).at[:, 1:3].add(1.0)
        return z, s, t, snp.einsum("ij,jk->ki", a, b)

    with ss.use_mesh(EXPLICIT):
        outs = ss.jit(f, in_shardings=(P("X", None), P(None, None)))(a, b)
    x = a @ b
    x[3:5] = 1
    t = a.copy()
    t[:, 0] = 5
    t[:, 1:3] += 1
    np.testing.assert_array_equal(outs[0], x[2:6])
    np.testing.assert_array_equal(outs[1], np.argsort(a, axis=1, kind="stable"))
    np.testing.assert_array_equal(outs[2], t)
    np.testing.assert_allclose(outs[3], np.einsum("ij,jk->ki", a, b), rtol=1e-6)
    assert outs[1].dtype == np.int32


def test_scatter_into_part_of_a_sharded_dim_asks_for_out_sharding():
    with pytest.raises(ss.ShardingTypeError, match=r"\.at\[\.\.\.\]\.set/add"):
        trace(lambda a: a.at[1:3, :].add(1.0), sd((8, 16), "X", None))


def test_dynamic_starts_clamp_like_xla():
    x = np.arange(10.0)
    with ss.use_mesh(AUTO):
        out = ss.jit(lambda x: ss.lax.dynamic_slice(x, (8,), (4,)))(x)
    np.testing.assert_array_equal(out, x[6:10])


def test_snp_outside_a_trace_is_numpy_with_jax_dtypes():
    assert snp.zeros((2, 3)).dtype == np.float32 and snp.arange(4).dtype == np.int32
    assert snp.array([0, 3]).dtype == np.int32
    # out_sharding= outside a trace commits the result to the devices (tests/runtime/test_eager.py);
    # a bare P needs a mesh for that, as in JAX
    with pytest.raises(ValueError, match="not under a mesh context"):
        snp.zeros((2,), out_sharding=P("X"))


# -- rules for ops without their own ------------------------------------------------------------------
def test_user_ops_are_typed_from_their_factor_rule():
    from simshard.ops import factor_rule, register_op
    from simshard.ir.program import Aval
    from simshard.tracing.tracer import bind

    if "test_rowsum_bias" not in ss.ops.OPS:
        register_op(
            "test_rowsum_bias",
            lambda x, b, **_: (Aval(x.shape[:1], x.dtype),),
            lambda x, b, **_: (x.sum(1) + b,),
            lambda ins, outs, **_: factor_rule("ij,i->i", [a.shape for a in ins], [o.shape for o in outs], reduction="j"),
        )
    try:
        p = trace(lambda x, b: bind("test_rowsum_bias", x, b), sd((8, 16), "X", "Y"), sd((8,), None))
        assert p.type_string(p.outputs[0]) == "f32[8@X]"
        with pytest.raises(ss.ShardingTypeError, match="incompatible shardings"):
            trace(lambda x, b: bind("test_rowsum_bias", x, b), sd((8, 16), "X", None), sd((8,), "Y"))
    finally:  # the registry is shared by every test in this process (tests/ops/test_table.py reads it whole)
        ss.ops.OPS.pop("test_rowsum_bias", None)
