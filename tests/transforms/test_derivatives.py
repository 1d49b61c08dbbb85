"""Every derivative rule, checked by execution: reverse mode against central finite differences
in float64, forward mode against reverse mode, JAX's conventions at ties, and a trace-time error
naming an op without a rule."""

from __future__ import annotations

import numpy as np
import pytest

import simshard as ss

RNG = np.random.default_rng(0)


def _fd(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of the scalar ``f`` at ``x`` (float64)."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def _check(f, *args, argnum=0, tol=1e-6):
    """ss.grad of ``sum(f(...) * weights)`` equals finite differences in argument ``argnum``."""
    out = np.asarray(f(*args))
    w = RNG.standard_normal(out.shape)

    def scalar(*a):
        return np.sum(f(*a) * w)

    got = ss.grad(scalar, argnums=argnum)(*args)
    want = _fd(lambda x: scalar(*args[:argnum], x, *args[argnum + 1:]), args[argnum])
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def positive(*shape):
    return RNG.uniform(0.5, 2.0, shape)


def normal(*shape):
    return RNG.standard_normal(shape)


UNARY = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh,
    "sin": np.sin, "cos": np.cos, "square": np.square, "reciprocal": np.reciprocal, "log1p": np.log1p,
    "expm1": np.expm1,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name):
    _check(UNARY[name], positive(3, 4))


BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
          "maximum": np.maximum, "minimum": np.minimum, "arctan2": np.arctan2, "remainder": np.remainder}


@pytest.mark.parametrize("argnum", [0, 1])
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name, argnum):
    x, y = positive(3, 4), positive(3, 4) + 0.25
    _check(BINARY[name], x, y, argnum=argnum)


def test_broadcast_scalar_and_row_operands():
    _check(lambda a, b: a * b + a, normal(3, 4), normal(4), argnum=1)
    _check(lambda a, s: a * s, normal(3, 4), np.float64(1.5), argnum=1)


@pytest.mark.parametrize("f", [
    lambda x: np.sum(x, axis=0), lambda x: np.sum(x), lambda x: x.mean(axis=1, keepdims=True),
    lambda x: np.max(x, axis=1), lambda x: np.min(x, axis=0), lambda x: np.cumsum(x, axis=1),
    lambda x: x.var(axis=0),
], ids=["sum0", "sum", "mean1", "max1", "min0", "cumsum1", "var0"])
def test_reductions(f):
    _check(f, normal(4, 5))


@pytest.mark.parametrize("argnum", [0, 1])
@pytest.mark.parametrize("f, shapes", [
    (lambda a, b: a @ b, ((3, 4), (4, 5))),
    (lambda a, b: np.einsum("bij,bjk->bik", a, b), ((2, 3, 4), (2, 4, 5))),
    (lambda a, b: np.einsum("ij,kj->ki", a, b), ((3, 4), (5, 4))),
    (lambda a, b: np.einsum("bi,ib->b", a, b), ((3, 4), (4, 3))),
    (lambda a, b: a @ b, ((4,), (4, 2))),
    # contracting dims paired out of order: lhs (0, 1) with rhs (1, 0)
    (lambda a, b: np.tensordot(a, b, axes=([0, 1], [1, 0])), ((2, 3), (3, 2, 4))),
], ids=["matmul", "batched", "transposed", "batch-and-contract", "vector", "crossed-contraction"])
def test_contractions(f, shapes, argnum):
    _check(f, *(normal(*s) for s in shapes), argnum=argnum)


@pytest.mark.parametrize("f", [
    lambda x: x.reshape(6, 2), lambda x: x.T, lambda x: np.transpose(x[None], (2, 0, 1)),
    lambda x: np.broadcast_to(x[:, None, :], (3, 2, 4)), lambda x: x[1:, ::1][:, 1:3],
    lambda x: np.pad(x, ((1, 0), (2, 1))), lambda x: np.concatenate([x, 2 * x[:1]], axis=0),
    lambda x: x[:, 2], lambda x: np.take(x, np.array([2, 0, 2]), axis=1),
    lambda x: np.where(x > 0, x, 0.0), lambda x: x.astype(np.longdouble),
    lambda x: x[::2, 1::3], lambda x: x[1::2, 3:0:1], lambda x: np.sort(x, axis=1),
    lambda x: np.sort(x, axis=0), lambda x: np.prod(x, axis=1),
], ids=["reshape", "T", "transpose", "broadcast", "slice", "pad", "concatenate", "index", "take", "where", "convert",
        "strided", "strided-empty", "sort1", "sort0", "prod"])
def test_layout_and_selection(f):
    _check(f, normal(3, 4))


def test_prod_with_zeros_and_sort_with_ties_follow_jax():
    # d prod / d x_i is the product of the others: at one zero, the product of the non-zeros
    # there and 0 elsewhere; with two zeros, 0 everywhere (no 0/0)
    x = np.array([[2.0, 0.0, 3.0], [0.0, 5.0, 0.0], [1.0, -2.0, 4.0]])
    g = ss.grad(lambda x: np.sum(np.prod(x, axis=1)))(x)
    assert g.tolist() == [[0.0, 6.0, 0.0], [0.0, 0.0, 0.0], [-8.0, 4.0, -2.0]]
    # ties: each sorted position's cotangent goes to the element a stable sort put there
    g = ss.grad(lambda x: np.sum(np.sort(x) * np.array([1.0, 10.0, 100.0, 1000.0])))(np.array([3.0, 1.0, 3.0, 1.0]))
    assert g.tolist() == [100.0, 1.0, 1000.0, 10.0]


def test_broadcast_in_dim_with_its_dims_out_of_order():
    # operand dim 0 -> result dim 2, dim 1 -> result dim 1: the cotangent is transposed back
    _check(ss.jit(lambda x: ss.lax.broadcast_in_dim(x, (3, 2, 4), (2, 1))), normal(4, 2))
    _check(ss.jit(lambda x: ss.lax.broadcast_in_dim(x, (3, 2, 4), (2, 0))), normal(1, 3))


@pytest.mark.parametrize("argnum", [0, 1])
@pytest.mark.parametrize("stride, padding", [((1, 1), ((0, 0), (0, 0))), ((2, 1), ((1, 2), (0, 1))), ((3, 2), ((2, 0), (1, 1))),
                                             ((4, 3), ((3, 4), (2, 2)))])
def test_conv2d(stride, padding, argnum):
    conv = ss.jit(lambda x, w: ss.nn.conv2d(x, w, stride=stride, padding=padding))  # ss.nn runs in a trace only
    _check(conv, normal(2, 3, 7, 6), normal(4, 3, 3, 2), argnum=argnum)


# -- exact on integer values: conv2d, strided slice, sort, reduce_prod ---------------------------
def _ints(shape, lo=-3, hi=4, nonzero=False):
    """Small integer values as float64: every sum and product of the rules below is exact."""
    x = RNG.integers(lo, hi, shape).astype(np.float64)
    return np.where(x == 0, 1.0, x) if nonzero else x


def _affine_grad(F, x: np.ndarray) -> np.ndarray:
    """The exact gradient of ``F`` at ``x`` where ``F`` is affine in each element on its own
    (conv2d, slice, prod): ``F`` with the element set to 1 minus ``F`` with it set to 0."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        at = {}
        for v in (0.0, 1.0):
            y = x.copy()
            y[i] = v
            at[v] = F(y)
        g[i] = at[1.0] - at[0.0]
    return g


def _exact_grads(fn, args, kernel):
    """ss.grad of ``sum(fn(*args) * ct)`` for an integer ``ct``, and the affine reference from
    the numpy ``kernel``, per argument."""
    ct = _ints(np.shape(kernel(*args)))
    got = ss.grad(lambda *a: np.sum(fn(*a) * ct), argnums=tuple(range(len(args))))(*args)
    want = [_affine_grad(lambda y, k=k: np.sum(kernel(*args[:k], y, *args[k + 1:]) * ct), a) for k, a in enumerate(args)]
    return got, want


@pytest.mark.parametrize("x_shape, w_shape, stride, padding", [
    ((1, 1, 4, 4), (1, 1, 1, 1), (1, 1), ((0, 0), (0, 0))),  # 1x1 kernel
    ((2, 3, 7, 6), (4, 3, 3, 2), (2, 3), ((1, 2), (0, 1))),  # strides that leave the last rows unread
    ((1, 2, 5, 4), (3, 2, 2, 2), (4, 3), ((3, 4), (2, 2))),  # stride > kernel, padding >= kernel
    ((2, 2, 3, 5), (2, 2, 3, 5), (1, 1), ((0, 0), (0, 0))),  # one window: the whole input
    ((1, 2, 4, 3), (2, 2, 2, 3), (7, 5), ((2, 2), (1, 1))),  # strides past the last window: one per dim
    ((3, 1, 6, 6), (2, 1, 3, 3), (2, 2), ((1, 1), (1, 1))),
], ids=["1x1", "uneven-stride", "stride-over-kernel", "whole-input", "stride-over-input", "same"])
def test_conv2d_gradients_are_exact_on_integer_values(x_shape, w_shape, stride, padding):
    from simshard.ops import OPS

    def kernel(x, w):
        return OPS["conv2d"].kernel(x, w, stride=stride, padding=padding)[0]

    conv = lambda x, w: ss.nn.conv2d(x, w, stride=stride, padding=padding)  # noqa: E731
    (gx, gw), (want_x, want_w) = _exact_grads(conv, (_ints(x_shape), _ints(w_shape)), kernel)
    np.testing.assert_array_equal(gx, want_x)
    np.testing.assert_array_equal(gw, want_w)


STRIDED = [
    ((7,), (1,), (7,), (3,)),
    ((5, 8), (0, 1), (5, 8), (2, 3)),
    ((9, 4), (2, 1), (8, 4), (3, 2)),  # limits the strides do not reach
    ((4, 6, 5), (1, 0, 2), (4, 5, 5), (2, 4, 1)),  # a stride-1 dim among strided ones
    ((6, 5), (0, 0), (6, 5), (7, 9)),  # strides beyond the dims: one element each
    ((5, 3), (2, 0), (2, 3), (2, 1)),  # an empty result
]


@pytest.mark.parametrize("shape, start, limit, strides", STRIDED,
                         ids=["1d", "2d", "unaligned-limit", "3d-mixed", "stride-over-size", "empty"])
def test_strided_slice_puts_the_cotangent_back_at_the_strided_positions(shape, start, limit, strides):
    window = tuple(slice(s, l, k) for s, l, k in zip(start, limit, strides))
    cut = lambda x: ss.lax.slice(x, start, limit, strides)  # noqa: E731
    (g,), (want,) = _exact_grads(cut, (_ints(shape),), lambda x: x[window])
    np.testing.assert_array_equal(g, want)  # the cotangent at the window, zeros elsewhere
    if want[window].size:
        _check(ss.jit(cut), normal(*shape))


@pytest.mark.parametrize("shape, axis", [((3, 4, 5), 0), ((3, 4, 5), 1), ((3, 4, 5), 2), ((2, 7), 1), ((6,), 0)])
def test_sort_with_ties_sends_each_cotangent_to_the_element_the_stable_sort_put_there(shape, axis):
    x = RNG.integers(0, 3, shape).astype(np.float64)  # three values: many ties
    if len(shape) == 1:
        x[:] = 2.0  # all tied: the identity permutation
    ct = RNG.permutation(x.size).reshape(shape).astype(np.float64)  # distinct: a misrouted one shows
    g = ss.grad(lambda x: np.sum(np.sort(x, axis=axis) * ct))(x)
    want = np.zeros_like(x)
    np.put_along_axis(want, np.argsort(x, axis=axis, kind="stable"), ct, axis=axis)
    np.testing.assert_array_equal(g, want)
    _check(lambda x: np.sort(x, axis=axis), normal(*shape))


@pytest.mark.parametrize("zeros", [0, 1, 2, 3])
@pytest.mark.parametrize("axes", [(0,), (1,), (2,), (0, 2), (0, 1, 2)], ids=str)
def test_prod_gradient_is_exact_with_zeros(axes, zeros):
    """No zero in a group: prod / x; one: the others' product at the zero, 0 elsewhere; two or
    more: 0. Zeros placed at random, so partial reductions mix the three kinds of group."""
    x = _ints((3, 4, 2), -2, 3, nonzero=True)
    x.flat[RNG.choice(x.size, zeros, replace=False)] = 0.0
    (g,), (want,) = _exact_grads(lambda x: np.prod(x, axis=axes), (x,), lambda x: np.prod(x, axis=axes))
    np.testing.assert_array_equal(g, want)
    if zeros == 0:
        _check(lambda x: np.prod(x, axis=axes), positive(3, 4, 2))


def test_prod_gradient_with_zeros_in_float32():
    x = np.array([[2.0, 0.0, 3.0], [0.0, 5.0, 0.0], [1.0, -2.0, 4.0]], np.float32)
    g = ss.grad(lambda x: np.sum(np.prod(x, axis=0)))(x)
    assert g.dtype == np.float32 and g.tolist() == [[0.0, -10.0, 0.0], [2.0, 0.0, 12.0], [0.0, 0.0, 0.0]]


def test_vmap_of_these_gradients_equals_the_loop():
    """Per-example gradients: the rules' ops (argsort, one-hot contractions, pads, selects) batch."""
    xs = RNG.integers(-1, 2, (4, 3, 5)).astype(np.float64)  # zeros and ties
    w = _ints((2, 1, 2, 2))
    losses = [
        lambda x: np.sum(np.prod(x, axis=1) * np.arange(3.0)),
        lambda x: np.sum(np.sort(x, axis=1) * np.arange(15.0).reshape(3, 5)),
        lambda x: np.sum(ss.lax.slice(x, (0, 1), (3, 5), (2, 3)) * 3.0),
        lambda x: np.sum(ss.nn.conv2d(x[None, None], w, stride=(2, 1), padding=((1, 0), (0, 1)))),
    ]
    for loss in losses:
        batched = ss.vmap(ss.grad(loss))(xs)
        np.testing.assert_array_equal(batched, np.stack([ss.grad(loss)(x) for x in xs]))


def test_convert_passes_the_cotangent_back_in_the_operand_dtype():
    g = ss.grad(lambda x: np.sum(x.astype(np.float32) * np.float32(3)))(np.arange(3.0))
    assert g.dtype == np.float64 and g.tolist() == [3.0, 3.0, 3.0]


def test_dynamic_slice_and_update():
    def f(x, u):
        window = ss.lax.dynamic_slice(x, (np.int32(1), np.int32(1)), (2, 2))
        return ss.lax.dynamic_update_slice(x, u * window, (np.int32(0), np.int32(2)))

    x, u = normal(3, 4), normal(2, 2)
    _check(ss.jit(f), x, u, argnum=0)  # jit: ss.lax runs in a trace only
    _check(ss.jit(f), x, u, argnum=1)


def test_maximum_splits_a_tie_evenly_and_where_selects():
    """JAX's conventions: d maximum(x, y) is 0.5 / 0.5 where x == y; d where(c, x, y) routes."""
    x = np.array([1.0, 2.0, 3.0])
    y = np.array([1.0, 1.0, 4.0])
    gx, gy = ss.grad(lambda x, y: np.sum(np.maximum(x, y)), argnums=(0, 1))(x, y)
    assert gx.tolist() == [0.5, 1.0, 0.0] and gy.tolist() == [0.5, 0.0, 1.0]
    g = ss.grad(lambda z: np.sum(np.where(z > 0, z, 0.0)))(np.array([-1.0, 0.0, 2.0]))
    assert g.tolist() == [0.0, 0.0, 1.0]  # relu as a select: 0 at 0 (maximum would give 0.5)
    g = ss.grad(lambda z: np.max(z))(np.array([3.0, 1.0, 3.0]))
    assert g.tolist() == [0.5, 0.0, 0.5]  # reduce_max shares the cotangent among its maxima


def test_forward_mode_is_the_jacobian_applied_to_the_tangent():
    w = normal(4, 3)
    f = lambda x: np.tanh(x @ w)  # noqa: E731
    x, t = normal(2, 4), normal(2, 4)
    out, tangent = ss.jvp(f, (x,), (t,))
    np.testing.assert_allclose(out, f(x))
    eps = 1e-6
    np.testing.assert_allclose(tangent, (f(x + eps * t) - f(x - eps * t)) / (2 * eps), rtol=1e-6, atol=1e-8)


def test_grad_of_grad_and_pytrees_and_aux():
    d2 = ss.grad(ss.grad(lambda x: x ** 3))(np.float64(2.0))
    assert float(d2) == 12.0
    params = {"a": np.array([1.0, 2.0]), "b": (np.float64(3.0),)}

    def loss(p, scale):
        return np.sum(p["a"] * p["b"][0]) * scale, {"n": p["a"].shape[0]}

    (value, aux), g = ss.value_and_grad(loss, has_aux=True)(params, 2.0)
    assert float(value) == 18.0 and aux == {"n": 2}
    assert g["a"].tolist() == [6.0, 6.0] and float(g["b"][0]) == 6.0
    gx, gy = ss.grad(lambda x, y: np.sum(x * y * y), argnums=(0, 1))(np.ones(2), np.ones(2))
    assert gx.tolist() == [1.0, 1.0] and gy.tolist() == [2.0, 2.0]
    gx, gy = ss.grad(lambda x, y: np.sum(x * y * y), argnums=(0, 1))(*(np.full(2, 3.0),) * 2)  # one array twice
    assert gx.tolist() == [9.0, 9.0] and gy.tolist() == [18.0, 18.0]


def test_vjp_inside_a_trace():
    def f(x):
        out, back = ss.vjp(lambda x: np.sin(x) * 2, x)
        (g,) = back(np.ones_like(x))
        return out, g

    x = normal(5)
    out, g = ss.jit(f)(x)
    np.testing.assert_allclose(g, 2 * np.cos(x))


@pytest.fixture
def softplus_without_a_derivative():
    from simshard.ops import OPS
    from simshard.ops.factors import factor_rule

    ss.register_op("user_softplus_nd", lambda x, **_: (ss.Aval(x.shape, x.dtype),),
                   lambda x, **_: (np.log1p(np.exp(x)),),
                   lambda ins, outs, **_: factor_rule("ab->ab", [ins[0].shape], [outs[0].shape]))
    yield OPS["user_softplus_nd"]
    del OPS["user_softplus_nd"]


def test_an_op_without_a_rule_is_named_at_trace_time(softplus_without_a_derivative):
    op = softplus_without_a_derivative
    with pytest.raises(ss.TraceError, match=r"reverse mode: op user_softplus_nd\(f64\[2,2\]\) has no derivative rule.*define_vjp"):
        ss.grad(lambda x: np.sum(op(x)))(normal(2, 2))
    with pytest.raises(ss.TraceError, match="op user_softplus_nd has no batching rule"):
        ss.vmap(op)(normal(3, 2, 2))
    with pytest.raises(ss.TraceError, match="float scalar output"):
        ss.grad(lambda x: x * 2)(normal(3))


def test_integer_values_carry_no_cotangent():
    g = ss.grad(lambda x: np.sum(x * np.argmax(x)))(np.array([1.0, 3.0, 2.0]))
    assert g.tolist() == [1.0, 1.0, 1.0]


def test_checkpoint_recomputes_the_region_and_gives_the_same_gradient():
    w = normal(4, 4)

    def block(h):
        return np.tanh(h @ w)

    def loss(remat):
        f = ss.checkpoint(block) if remat else block
        return lambda x: np.sum(f(f(x)))

    x = normal(3, 4)
    plain = ss.jit(ss.grad(loss(False))).trace(x)
    remat = ss.jit(ss.grad(loss(True))).trace(x)
    count = lambda p, op: sum(e.op == op for e in p.eqns)  # noqa: E731
    assert count(remat, "tanh") == count(plain, "tanh") + 2  # each block's forward runs again
    np.testing.assert_array_equal(ss.grad(loss(True))(x), ss.grad(loss(False))(x))


def test_checkpoint_inside_a_scan_body_is_recomputed_by_the_derivative_scan():
    """A checkpointed value of a scan's step is not a residual: the derivative's scan computes it
    again from the step's xs (the forward scan's stacked result for it is never read)."""
    ws, x = normal(3, 4, 4), normal(2, 4)

    def loss(remat):
        def step(h, w):
            use = ss.checkpoint(lambda w: np.broadcast_to(w, (2, 4, 4)))(w) if remat else np.broadcast_to(w, (2, 4, 4))
            return np.tanh(h[:, None, :] @ use)[:, 0, :], None

        return lambda ws: np.sum(ss.lax.scan(step, x, ws)[0])

    plain, remat = (ss.jit(ss.grad(loss(r))).trace(ws) for r in (False, True))
    scans = lambda p: [e for e in p.eqns if e.op == "scan"]  # noqa: E731
    (fwd, back), (fwd_r, back_r) = scans(plain), scans(remat)
    broadcasts = lambda body: sum(e.op == "broadcast_in_dim" for e in body.eqns)  # noqa: E731
    assert broadcasts(back_r.kw["body"]) == broadcasts(back.kw["body"]) + 1  # computed again
    saved = lambda f, b: [i for i in b.inputs if i in f.outputs]  # noqa: E731  residuals the derivative reads
    assert len(saved(fwd_r, back_r)) == len(saved(fwd, back)) - 1  # not read as a residual
    assert fwd_r.inputs[1] in back_r.inputs  # but from the stacked xs
    np.testing.assert_array_equal(ss.grad(loss(True))(ws), ss.grad(loss(False))(ws))


def test_stop_gradient_is_a_constant_of_the_derivative():
    g = ss.grad(lambda x: np.sum(x * ss.lax.stop_gradient(x)))(np.array([1.0, 2.0]))
    assert g.tolist() == [1.0, 2.0]  # d(x * c)/dx = c
    # a straight-through rounding: forward rounds, backward passes the gradient through
    st = lambda v: v + ss.lax.stop_gradient(np.floor(v * 4 + 0.5) / 4 - v)  # noqa: E731
    v = np.array([0.13, -0.6, 1.26])
    assert ss.jit(st)(v).tolist() == (np.floor(v * 4 + 0.5) / 4).tolist()
    assert ss.grad(lambda v: np.sum(st(v) * 3))(v).tolist() == [3.0, 3.0, 3.0]
