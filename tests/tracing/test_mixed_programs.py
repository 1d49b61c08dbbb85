"""Mixed programs run (issue 27): ``auto_axes`` regions inside an explicit program and
``explicit_axes`` regions inside an auto one are typed where axes are Explicit, propagated where
they are Auto, then partitioned and run like any program (seed 001, "Using a mixture of sharding
modes")."""

from __future__ import annotations

import numpy as np

import simshard as ss
from simshard import P
from simshard.propagate.prepare import is_mixed, prepare
from simshard.tracing.explicit.types import spec_of

EXPLICIT = ss.make_mesh((2, 4), ("X", "Y"), axis_types=ss.AxisType.Explicit)
AUTO = ss.make_mesh((2, 4), ("X", "Y"))


@ss.auto_axes
def add(x, y):
    return x + y


def test_bare_auto_axes_with_out_sharding_runs():
    x = np.arange(16, dtype=np.int32).reshape(4, 4)
    with ss.use_mesh(EXPLICIT):
        f = ss.jit(lambda a, b: add(a, b, out_sharding=P("X", None)), in_shardings=(P("X", None), P(None, "X")))
        program, _ = prepare(f, x, x)
        res = ss.run(f, x, x, backend="local")
        assert is_mixed(f.trace(x, x))
    assert all(program.shardings.get(v) is not None for v in program.values())
    np.testing.assert_array_equal(res.outputs, x + x)
    assert res.verify.ok and res.outputs.dtype == np.int32
    assert program.type_string(program.outputs[0]) == "i32[4@X,4]"


def test_auto_axes_over_some_axes_runs():
    def g(y):
        return y * 2

    def f(arr):
        z = ss.auto_axes(g, axes="X")(np.sin(arr), out_sharding=P("X", "Y"))
        return z + 1

    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    with ss.use_mesh(EXPLICIT):
        res = ss.run(ss.jit(f, in_shardings=P("X", "Y")), x, backend="local")
    np.testing.assert_array_equal(res.outputs, np.sin(x) * 2 + 1)
    out = res.program.shardings[res.program.outputs[0]]
    assert spec_of(out, 2) == (("X",), ("Y",))


def test_explicit_axes_under_an_auto_mesh_runs():
    @ss.explicit_axes(axes=("X", "Y"))
    def explicit_g(y):
        return y * 2

    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    with ss.use_mesh(AUTO):
        f = ss.jit(lambda a: explicit_g(np.sin(a), in_sharding=P("X", "Y")) + 1)
        res = ss.run(f, x, backend="local")
    np.testing.assert_array_equal(res.outputs, np.sin(x) * 2 + 1)
    p = res.program
    mul = next(e for e in p.eqns if e.op == "mul")
    assert spec_of(p.shardings[mul.outputs[0]], 2) == (("X",), ("Y",))  # the region's type is kept
