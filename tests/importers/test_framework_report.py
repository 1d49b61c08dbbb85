"""report.framework: how a run's outputs are judged against a framework's own (no jax or torch
needed: a stand-in function offers ``framework_reference``)."""

import json

import numpy as np

import simshard as ss
from simshard.importers import FrameworkOutputs
from simshard.report.framework import exact_arithmetic, scaled_ulp

MESH = ss.Mesh({"x": 4})


class StandIn:
    """A function with a framework reference: ``fn`` itself, its outputs shifted by ``error``."""

    def __init__(self, fn, error=0.0):
        self.fn, self.error, self.__name__ = fn, error, "stand_in"

    def __call__(self, *args):
        return self.fn(*args)

    def framework_reference(self, *args):
        out = np.asarray(self.fn(*args))
        return FrameworkOutputs("framework 1.0", (out + np.asarray(self.error, out.dtype),), 8)


def test_exact_needs_integer_inputs_and_exact_ops():
    program = ss.trace(lambda x: (x * 2 + 1).sum(), np.ones(4, np.float32))
    assert exact_arithmetic(program, [np.arange(4, dtype=np.float32)])
    assert not exact_arithmetic(program, [np.full(4, 0.5, np.float32)])
    assert not exact_arithmetic(ss.trace(np.tanh, np.ones(4, np.float32)), [np.ones(4, np.float32)])


def test_scaled_ulp_counts_in_units_of_the_outputs_largest_magnitude():
    e = np.array([1.0, 0.0], np.float32)
    a = np.array([1.0, np.spacing(np.float32(1)) * 3], np.float32)
    assert scaled_ulp(a, e) == 3.0
    assert scaled_ulp(a, e.astype(np.float64)) is None


def test_bitwise_required_where_exact_and_a_tolerance_otherwise():
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    exact = ss.run(StandIn(lambda x: x @ x), x, mesh=MESH, in_shardings=ss.P("x"), backend="local")
    (check,) = exact.verify.framework
    assert check.exact and check.check.bitwise and exact.verify.ok
    off = ss.run(StandIn(lambda x: x @ x, error=1.0), x, mesh=MESH, in_shardings=ss.P("x"), backend="local")
    assert off.verify.bitwise and not off.verify.ok and "DIFFERS" in off.verify.render()
    assert json.loads(off.verify.to_json())["framework"][0]["ok"] is False
    g = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)
    near = ss.run(StandIn(np.tanh, error=np.spacing(np.float32(0.8))), g, mesh=MESH, in_shardings=ss.P("x"),
                  backend="local")
    (check,) = near.verify.framework
    assert not check.exact and check.ok and check.tolerance_ulp == 8 and "within 8 ULP of scale allowed" in check.describe()
