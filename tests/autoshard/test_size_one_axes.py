"""A mesh with an axis of size 1: the strategy ``ss.autoshard`` finds is estimated and runs bit
for bit (issue 30's pipeline search searches each stage on such a mesh: ``pp=1, x=2, y=2``).

The search may place a size-1 axis on any dim (it splits nothing, so it costs nothing), and
propagation may drop it from a reshape's result. The partitioner used to read that as a merge
of dims sharded on a minor factor (strided stripes no Sharding states) and ran the reshape where
its operand lay, leaving an exact ``Layout``; in the derivative's scan body such a value is a
residual, stacked as the body held it, and the scan's outputs crashed on it (``'Layout' object
has no attribute 'dims'``). A size-1 axis holds no stripes (``run_op.mesh_axes``)."""

from __future__ import annotations

import numpy as np
import pytest

import simshard as ss
from simshard.tracing.tracer import ShapeDtype, trace

pytest.importorskip("scipy")

L, B, D = 2, 8, 16
SHAPES = (ShapeDtype((L, D, D), np.float32), ShapeDtype((B, D), np.float32), ShapeDtype((B, D), np.float32))
TIES = ((0, 0), (1, 1))  # d ws where ws is, d x where x is
TOPOLOGY = ss.Topology({}, "nvlink", device="h100")


def layers(ws, x):
    def block(h, w):
        centred = h - h.sum(axis=-1, keepdims=True)  # a reduction, then a reshape keeping its dim
        return h + centred @ w, None

    return ss.lax.scan(block, x, ws)[0]


def step(ws, x, ct):
    """The layers' derivative (a scan with residuals), as a pipeline stage's backward pass."""
    _, pull = ss.vjp(layers, ws, x)
    return pull(ct)


@pytest.mark.parametrize("mesh", [{"x": 1, "y": 2}, {"pp": 1, "x": 2}], ids=str)
def test_the_searched_strategy_on_a_size_one_axis_estimates_and_runs_bitwise(mesh):
    st = ss.autoshard(step, *SHAPES, mesh=mesh, topology=TOPOLOGY, ties=TIES, explain_top=0)
    est = ss.estimate(st, *SHAPES, topology=TOPOLOGY)
    assert est.step_seconds() > 0
    args = (ss.exact_inputs((L, D, D), seed=1, max_abs=1), ss.exact_inputs((B, D), seed=2, max_abs=1),
            ss.exact_inputs((B, D), seed=3, max_abs=1))
    res = ss.run(st, *args, backend="local", reference=step)
    assert res.verify.bitwise



def test_candidates_leave_size_one_axes_out():
    """A size-1 axis shards nothing: a value's layouts and an op's candidates on a mesh with one
    are those of the mesh without it (each would otherwise be multiplied by its rank plus one)."""
    from simshard.autoshard.candidates import op_candidates, value_specs
    from simshard.ir.program import Aval

    with_one, without = ss.Mesh({"x": 2, "one": 1, "y": 2}), ss.Mesh({"x": 2, "y": 2})
    aval = Aval((B, D), np.dtype(np.float32))
    axes = lambda specs: sorted(tuple(tuple(a.name for a in d.axes) for d in s.dims) for s in specs)
    assert axes(value_specs(aval, with_one)) == axes(value_specs(aval, without))
    assert all(a.name != "one" for s in value_specs(aval, with_one) for d in s.dims for a in d.axes)
    eqn = trace(lambda a, b: a @ b, ShapeDtype((B, D), np.float32), ShapeDtype((D, D), np.float32),
                mesh=with_one).eqns[0]
    cands = [op_candidates(eqn, m)[1] for m in (with_one, without)]
    assert len(cands[0]) == len(cands[1]) > 1
    assert all("one" not in a for c in cands[0] for _, a in c.assignment)


def test_size_one_axes_give_the_optimum_of_the_mesh_without_them():
    found = {}
    for name, mesh in (("with", {"one": 1, "x": 2, "y": 2, "two": 1}), ("without", {"x": 2, "y": 2})):
        st = ss.autoshard(step, *SHAPES, mesh=mesh, topology=TOPOLOGY, ties=TIES, explain_top=0)
        found[name] = st.report
    assert found["with"].variables == found["without"].variables
    assert found["with"].seconds == pytest.approx(found["without"].seconds, rel=1e-12)
