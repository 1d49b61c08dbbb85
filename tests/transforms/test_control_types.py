"""Control flow keeps JAX's sharding type rules in explicit mode (issue 27, seed 001): branches
of ``cond`` / ``switch`` must give equal types, loops must keep each carry's type, and ``scan``
over ``xs`` sharded on the scanned dim types one slice without that dim's axes."""

from __future__ import annotations

import numpy as np
import pytest

import simshard as ss
import simshard.numpy as snp
from simshard import P

E = ss.make_mesh((2, 4), ("X", "Y"), axis_types=ss.AxisType.Explicit)
X = (np.arange(128) % 7 - 3).astype(np.float32).reshape(8, 16)


def trace(f, *specs):
    with ss.use_mesh(E):
        return ss.jit(f, in_shardings=specs).trace(*[X] * len(specs))


def _other(x):
    return ss.reshard(x, P(None, "X"))


def test_cond_branches_with_different_shardings_are_a_type_error():
    with pytest.raises(TypeError, match=r"lax.cond: branches must have equal output types.*f32\[8,16@X\].*false branch"):
        trace(lambda a: ss.lax.cond(snp.sum(a) > 0, lambda x: x * 2, _other, a), P("X", None))


def test_switch_branches_with_different_shardings_are_a_type_error():
    with pytest.raises(TypeError, match=r"lax.switch: branches must have equal output types.*branch 2"):
        trace(lambda a: ss.lax.switch(snp.argmax(snp.sum(a, axis=0)) % 3, [lambda x: x, lambda x: x + 1, _other], a), P("X", None))


def test_cond_branches_with_equal_types_keep_them():
    p = trace(lambda a: ss.lax.cond(snp.sum(a) > 0, lambda x: x * 2, lambda x: x - 1, a), P("X", None))
    assert p.type_string(p.outputs[0]) == "f32[8@X,16]"


def _once():
    """A condition known while tracing that lets the body run once."""
    answers = iter([True, False])
    return lambda c: next(answers)


@pytest.mark.parametrize("loop, name", [
    (lambda a: ss.lax.scan(lambda c, _: (_other(c), None), a, None, length=2)[0], "lax.scan"),
    (lambda a: ss.lax.fori_loop(0, 3, lambda i, c: _other(c), a), "lax.fori_loop"),
    (lambda a: ss.lax.while_loop(lambda c: False, _other, a), None),  # never runs its body: fine
    (lambda a: ss.lax.while_loop(_once(), _other, a), "lax.while_loop"),
])
def test_a_body_that_changes_a_carry_type_is_a_type_error(loop, name):
    if name is None:
        assert trace(loop, P("X", None)).type_string  # traces
        return
    with pytest.raises(TypeError, match=rf"{name}: the body's carry input and output types differ: carry 0 enters as "
                                        r"f32\[8@X,16\] and leaves as f32\[8,16@X\]"):
        trace(loop, P("X", None))


def test_scan_over_xs_sharded_on_the_scanned_dim_types_each_slice_without_it():
    seen = {}

    def body(c, x):
        seen["x"] = str(ss.typeof(x))
        return c + x, x * 2

    def f(a):
        return ss.lax.scan(body, snp.zeros(16, out_sharding=P("Y")), a)

    p = trace(f, P("X", "Y"))
    assert seen["x"] == "float32[16@Y]"
    assert [p.type_string(o) for o in p.outputs] == ["f32[16@Y]", "f32[8,16@Y]"]
    with ss.use_mesh(E):
        res = ss.run(ss.jit(f, in_shardings=P("X", "Y")), X, backend="local")
    np.testing.assert_array_equal(res.outputs[0], X.sum(0))
    np.testing.assert_array_equal(res.outputs[1], X * 2)
