"""Factor rules pinned to Shardy's (shardy.md a.1-a.16, in our letters), the checker's refusals,
wrong rules caught by execution, register_rule, and clear errors for bad params."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import simshard.ops  # noqa: F401
from simshard import Mesh, Sharding
from simshard.ops import OPS, factor_rule, get_op, register_op, register_rule
from simshard.ops.check import check_rule, shardable_factors
from simshard.ir.program import Aval

F32 = np.float32


def rule_text(op: str, shapes, dtypes=None, **params) -> str:
    dtypes = dtypes or [F32] * len(shapes)
    avals = [Aval(s, d) for s, d in zip(shapes, dtypes)]
    d = get_op(op)
    return str(d.factor_rule(avals, d.abstract_eval(*avals, **params), **params))


# -- shardy.md a.1 - a.16 ----------------------------------------------------------------------
SHARDY_EXAMPLES = [
    # a.1 elementwise, and a scalar operand
    ("add", [(8, 8), (8, 8)], None, {}, "([a, b], [a, b])->([a, b]) {a=8, b=8}"),
    ("select", [(), (8, 8), (8, 8)], [bool, F32, F32], {}, "([], [a, b], [a, b])->([a, b]) {a=8, b=8}"),
    # a.2 matmul
    (
        "dot_general", [(8, 32), (32, 16)], None, {"contracting": ((1,), (0,)), "batch": ((), ())},
        "([a, c], [c, b])->([a, b]) {a=8, b=16, c=32} reduction={c}",
    ),
    # a.3 batched dot_general: batch, lhs free, rhs free, contracting
    (
        "dot_general", [(4, 8, 32), (4, 32, 16)], None, {"contracting": ((2,), (1,)), "batch": ((0,), (0,))},
        "([a, b, d], [a, d, c])->([a, b, c]) {a=4, b=8, c=16, d=32} reduction={d}",
    ),
    # a.4 vector dot
    ("dot_general", [(32,), (32,)], None, {"contracting": ((0,), (0,)), "batch": ((), ())}, "([a], [a])->([]) {a=32} reduction={a}"),
    # a.5 reduce (no init operand here)
    ("reduce_sum", [(2, 64, 13)], None, {"axes": (1,)}, "([a, b, c])->([a, c]) {a=2, b=64, c=13} reduction={b}"),
    ("reduce_max", [(2, 64, 13)], None, {"axes": (1,)}, "([a, b, c])->([a, c]) {a=2, b=64, c=13} reduction={b} reduce=max"),
    # a.6 transpose: factors in result-dim order
    ("transpose", [(256, 32, 64, 100)], None, {"perm": (3, 1, 0, 2)}, "([c, b, d, a])->([a, b, c, d]) {a=100, b=32, c=256, d=64}"),
    # a.7 broadcast_in_dim, and an expanded size-1 dim with its own factor
    (
        "broadcast_in_dim", [(2, 13, 1)], None, {"shape": (2, 64, 13, 1), "broadcast_dimensions": (0, 2, 3)},
        "([a, c, d])->([a, b, c, d]) {a=2, b=64, c=13, d=1}",
    ),
    (
        "broadcast_in_dim", [(2, 1, 13)], None, {"shape": (2, 64, 13), "broadcast_dimensions": (0, 1, 2)},
        "([a, b, d])->([a, c, d]) {a=2, b=1, c=64, d=13}",
    ),
    # a.8 reshape
    ("reshape", [(2, 4)], None, {"new_shape": (8,)}, "([a, b])->([(ab)]) {a=2, b=4}"),
    ("reshape", [(8,)], None, {"new_shape": (2, 4)}, "([(ab)])->([a, b]) {a=2, b=4}"),
    ("reshape", [(8, 4, 5)], None, {"new_shape": (2, 16, 5)}, "([(ab), c, d])->([a, (bc), d]) {a=2, b=4, c=4, d=5}"),
    ("reshape", [(6, 4)], None, {"new_shape": (4, 6)}, "([(ab), (ef)])->([(ac), (df)]) {a=2, b=3, c=2, d=3, e=2, f=2}"),
    ("reshape", [(3, 2)], None, {"new_shape": (2, 3)}, "([a, d])->([b, c]) {a=3, b=2, c=3, d=2}"),
    # a.9 concatenate
    (
        "concatenate", [(4, 16, 256), (4, 16, 256)], None, {"axis": 1},
        "([a, b, c], [a, b, c])->([a, b, c]) {a=4, b=32, c=256} need_replication={b}",
    ),
    # a.10 slice, and pad (same shape of rule)
    (
        "slice", [(32, 4, 8)], None, {"start": (0, 0, 0), "limit": (32, 1, 2), "strides": (1, 1, 1)},
        "([a, b, c])->([a, b, c]) {a=32, b=4, c=8} permutation={b, c}",
    ),
    (
        "pad", [(32, 4, 8)], None, {"padding_value": 0.0, "widths": ((0, 0), (1, 2), (0, 3))},
        "([a, b, c])->([a, b, c]) {a=32, b=4, c=8} permutation={b, c}",
    ),
    # a.12 (gather's cousin) take along an axis
    ("take", [(4, 5), (3,)], [F32, np.int32], {"axis": 0}, "([c, b], [a])->([a, b]) {a=3, b=5, c=4} need_replication={c}"),
    # a.14 convolution (Shardy's NHWC example, in NCHW / OIHW)
    (
        "conv2d", [(2, 192, 224, 224), (64, 192, 3, 3)], None, {"stride": (2, 2), "padding": ((0, 1), (0, 1))},
        "([a, f, (bc), (de)], [g, f, c, e])->([a, g, b, d]) {a=2, b=112, c=2, d=112, e=2, f=192, g=64} "
        "reduction={c, e, f} permutation={b, d}",
    ),
    # a.15 sort
    ("sort", [(4, 32, 8)], None, {"axis": 0}, "([a, b, c])->([a, b, c]) {a=4, b=32, c=8} need_replication={a}"),
    # nullary ops
    ("iota", [], None, {"shape": (4, 5), "dimension": 1, "dtype": np.int32}, "()->([a, b]) {a=4, b=5}"),
]


@pytest.mark.parametrize("op, shapes, dtypes, params, text", SHARDY_EXAMPLES, ids=[f"{e[0]}-{i}" for i, e in enumerate(SHARDY_EXAMPLES)])
def test_rule_text_matches_shardy(op, shapes, dtypes, params, text):
    assert rule_text(op, shapes, dtypes, **params) == text


def test_inexact_factors():
    avals = [Aval((4, 16, 256), F32), Aval((4, 7, 256), F32)]
    d = get_op("concatenate")
    rule = d.factor_rule(avals, d.abstract_eval(*avals, axis=1), axis=1)
    assert rule.inexact == {"b"}  # 32 in the result, not in the operands
    conv = [Aval((2, 3, 5, 6), F32), Aval((4, 3, 5, 2), F32)]
    d = get_op("conv2d")
    rule = d.factor_rule(conv, d.abstract_eval(*conv, stride=(1, 2), padding=((0, 0), (0, 0))), stride=(1, 2), padding=((0, 0), (0, 0)))
    # H: one window over the whole dim (5 == KH, no front padding): its window factor stays exact.
    # W: 3 windows of 2 with stride 2 -- exact sizes, but only a propagation hint (window d sits
    # minor to the permutation factor c); the result's H (size 1) gets its own factor g.
    assert str(rule) == "([a, e, b, (cd)], [f, e, b, d])->([a, f, g, c]) {a=2, b=5, c=3, d=2, e=3, f=4, g=1} reduction={b, d, e} permutation={c}"
    assert rule.inexact == {"c", "d", "g"}
    assert shardable_factors(rule, [a.shape for a in conv], [(2, 4, 1, 3)]) == ("a", "b", "e", "f")


# -- the checker refuses assignments it cannot run -------------------------------------------
MESH = Mesh({"x": 2, "y": 3})


def _x(*shape):
    return (np.arange(np.prod(shape), dtype=F32).reshape(shape) % 7 + 1) * np.where(np.arange(np.prod(shape)).reshape(shape) % 2, 1, -1)


@pytest.mark.parametrize(
    "op, arrays, params, assignment, message",
    [
        ("sort", [_x(4, 6)], {"axis": 0}, {"a": ("x",)}, "need_replication and must stay unsharded"),
        ("slice", [_x(4, 6)], {"start": (0, 1), "limit": (4, 5), "strides": (1, 1)}, {"b": ("x",)}, "permutation and must stay unsharded"),
        ("conv2d", [_x(1, 2, 6, 6), _x(2, 2, 2, 2)], {"stride": (2, 2), "padding": ((0, 0), (0, 0))}, {"c": ("x",)}, "factor c is inexact"),
        ("add", [_x(4, 6), _x(4, 6)], {}, {"a": ("x",), "b": ("x",)}, "used twice"),
        ("reshape", [_x(4, 6)], {"new_shape": (24,)}, {"b": ("x",)}, "not fully sharded"),
        ("reshape", [_x(3, 6)], {"new_shape": (18,)}, {"a": ("x",)}, "do not divide it"),
        ("reshape", [_x(8)], {"new_shape": (2, 4)}, {"a": ("x",), "b": ("y",)}, "uneven shardings need a factor alone"),
        ("add", [_x(4, 6), _x(4, 6)], {}, {"z": ("x",)}, "no factor named 'z'"),
    ],
)
def test_checker_refuses(op, arrays, params, assignment, message):
    with pytest.raises(ValueError, match=message):
        check_rule(op, arrays, params, MESH, assignment)


def test_report_names_the_shardings():
    report = check_rule("dot_general", [_x(5, 7), _x(7, 3)], {"contracting": ((1,), (0,)), "batch": ((), ())}, MESH, {"a": ("x",), "c": ("y",)})
    assert str(report.in_shardings[0]) == '<@mesh, [{"x"}, {"y"}]>'
    assert str(report.out_shardings[0]) == '<@mesh, [{"x"}, {}], unreduced={"y"}>'
    assert "bitwise equal on 6 devices" in str(report)


def test_uneven_reduction_pads_with_the_identity():
    # 5 rows over 3 devices: blocks 2, 2, 1; max over an all-negative column must not see zeros.
    x = -np.arange(1, 16, dtype=F32).reshape(5, 3)
    for op in ("reduce_max", "reduce_min", "reduce_sum", "reduce_prod"):
        check_rule(op, [x], {"axes": (0,)}, Mesh({"y": 3, "x": 2}), {"a": ("y", "x")})


def test_nullary_kernels_build_a_block():
    kernel = get_op("iota").kernel
    (block,) = kernel(shape=(4, 5), dimension=1, dtype=np.int32, out_index=(np.array([2, 3]), np.array([1, 4])))
    assert block.tolist() == [[1, 4], [1, 4]]
    (const,) = get_op("constant").kernel(value=np.arange(6).reshape(2, 3), out_index=(np.array([1]), np.array([0, 2])))
    assert const.tolist() == [[3, 5]]


def test_local_params_use_local_shapes():
    assert get_op("reshape").local_params({"new_shape": (8, 2)}, [(2, 2, 2)], [(4, 2)]) == {"new_shape": (4, 2)}
    bd = {"shape": (6, 4), "broadcast_dimensions": (1,)}
    assert get_op("broadcast_in_dim").local_params(bd, [(4,)], [(3, 4)]) == {"shape": (3, 4), "broadcast_dimensions": (1,)}


# -- wrong rules are caught by running them ---------------------------------------------------
@pytest.fixture
def scratch_ops():
    """Register test-only ops / rules and restore the table afterwards."""
    before = dict(OPS)
    yield
    OPS.clear()
    OPS.update(before)


def _sum_eval(x, **_):
    return (Aval(x.shape[:-1], x.dtype),)


def _sum_kernel(x, **_):
    return (np.sum(x, axis=-1),)


def test_a_reduction_claimed_pass_through_is_caught(scratch_ops):
    wrong = lambda i, o, **_: factor_rule("ab->a", [i[0].shape], [o[0].shape])  # noqa: E731
    right = lambda i, o, **_: factor_rule("ab->a", [i[0].shape], [o[0].shape], reduction="b")  # noqa: E731
    register_op("bogus_sum", _sum_eval, _sum_kernel, wrong)
    register_op("good_sum", _sum_eval, _sum_kernel, right)
    x = _x(4, 6)
    check_rule("good_sum", [x], {}, MESH, {"b": ("y",)})
    check_rule("bogus_sum", [x], {}, MESH, {"a": ("x",)})  # the wrong claim is harmless unsharded...
    with pytest.raises(AssertionError, match=r"op bogus_sum rule #0 .* with assignment \{b:\(y\)\}.*(disagree|differs)"):
        check_rule("bogus_sum", [x], {}, MESH, {"b": ("y",)})  # ...and caught once b is sharded
    with pytest.raises(AssertionError, match="bogus_sum"):
        check_rule("bogus_sum", [_x(2, 5)], {}, MESH, {"b": ("x", "y")})  # uneven: 5 over 6 devices


def test_a_contraction_claimed_pass_through_is_caught(scratch_ops):
    d = get_op("dot_general")
    wrong = lambda i, o, **_: factor_rule("ac,cb->ab", [a.shape for a in i], [o[0].shape])  # noqa: E731
    register_op("bogus_matmul", d.abstract_eval, d.kernel, wrong)
    params = {"contracting": ((1,), (0,)), "batch": ((), ())}
    with pytest.raises(AssertionError, match="bogus_matmul"):
        check_rule("bogus_matmul", [_x(3, 6), _x(6, 2)], params, MESH, {"c": ("x",)})


def test_a_wrong_reduce_op_is_caught(scratch_ops):
    wrong = lambda i, o, **_: factor_rule("ab->a", [i[0].shape], [o[0].shape], reduction="b", reduce_op="max")  # noqa: E731
    register_op("bogus_sum_max", _sum_eval, _sum_kernel, wrong)
    with pytest.raises(AssertionError, match="differs at global index"):
        check_rule("bogus_sum_max", [_x(4, 6)], {}, MESH, {"b": ("x",)})


def test_a_scan_axis_claimed_pass_through_is_caught(scratch_ops):
    wrong = lambda i, o, **_: factor_rule("ab->ab", [i[0].shape], [o[0].shape])  # noqa: E731
    register_op("bogus_cumsum", lambda x, **_: (x,), lambda x, **_: (np.cumsum(x, axis=1),), wrong)
    check_rule("bogus_cumsum", [_x(4, 6)], {}, MESH, {"a": ("x",)})
    with pytest.raises(AssertionError, match=r"differs at global index \(\d, [3-5]\)"):
        check_rule("bogus_cumsum", [_x(4, 6)], {}, MESH, {"b": ("x",)})


def test_reshape_factors_in_the_wrong_order_are_caught(scratch_ops):
    d = get_op("reshape")
    swapped = lambda i, o, **_: factor_rule("ab->(ba)", [i[0].shape], [o[0].shape])  # noqa: E731
    register_op("bogus_flatten", d.abstract_eval, d.kernel, swapped, local_params=d.local_params)
    x, params = _x(2, 3), {"new_shape": (6,)}
    check_rule("reshape", [x], params, MESH, {"a": ("x",)})
    with pytest.raises(AssertionError, match="bogus_flatten"):
        check_rule("bogus_flatten", [x], params, MESH, {"b": ("y",)})


def _exact_sizes_only(make):
    """A conv rule that trusts every window factor whose sizes happen to multiply exactly."""

    def rule(in_avals, out_avals, **params):
        r = make(in_avals, out_avals, **params)
        shapes = [a.shape for a in in_avals] + [a.shape for a in out_avals]
        bad = {f for dims, shape in zip(r.tensors, shapes) for fs, n in zip(dims, shape) if np.prod([r.sizes[f] for f in fs]) != n}
        return dataclasses.replace(r, inexact=frozenset(bad))

    return rule


@pytest.mark.parametrize(
    "x_shape, w_shape, params, mesh",
    [
        # one window over the whole (front-padded) dim: kernel rows no longer line up with input rows
        ((1, 1, 4, 1), (1, 1, 4, 1), {"stride": (3, 1), "padding": ((1, 1), (0, 0))}, Mesh({"x": 2})),
        # non-overlapping windows, window (3) > windows (2): Shardy puts the window factor major
        ((1, 1, 6, 1), (1, 1, 3, 1), {"stride": (3, 1), "padding": ((0, 0), (0, 0))}, Mesh({"x": 3})),
    ],
)
def test_conv_window_factors_are_not_blocks_even_when_sizes_multiply(scratch_ops, x_shape, w_shape, params, mesh):
    conv = get_op("conv2d")
    register_op("conv2d_trusting", conv.abstract_eval, conv.kernel, _exact_sizes_only(conv.rule))
    with pytest.raises(ValueError, match="factor b is inexact"):
        check_rule("conv2d", [_x(*x_shape), _x(*w_shape)], params, mesh, {"b": ("x",)})
    with pytest.raises(AssertionError, match="conv2d_trusting"):
        check_rule("conv2d_trusting", [_x(*x_shape), _x(*w_shape)], params, mesh, {"b": ("x",)})


def test_register_rule_adds_a_rule_used_with_rule_index_1(scratch_ops):
    # A second rule for reduce_sum, written with the spec builder; rule_index=1 selects it.
    conservative = lambda i, o, *, axes, **_: factor_rule("ab->a", [i[0].shape], [o[0].shape], need_replication="b")  # noqa: E731
    register_rule("reduce_sum", conservative)
    x, params = _x(4, 6), {"axes": (1,)}
    avals = [Aval(x.shape, x.dtype)]
    rules = get_op("reduce_sum").rules(avals, get_op("reduce_sum").abstract_eval(*avals, **params), **params)
    assert [str(r) for r in rules] == ["([a, b])->([a]) {a=4, b=6} reduction={b}", "([a, b])->([a]) {a=4, b=6} need_replication={b}"]
    check_rule("reduce_sum", [x], params, MESH, {"b": ("x",)}, rule_index=0)
    report = check_rule("reduce_sum", [x], params, MESH, {"a": ("x",)}, rule_index=1)
    assert report.rule_index == 1 and "need_replication={b}" in str(report)
    with pytest.raises(ValueError, match="need_replication"):
        check_rule("reduce_sum", [x], params, MESH, {"b": ("x",)}, rule_index=1)
    # A wrong extra rule is caught the same way as a wrong first one.
    register_rule("reduce_sum", lambda i, o, **_: factor_rule("ab->a", [i[0].shape], [o[0].shape]))
    with pytest.raises(AssertionError, match="rule #2"):
        check_rule("reduce_sum", [x], params, MESH, {"b": ("x",)}, rule_index=2)
    with pytest.raises(ValueError, match="rule_index 3 is out of range"):
        check_rule("reduce_sum", [x], params, MESH, {}, rule_index=3)


def test_scratch_ops_are_gone():
    assert not {n for n in OPS if n.startswith(("bogus", "good_", "conv2d_"))}
    assert len(get_op("reduce_sum").extra_rules) == 0


# -- bad params: clear ValueErrors naming the op ----------------------------------------------
def _aval(*shape, dtype=F32):
    return Aval(shape, dtype)


BAD_PARAMS = [
    ("reduce_sum", [_aval(2, 3)], {"axes": (2,)}, "out of range"),
    ("reduce_max", [_aval(2, 3)], {"axes": (1, 1)}, "repeat"),
    ("reduce_min", [_aval(2, 0)], {"axes": (1,)}, "zero-size"),
    ("argmax", [_aval(2, 3)], {"axis": -1, "index_dtype": np.int32}, "out of range"),
    ("argmin", [_aval(2, 3)], {"axis": 0, "index_dtype": np.float32}, "integer dtype"),
    ("cumsum", [_aval(2, 3)], {"axis": 2}, "out of range"),
    ("sort", [_aval()], {"axis": 0}, "rank 0"),
    ("reshape", [_aval(2, 3)], {"new_shape": (4,)}, "6 elements"),
    ("transpose", [_aval(2, 3)], {"perm": (0, 0)}, "not a permutation"),
    ("broadcast_in_dim", [_aval(3)], {"shape": (2, 4), "broadcast_dimensions": (1,)}, "must be equal"),
    ("broadcast_in_dim", [_aval(3)], {"shape": (3,), "broadcast_dimensions": (0, 1)}, "1 entries"),
    ("concatenate", [_aval(2, 3), _aval(3, 3)], {"axis": 1}, "only dim 1 may differ"),
    ("concatenate", [], {"axis": 0}, "at least one operand"),
    ("slice", [_aval(4)], {"start": (3,), "limit": (2,), "strides": (1,)}, "start"),
    ("slice", [_aval(4)], {"start": (0,), "limit": (4,), "strides": (0,)}, "stride"),
    ("pad", [_aval(4)], {"padding_value": 0, "widths": ((-1, 0),)}, "non-negative"),
    ("take", [_aval(4), _aval(2)], {"axis": 0}, "integer dtype"),
    ("iota", [], {"shape": (3,), "dimension": 1, "dtype": np.int32}, "dimension 1 is out of range"),
    ("full", [], {"shape": (3,), "fill_value": np.ones(2), "dtype": F32}, "scalar"),
    ("constant", [], {"value": [1, 2]}, "numpy array"),
    ("conv2d", [_aval(1, 3, 5, 5), _aval(2, 4, 3, 3)], {"stride": (1, 1), "padding": ((0, 0), (0, 0))}, "input channels"),
    ("conv2d", [_aval(1, 3, 2, 5), _aval(2, 3, 3, 3)], {"stride": (1, 1), "padding": ((0, 0), (0, 0))}, "smaller than the kernel"),
    ("conv2d", [_aval(1, 3, 5, 5), _aval(2, 3, 3, 3)], {"stride": (0, 1), "padding": ((0, 0), (0, 0))}, "stride"),
    ("sharding_constraint", [_aval(2, 3)], {"sharding": Sharding.replicated_on(MESH, 1)}, "rank 2"),
    ("reshard", [_aval(2, 3), _aval(2, 3)], {"sharding": None}, "expected 1 operand"),
]


@pytest.mark.parametrize("op, avals, params, message", BAD_PARAMS, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD_PARAMS)])
def test_bad_params_raise_a_clear_error(op, avals, params, message):
    with pytest.raises(ValueError, match=message) as info:
        get_op(op).abstract_eval(*avals, **params)
    assert str(info.value).startswith(f"{op}:")
