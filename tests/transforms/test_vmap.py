"""vmap: every batching rule checked by execution against a Python loop over the examples, and
vmap composed with grad, in_axes / out_axes, and spmd_axis_name on a sharded run."""

from __future__ import annotations

import numpy as np
import pytest

import simshard as ss

RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 3))
XS = RNG.standard_normal((5, 2, 4))  # 5 examples of [2, 4]

CASES = {
    "unary-binary-scalar": lambda x: np.exp(x) * 2.0 + np.sum(x) * x,
    "where-max": lambda x: np.where(x > 0, x, np.maximum(x, -0.5)),
    "matmul-free": lambda x: x @ W,
    "matmul-rhs": lambda x: W.T @ x.T,
    "matmul-both": lambda x: x @ x.T,
    "einsum-batch": lambda x: np.einsum("ij,ij->i", x, x),
    "reductions": lambda x: np.concatenate([x.max(axis=0), x.mean(axis=0), x.min(axis=1)]),
    "layout": lambda x: x.T.reshape(8)[1:7].reshape(2, 3),
    "broadcast": lambda x: np.broadcast_to(x[:, None, :], (2, 3, 4)).sum(axis=1),
    "pad-concat": lambda x: np.concatenate([np.pad(x, ((1, 0), (0, 2))), np.ones((1, 6))], axis=0),
    "take": lambda x: np.take(x, np.array([3, 0, 3]), axis=1),
    "index": lambda x: x[1, 1:3] * x[0, 0],
    "cumsum-sort-argmax": lambda x: np.cumsum(np.sort(x, axis=1), axis=1) + np.argmax(x, axis=1)[:, None],
    "dynamic": lambda x: ss.lax.dynamic_update_slice(x, ss.lax.dynamic_slice(x, (np.int32(0), np.int32(1)), (2, 2)),
                                                     (np.int32(0), np.int32(2))),
    "conv2d": lambda x: ss.nn.conv2d(x.reshape(1, 1, 2, 4), np.arange(4.0).reshape(2, 1, 1, 2), padding=((0, 1), (1, 0))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_vmap_is_the_loop_over_examples(name):
    f = CASES[name]
    got = ss.jit(ss.vmap(f))(XS)
    want = np.stack([ss.jit(f)(x) for x in XS])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_vmap_closes_over_values_of_the_enclosing_trace():
    def f(w, xs):
        scale = np.sum(w)
        return ss.vmap(lambda x: x @ w * scale)(xs)

    np.testing.assert_allclose(ss.jit(f)(W, XS), np.stack([x @ W * np.sum(W) for x in XS]))


def test_axes_and_composition_with_grad():
    m = RNG.standard_normal((4, 5))
    np.testing.assert_allclose(ss.vmap(lambda c: c * 2 + c.sum(), in_axes=1, out_axes=1)(m), m * 2 + m.sum(axis=0))
    loss = lambda w, x, y: np.sum((x @ w - y) ** 2)  # noqa: E731
    xs, ys = RNG.standard_normal((5, 4)), RNG.standard_normal((5, 3))
    per_example = ss.vmap(ss.grad(loss), in_axes=(None, 0, 0))(W, xs, ys)
    np.testing.assert_allclose(per_example, np.stack([ss.grad(loss)(W, x, y) for x, y in zip(xs, ys)]))
    g = ss.grad(lambda w: np.sum(ss.vmap(lambda x: np.tanh(x @ w))(xs)))(W)
    np.testing.assert_allclose(g, ss.grad(lambda w: np.sum(np.tanh(xs @ w)))(W))


def test_spmd_axis_name_shards_the_batch_and_runs_bitwise():
    x, w = ss.exact_inputs([(8, 4), (4, 4)])
    res = ss.run(lambda x, w: ss.vmap(lambda r: np.maximum(r @ w, 0), spmd_axis_name="x")(x), x, w,
                 mesh=ss.Mesh({"x": 4}), backend="local")
    assert res.verify.bitwise and res.comm.total_bytes == 0
    assert res.program.sharding_of(0).dims[0].axes[0].name == "x"


def test_errors_name_the_problem():
    with pytest.raises(ss.TraceError, match="mapped axes have sizes"):
        ss.vmap(lambda a, b: a + b)(np.ones(3), np.ones(4))
    with pytest.raises(ss.TraceError, match="batched indices"):
        ss.vmap(lambda x, i: np.take(x, i))(np.ones((2, 3)), np.zeros((2, 1), np.int32))
    with pytest.raises(ss.TraceError, match=r"vmap over conv2d's kernel \(a batch of kernels\) is not supported"):
        ss.vmap(lambda w: ss.nn.conv2d(np.ones((1, 1, 3, 3)), w))(np.ones((2, 1, 1, 1, 1)))
