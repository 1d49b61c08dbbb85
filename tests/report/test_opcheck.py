"""Op-by-op verification (simshard.report.opcheck) through ss.run: every op of a correct run checks
bitwise; a wrong partition is named (op, device, global index); a float sum the partition sharded
is a reassociation (mesh axes, ULP), not a wrong partition."""

import dataclasses

import numpy as np
import pytest

import simshard as ss
import sys

import simshard.partition  # noqa: F401  (the package; ss.partition is the function)
from simshard import P
from simshard.errors import ReplicaMismatchError
from simshard.spmd import Compute, Schedule, SpmdProgram

sp = sys.modules["simshard.partition"]  # ss.run looks the partitioner up here


def mlp(x, w):
    return np.tanh(x @ w + 1.0) * 2.0


def _exact(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).integers(-4, 5, size=shape).astype(dtype)


ROW_PARALLEL = (P(None, "x"), P("x", None))  # the matmul's contraction dim is sharded over x


def test_correct_run_checks_every_op_bitwise():
    mesh = ss.Mesh({"x": 2, "y": 2})
    x, w = _exact((8, 16)), _exact((16, 4), seed=1)
    res = ss.run(mlp, x, w, mesh=mesh, in_shardings=ROW_PARALLEL)
    v = res.verify
    ops = [c.what for c in v.op_checks]
    assert ops == ["op %2 dot_general", "op %3 add", "op %4 tanh", "op %5 mul"]
    assert all(c.bitwise for c in v.op_checks)
    assert v.bitwise and v.ok and v.first_divergence is None and v.reassociations == ()
    assert "pending over x" in v.op_checks[0].note  # the dot_general's result as left: a partial sum
    assert len(res.spmd.checkpoints) == 4 and res.execution.values


def test_check_ops_off_keeps_the_run_lean():
    mesh = ss.Mesh({"x": 2})
    x, w = _exact((8, 16)), _exact((16, 4), seed=1)
    res = ss.run(mlp, x, w, mesh=mesh, in_shardings=ROW_PARALLEL, check_ops=False)
    assert res.verify.op_checks == () and res.execution.values == {} and res.verify.bitwise


def _corrupt(monkeypatch, op: str, into: str, devices):
    """ss.run partitions with a schedule where ``devices`` run ``into`` instead of ``op``."""
    real = sp.partition

    def wrong(program):
        spmd = real(program)
        scheds = []
        for s in spmd.schedules:
            instrs = s.instrs
            if s.device in devices:
                instrs = tuple(
                    dataclasses.replace(i, op=into) if isinstance(i, Compute) and i.op == op else i for i in instrs
                )
            scheds.append(Schedule(s.device, s.inputs, instrs, s.outputs))
        return SpmdProgram(spmd.program, tuple(scheds), spmd.in_shardings, spmd.out_shardings, spmd.checkpoints)

    monkeypatch.setattr(sp, "partition", wrong)


def test_wrong_partition_names_op_device_and_index(monkeypatch):
    mesh = ss.Mesh({"x": 4})
    x, w = _exact((8, 16)), _exact((16, 4), seed=1)
    _corrupt(monkeypatch, "add", "sub", devices={2})
    res = ss.run(mlp, x, w, mesh=mesh, in_shardings=(P("x", None), None))
    v = res.verify
    assert not v.ok and not v.bitwise
    first = v.first_divergence
    assert first.what == "op %3 add" and first.device == 2 and first.first_index == (4, 0)
    assert first.wrong and first.mismatches == 8  # device 2 holds rows 4..5 of 4 columns
    assert "on device 2" in first.describe() and "first at index (4, 0)" in first.describe()
    # each op answers for itself: the ops after it ran correctly on what they were given
    assert [c.what for c in v.wrong_ops] == ["op %3 add"]
    assert not v.checks[0].bitwise  # and the output is wrong, too
    assert "DIFFERS (values) on device 2" in v.render(width=200)


def test_wrong_replica_is_caught_on_its_device(monkeypatch):
    mesh = ss.Mesh({"x": 2, "y": 2})
    x, w = _exact((8, 16)), _exact((16, 4), seed=1)
    _corrupt(monkeypatch, "tanh", "sin", devices={3})
    with pytest.raises(ReplicaMismatchError) as info:  # the replicated output cannot be assembled
        ss.run(mlp, x, w, mesh=mesh, in_shardings=(P("x", None), None))
    first = info.value.verify.first_divergence
    assert first.what == "op %4 tanh" and first.device == 3 and first.first_index[0] in range(4, 8)
    assert "replicas disagree" in first.note and "the first wrong op: op %4 tanh" in str(info.value)


def test_wrong_contribution_to_a_pending_sum(monkeypatch):
    mesh = ss.Mesh({"x": 2})
    x, w = _exact((8, 16)), _exact((16, 4), seed=1)
    real = sp.partition

    def bogus(program):  # device 1 negates its x block in place just before the dot_general
        spmd = real(program)
        scheds = []
        for s in spmd.schedules:
            instrs = []
            for i in s.instrs:
                if s.device == 1 and isinstance(i, Compute) and i.op == "dot_general":
                    a = i.inputs[0]
                    instrs.append(Compute(i.id, "bogus", op="neg", inputs=(a,), outputs=(a,)))
                instrs.append(i)
            scheds.append(Schedule(s.device, s.inputs, tuple(instrs), s.outputs))
        return SpmdProgram(spmd.program, tuple(scheds), spmd.in_shardings, spmd.out_shardings, spmd.checkpoints)

    monkeypatch.setattr(sp, "partition", bogus)
    res = ss.run(lambda x, w: (x @ w) * 2.0, x, w, mesh=mesh, in_shardings=ROW_PARALLEL)
    first = res.verify.first_divergence
    assert first.what == "op %2 dot_general" and first.wrong and first.first_index[0] == 0
    assert "beyond what reordering a sum" in first.note  # exact inputs: too far off for a reassociation
    assert first.device == 0 and "devices (0, 1) combine into this block" in first.note
    assert [c.what for c in res.verify.wrong_ops] == ["op %2 dot_general"]


def test_float_row_parallel_matmul_is_a_reassociation_not_a_wrong_partition():
    mesh = ss.Mesh({"x": 2, "y": 2})
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    w = rng.standard_normal((64, 4)).astype(np.float32)
    res = ss.run(mlp, x, w, mesh=mesh, in_shardings=ROW_PARALLEL)
    v = res.verify
    assert v.ok and v.wrong_ops == () and not v.bitwise
    (r,) = v.reassociations
    assert r.what == "op %2 dot_general" and r.reassociated == ("x",)
    assert r.legitimate and not r.bitwise and r.max_ulp is not None and r.max_ulp > 0
    assert all(c.bitwise for c in v.op_checks[1:])  # later ops checked on what the run gave them
    text = r.describe()
    assert "reassociated sum over mesh axes x" in text and "ULP" in text and "not a wrong partition" in text
    assert "reassociated (x)" in v.render(width=200)
    assert v.to_dict()["op_checks"][0]["reassociated"] == ["x"]


def test_a_pending_sum_combined_in_steps_by_an_operand_reshard_is_a_reassociation():
    """A sum pending over x and y, reduced by the next op's operand reshard (a reduce-scatter over x,
    then over y) groups the six contributions otherwise than their assembly in device order: on
    Gaussian inputs that op is a reassociation over x, y, not a wrong op (was: "DIFFERS" on the
    reshape); with exact inputs the same run is bitwise."""
    mesh = ss.Mesh({"x": 2, "y": 3})
    x = np.random.default_rng(159).standard_normal((12, 12), dtype=np.float32)

    def centre(x):
        return x - x.sum(axis=1, keepdims=True)

    kw = dict(mesh=mesh, in_shardings=(P(None, ("x", "y")),), out_shardings=P("x", None), backend="local")
    v = ss.run(centre, x, **kw).verify
    assert v.ok and not v.wrong_ops and not v.failures
    reshape = next(c for c in v.op_checks if c.what == "op %2 reshape")
    assert reshape.reassociated == ("x", "y") and reshape.legitimate
    assert ss.run(centre, ss.exact_inputs([(12, 12)])[0], **kw).verify.bitwise


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_exact_inputs_make_the_sharded_sum_bitwise(dtype):
    mesh = ss.Mesh({"x": 2, "y": 2})
    x, w = _exact((8, 64), dtype), _exact((64, 4), dtype, seed=1)
    res = ss.run(lambda x, w: x @ w, x, w, mesh=mesh, in_shardings=ROW_PARALLEL)
    assert res.verify.bitwise and res.verify.reassociations == ()
    assert [c.what for c in res.verify.op_checks] == ["op %2 dot_general"]
    cp = res.spmd.checkpoints[0]
    assert cp.reassociated == (("x",) if dtype == np.float32 else ())


def test_a_pending_sum_times_zero_differs_only_in_a_zeros_sign_and_is_named_reassociated():
    """x + x.sum(0) * 0.0 with x's one row over z (the other z device's block empty): the sum
    stays pending through the product, whose contributions are -4 * 0.0 = -0.0 and (numpy's
    sums start from +0.0) +0.0 * 0.0 = +0.0, combining to +0.0 where the whole sum gives -0.0.
    The output is bitwise; the product's check names the reassociation, not a wrong partition."""
    mesh = ss.Mesh({"y": 2, "z": 2})
    x = np.array([[6.0, 2.0, 0.0, -4.0]], dtype=np.float32)
    res = ss.run(lambda x: x + x.sum(axis=0) * 0.0, x, mesh=mesh, in_shardings=(ss.P("z", None),),
                 out_shardings=ss.P("y", None), backend="local")  # the sum is reduced after the add
    assert all(c.bitwise for c in res.verify.checks) and res.verify.ok and not res.verify.wrong_ops
    (mul,) = [c for c in res.verify.op_checks if "mul" in c.what]
    assert not mul.bitwise and mul.legitimate and mul.reassociated == ("z",) and mul.first_index == (3,)
