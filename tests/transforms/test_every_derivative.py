"""Every derivative rule, checked by execution (hypothesis): sharded equals whole, and equals
finite differences.

For each op with a vjp in the registry, a random case from ``tests/opcases.py`` (inputs, params,
a mesh and an assignment of mesh axes to the op's factors) gives the shardings its rule projects
to. Then:

* ``test_sharded_vjp_equals_the_whole_one``: the pullback ``ct -> vjp(op)(ct)`` is run sharded
  (operands as the assignment shards them, the cotangent as the result is) and must equal the
  same program run whole, bit for bit. Inputs and cotangents are integer-valued, so a derivative
  made of sums and products is exact in any order; an op whose derivative is transcendental
  (exp, tanh, ...) may differ only where a sum the partition sharded reassociated (op-by-op
  checks name the axes), never by a wrong op.
* ``test_vjp_matches_finite_differences``: the whole vjp against central differences of
  ``<ct, op(x)>`` in float64, at the case's inputs moved off integers (off kinks, ties and jumps).
  At a point where the op jumps (floor, remainder) the differences at two step sizes disagree and
  that element is not compared: there is no derivative to check.

Structured ops (scan, switch) are differentiated through their bodies and checked in
test_control.py.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

import simshard as ss
from opcases import GENERATORS, assignments, meshes, signed_values
from simshard.ir.program import Aval
from simshard.ops import OPS, get_op
from simshard.ops.check import project
from simshard.sharding.dims import Sharding
from simshard.tracing.state import bind

MAX_EXAMPLES = int(os.environ.get("SIMSHARD_GRAD_EXAMPLES", "25"))
DIFFERENTIABLE = sorted(n for n, op in OPS.items() if op.vjp is not None and not op.structured)
# derivatives with transcendental values: their sharded sums may reassociate
INEXACT = {"exp", "expm1", "log", "log1p", "sin", "cos", "tanh", "sqrt", "rsqrt", "reciprocal", "div", "pow",
           "atan2", "rem", "floordiv"}


def _is_float(a) -> bool:
    return np.asarray(a).dtype.kind == "f"


def _case(op_name, data):
    """Arrays, params, the differentiated positions, the operand and result shardings and the mesh."""
    mesh = data.draw(meshes(), label="mesh")
    arrays, params = data.draw(GENERATORS[op_name](mesh), label="case")
    op = get_op(op_name)
    in_avals = [Aval(a.shape, a.dtype) for a in arrays]
    out_avals = op.abstract_eval(*in_avals, **params)
    rule = op.factor_rule(in_avals, out_avals, **params)
    in_shapes, out_shapes = [a.shape for a in in_avals], [a.shape for a in out_avals]
    assignment = data.draw(assignments(rule, in_shapes, out_shapes, mesh), label="assignment")
    in_sh, out_sh = project(rule, in_shapes, out_shapes, mesh, assignment)
    wrt = [i for i, a in enumerate(arrays) if _is_float(a)]
    sharded = {f for f, axes in assignment.items() if any(mesh.shape[a] > 1 for a in axes)}
    event("reduction factor sharded" if any(rule.kind(f) == "reduction" for f in sharded)
          else "sharded" if sharded else "unsharded")
    note(f"{op_name} {params} on {mesh}: operands {[str(s) for s in in_sh]} results {[str(s) for s in out_sh]}")
    return arrays, params, wrt, in_sh, out_avals, out_sh, mesh


def _op_of(op_name, arrays, params, wrt):
    """The op as a function of its float operands (the others, indices and predicates, fixed)."""

    def f(*xs):
        full = list(arrays)
        for i, x in zip(wrt, xs):
            full[i] = x
        out = bind(op_name, *full, **params)
        return out if isinstance(out, tuple) else (out,)

    return f


def _cotangents(rng, out_avals):
    return [signed_values(rng, a.shape, a.dtype, k) if a.dtype.kind == "f" else np.zeros(a.shape, a.dtype)
            for k, a in enumerate(out_avals)]


def _plain(s: Sharding) -> Sharding:
    """A cotangent enters whole on every device of its blocks: the result's sharding, not pending."""
    return Sharding(s.mesh, s.dims)


# pow's derivative in its exponent takes log(x): NaN at a negative base, in both runs alike
@pytest.mark.filterwarnings("ignore:invalid value encountered in log:RuntimeWarning")
@pytest.mark.parametrize("op_name", DIFFERENTIABLE)
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_sharded_vjp_equals_the_whole_one(op_name, data):
    arrays, params, wrt, in_sh, out_avals, out_sh, mesh = _case(op_name, data)
    if not wrt:
        return
    f = _op_of(op_name, arrays, params, wrt)
    cts = _cotangents(np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))), out_avals)
    n = len(wrt)

    def pullback(*args):
        _, f_vjp = ss.vjp(f, *args[:n])
        return f_vjp(tuple(args[n:]))

    shardings = [in_sh[i] for i in wrt] + [_plain(s) for s in out_sh]
    res = ss.run(pullback, *(arrays[i] for i in wrt), *cts, mesh=mesh, in_shardings=tuple(shardings),
                 backend="local", check_ops=True)
    if op_name in INEXACT:
        assert res.verify.ok, res.verify.failures[0].describe()
    else:
        assert res.verify.bitwise, "; ".join(c.describe() for c in res.verify.checks + res.verify.op_checks
                                             if not c.bitwise)


# Inputs for the finite differences: moved off integers (so off kinks, ties and jumps) and into
# each op's domain.
POSITIVE = {"log", "sqrt", "rsqrt", "log1p", "reciprocal"}


def _smooth(op_name, arrays, wrt, rng):
    out = list(arrays)
    for i in wrt:
        x = np.asarray(arrays[i], np.float64) + rng.uniform(0.1, 0.4, np.shape(arrays[i]))
        if op_name in POSITIVE or (op_name == "pow" and i == 0):
            x = np.abs(x) + 0.5
        out[i] = x
    return out


def _differences(g, x, eps):
    """Central differences of ``<ct, op(x)>``: ``g(x)`` gives the op's float results, which are
    subtracted before weighting so that large unrelated terms do not cancel in the sum."""
    d = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        d[i] = sum(float(np.sum((p - m) * c)) for p, m, c in g(x + e, x - e)) / (2 * eps)
    return d


# stop_gradient's derivative is zero by definition, not its kernel's (the identity)
@pytest.mark.parametrize("op_name", [n for n in DIFFERENTIABLE if n != "stop_gradient"])
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_vjp_matches_finite_differences(op_name, data):
    arrays, params, wrt, _, out_avals, _, _ = _case(op_name, data)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    arrays = _smooth(op_name, arrays, wrt, rng)
    if params.get("dtype") is not None and np.dtype(params["dtype"]).kind == "f":
        params = {**params, "dtype": np.dtype(np.float64)}  # a float32 result would round the differences
    wrt = [i for i in wrt if np.size(arrays[i])]
    if not wrt or not any(a.dtype.kind == "f" for a in out_avals):
        return
    f = _op_of(op_name, arrays, params, wrt)
    kernel = get_op(op_name).kernel
    cts = [c.astype(np.float64) if c.dtype.kind == "f" else c for c in _cotangents(rng, out_avals)]

    def pullback(*xs):
        _, f_vjp = ss.vjp(f, *xs)
        return f_vjp(tuple(cts))

    got = ss.jit(pullback)(*(arrays[i] for i in wrt))
    for k, i in enumerate(wrt):
        def pair(plus, minus, i=i):
            outs = [kernel(*arrays[:i], x, *arrays[i + 1:], **params) for x in (plus, minus)]
            return [(np.asarray(p, np.float64), np.asarray(m, np.float64), c)
                    for p, m, c in zip(*outs, cts) if c.dtype.kind == "f"]

        fine, coarse = _differences(pair, arrays[i], 1e-6), _differences(pair, arrays[i], 4e-6)
        smooth = np.isclose(fine, coarse, rtol=1e-4, atol=1e-4)  # where the op jumps, no derivative
        want = np.asarray(got[k])
        np.testing.assert_allclose(want[smooth], fine[smooth], rtol=1e-5, atol=1e-6 * max(1.0, np.abs(want).max()),
                                   err_msg=f"{op_name}: derivative in operand {i}")
