"""Transformations as JAX has them (issue 27): grad refuses integer inputs, ``x.sharding.spec``
on traced values, ``vmap`` of functions holding ``scan`` / ``cond`` / ``switch`` /
``while_loop`` (each checked against the function run example by example), nullary ``vmap``."""

from __future__ import annotations

import numpy as np
import pytest

import simshard as ss
from simshard import P

XS = (np.arange(24) % 7 - 3).astype(np.float32).reshape(3, 8)


@pytest.mark.parametrize("transform, name", [(ss.grad, "grad"), (ss.value_and_grad, "value_and_grad")])
def test_grad_refuses_integer_inputs_naming_the_argument(transform, name):
    def f(w, count):
        return (w * count).sum()

    g = transform(f, argnums=(0, 1))
    with pytest.raises(TypeError, match=rf"{name}: argument 1 \(count\) is int32.*allow_int=True"):
        g(np.ones(4, np.float32), np.arange(4, dtype=np.int32))
    with pytest.raises(TypeError, match=rf"{name}: argument 1 \(count\) is int32"):
        ss.jit(g)(np.ones(4, np.float32), np.arange(4, dtype=np.int32))
    with pytest.raises(TypeError, match="argument 0 .* is bool"):
        transform(lambda b: b.sum())(np.ones(2, bool))
    got = ss.grad(f, argnums=1, allow_int=True)(np.ones(4, np.float32), np.arange(4, dtype=np.int32))
    assert got.shape == (4,)
    np.testing.assert_array_equal(ss.grad(f)(np.ones(4, np.float32), np.arange(4, dtype=np.int32)), np.arange(4))


def test_sharding_spec_of_traced_values():
    seen = {}
    mesh = ss.make_mesh((2, 4), ("X", "Y"), axis_types=ss.AxisType.Explicit)

    def f(x):
        seen["x"], seen["y"] = x.sharding.spec, ss.numpy.sum(x, axis=0).sharding.spec
        return x

    with ss.use_mesh(mesh):
        ss.jit(f, in_shardings=P("X", "Y")).trace(np.ones((8, 4), np.float32))
    assert seen["x"] == P("X", "Y") and seen["y"] == P("Y")


def _each(f, *batches):
    outs = [f(*ex) for ex in zip(*batches)]
    if isinstance(outs[0], tuple):
        return tuple(np.stack(o) for o in zip(*outs))
    return np.stack(outs)


def _check(f, *batches, in_axes=0):
    want = _each(f, *batches)
    got = ss.jit(ss.vmap(f, in_axes=in_axes))(*batches)
    for g, w in zip(got if isinstance(want, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        np.testing.assert_array_equal(g, w)


def test_vmap_of_scan():
    _check(lambda r: ss.lax.scan(lambda c, x: (c + x, c * x), np.float32(0), r), XS)
    # the xs shared by every example, the carry batched
    ys = XS[0]
    f = lambda c0: ss.lax.scan(lambda c, x: (c * 0.5 + x, c), c0, ys)  # noqa: E731
    _check(f, XS[:, 0])
    _check(lambda r: ss.lax.fori_loop(0, 3, lambda i, c: c * 2 + 1.0, r), XS)


def test_vmap_of_cond_and_switch():
    _check(lambda r: ss.lax.cond(r.sum() > 0, lambda a: a * 2, lambda a: a - 1, r), XS)  # batched predicate
    idx = np.array([2, 0, 1], dtype=np.int32)
    _check(lambda k, r: ss.lax.switch(k, [lambda a: a, lambda a: -a, lambda a: a * a], r), idx, XS)


def test_vmap_of_switch_with_an_unbatched_index():
    def f(r):
        return ss.lax.switch(np.int32(1) + (r.sum() * 0).astype(np.int32) * 0, [lambda a: a, lambda a: a + 1], r)

    f_shared = lambda r, k: ss.lax.switch(k, [lambda a: a, lambda a: a + 1], r)  # noqa: E731
    got = ss.jit(lambda xs, k: ss.vmap(lambda r: f_shared(r, k))(xs))(XS, np.int32(1))
    np.testing.assert_array_equal(got, XS + 1)
    _check(f, XS)


def test_vmap_of_while_loop_each_example_stops_on_its_own():
    def f(r):
        return ss.lax.while_loop(lambda c: c.sum() < 100, lambda c: c * 2 + 1, r)

    _check(f, np.abs(XS))


def test_vmap_of_a_nullary_function():
    with pytest.raises(ValueError, match="no array arguments.*axis_size"):
        ss.vmap(lambda: np.float32(1.0))()
    np.testing.assert_array_equal(ss.vmap(lambda: np.ones(3, np.float32), axis_size=2)(), np.ones((2, 3)))
