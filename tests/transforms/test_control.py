"""Control flow with jax.lax's signatures: values, derivatives, sharded runs and errors."""

from __future__ import annotations

import numpy as np
import pytest

import simshard as ss

P = ss.P


def _deep(ws, x):
    def layer(h, w):
        z = h @ w
        return np.where(z > 0, z, 0), np.sum(z)

    h, sums = ss.lax.scan(layer, x, ws)
    return np.sum(h * h) + np.sum(sums)


def _deep_unrolled(ws, x):
    h, total = x, 0.0
    for w in ws:
        z = h @ w
        h, total = np.where(z > 0, z, 0), total + np.sum(z)
    return np.sum(h * h) + total


def test_scan_is_its_unrolled_loop_in_value_gradient_and_bytes():
    ws, x = ss.exact_inputs([(4, 8, 8), (16, 8)], seed=0, max_abs=1)
    assert ss.jit(_deep)(ws, x) == _deep_unrolled(ws, x)
    np.testing.assert_array_equal(ss.grad(_deep)(ws, x), ss.grad(_deep_unrolled)(ws, x))

    def step(f):
        def run(ws, x):
            value, g = ss.value_and_grad(f)(ws, x)
            return value, ws - 2.0**-10 * g
        return run

    kw = dict(mesh=ss.Mesh({"x": 4}), in_shardings=(P(None, "x", None), P("x", None)),
              out_shardings=(P(), P(None, "x", None)))
    scanned, unrolled = ss.run(step(_deep), ws, x, **kw), ss.run(step(_deep_unrolled), ws, x, **kw)
    assert scanned.verify.bitwise and unrolled.verify.bitwise
    assert [o.tobytes() for o in scanned.outputs] == [o.tobytes() for o in unrolled.outputs]
    # the scan's backward reads each layer's weight from the stacked operand (sharded by rows)
    # and gathers it again, where the unrolled step keeps the forward's gathered copy: 4 layers,
    # 4 devices each receiving 3/4 of an [8, 8] weight
    assert scanned.comm.total_bytes == unrolled.comm.total_bytes + 4 * 4 * 3 * 8 * 8 * 4 // 4 > 3072


def _gated_layer(h, w):
    """A layer whose rounding feeds only a comparison: ``floor(h * w) > 0`` picks ``h * w`` or ``h``."""
    z = h * w
    return np.where(np.floor(z) > 0, z, h), None


def _gated(ws, h):
    return np.sum(ss.lax.scan(_gated_layer, h, ws)[0])


def _gated_unrolled(ws, h):
    for w in ws:
        z = h * w
        h = np.where(np.floor(z) > 0, z, h)
    return np.sum(h)


def test_a_scan_saves_only_the_residuals_its_derivative_reads():
    """The forward scan's op offers every step's input carries and intermediates as results; the
    derivative's scan takes only those its body reads, so the others have no user (and are never
    materialised). Here: ``mul``'s rule reads the carry h (for d w) and the weight w (for d h),
    ``select``'s the mask; the floor, the product and the select's own result are read by none.
    The weights are not residuals at all: the derivative's scan reads the stacked operand."""
    ws, h = ss.exact_inputs([(4, 16), (16,)], seed=0, max_abs=3)
    grads = ss.grad(_gated)(ws, h)
    # equal values (the unrolled loop's slices make some of the zeros +0 where the scan's are -0)
    assert np.count_nonzero(grads) and np.array_equal(grads, ss.grad(_gated_unrolled)(ws, h))
    ran = ss.run(lambda ws, h: ss.grad(_gated)(ws, h), ws, h, mesh=ss.Mesh({"x": 2}),
                 in_shardings=(P(None, "x"), P("x")))
    assert ran.verify.bitwise and np.array_equal(ran.outputs, grads)

    prog = ss.trace(ss.grad(_gated), ws, h)
    fwd, back = [e for e in prog.eqns if e.op == "scan"]
    body = fwd.kw["body"]
    assert [e.op for e in body.eqns] == ["mul", "floor", "gt", "select"]
    # the residuals: the input carry and the four intermediates, not the step's weight slice
    n_user = len(fwd.outputs) - fwd.kw["num_res"]
    assert list(body.outputs[n_user:]) == [body.inputs[0]] + [e.outputs[0] for e in body.eqns]
    read = {i for e in prog.eqns for i in e.inputs} | set(prog.outputs)
    saved = [v for o, v in zip(fwd.outputs[n_user:], body.outputs[n_user:]) if o in read]
    assert saved == [body.inputs[0], body.eqns[2].outputs[0]]  # the carry h and the mask floor(z) > 0
    # the derivative's scan: the carry's cotangent, the stacked weights themselves, then the two residuals
    stacked = fwd.inputs[fwd.kw["num_carry"]]
    assert back.kw["num_xs"] == 3 and back.inputs[1:4] == (stacked,) + tuple(
        o for o, v in zip(fwd.outputs[n_user:], body.outputs[n_user:]) if v in saved)


def test_a_scan_nested_in_a_scan_writes_only_the_residuals_read():
    """A scan in a scan's body: its residual results are outputs of the outer body (residuals of
    the outer scan); those the outer derivative does not read are neither stacked by the outer
    loop nor written by the inner one, in each outer step."""
    from simshard.spmd import Loop

    def loss(ws, h):
        return np.sum(ss.lax.scan(lambda h, w2: (ss.lax.scan(_gated_layer, h, w2)[0], None), h, ws)[0])

    ws, h = ss.exact_inputs([(3, 4, 16), (16,)], seed=0, max_abs=3)
    ran = ss.run(lambda ws, h: ss.grad(loss)(ws, h), ws, h, mesh=ss.Mesh({"x": 2}), in_shardings=(P(), P()))
    unrolled = ss.grad(_gated_unrolled)(ws.reshape(12, 16), h).reshape(3, 4, 16)
    assert ran.verify.bitwise and np.array_equal(ran.outputs, unrolled)
    (outer, _) = [i for i in ran.spmd.schedule(0).instrs if isinstance(i, Loop)]
    (inner,) = [i for i in outer.body if isinstance(i, Loop)]
    assert len(outer.writes_) == len(inner.writes_) == 3  # the carry, and the stacked carries h and masks


def test_a_scan_takes_only_the_xs_its_body_reads():
    def f(ws, bs, h):
        return ss.lax.scan(lambda h, wb: (h * wb[0], None), h, (ws, bs))[0]  # bs never read

    ws, bs, h = ss.exact_inputs([(3, 4), (3, 4), (4,)], seed=0)
    (e,) = ss.trace(f, ws, bs, h).eqns
    assert e.kw["num_xs"] == 1 and len(e.inputs) == 2 and len(e.kw["body"].inputs) == 2
    assert ss.jit(f)(ws, bs, h).tobytes() == (h * ws[0] * ws[1] * ws[2]).tobytes()
    g = ss.grad(lambda ws, bs, h: np.sum(f(ws, bs, h)), argnums=(0, 1))(ws, bs, h)
    assert np.array_equal(g[0], np.stack([h * ws[1] * ws[2], h * ws[0] * ws[2], h * ws[0] * ws[1]]))
    assert not np.any(g[1]) and g[1].shape == bs.shape


def test_scan_options_and_ys():
    carry, ys = ss.lax.scan(lambda c, x: (c + x, c * x), 1.0, np.arange(4.0), reverse=True)
    assert carry == 7.0 and ys.tolist() == [0.0, 6.0, 8.0, 3.0]  # steps 3, 2, 1, 0; ys in index order
    carry, ys = ss.lax.scan(lambda c, _: (c * 2, None), 1.0, length=3)
    assert carry == 8.0 and ys is None
    with pytest.raises(ss.TraceError, match="changed the carry's shapes at step 0"):
        ss.lax.scan(lambda c, x: (np.stack([c, c]), None), np.zeros(2), np.arange(3.0))
    with pytest.raises(ss.TraceError, match="different leading sizes"):
        ss.lax.scan(lambda c, x: (c, None), 0.0, (np.zeros(2), np.zeros(3)))


def test_fori_loop_cond_switch_and_while():
    assert ss.lax.fori_loop(0, 4, lambda i, v: v + i, 0) == 6
    f = ss.jit(lambda x: ss.lax.cond(np.sum(x) > 0, lambda a: a * 2, lambda a: a - 1, x))
    assert f(np.array([1.0, 2.0])).tolist() == [2.0, 4.0] and f(np.array([-1.0, -2.0])).tolist() == [-2.0, -3.0]
    g = ss.jit(lambda i, x: ss.lax.switch(i, [lambda a: a, lambda a: a * 10, lambda a: -a], x))
    assert g(np.int32(1), np.ones(2)).tolist() == [10.0, 10.0] and g(np.int32(7), np.ones(2)).tolist() == [-1.0, -1.0]
    assert ss.lax.while_loop(lambda v: v < 10, lambda v: v * 3, 1) == 27
    assert ss.jit(lambda x: ss.lax.while_loop(lambda v: np.sum(v) < 10, lambda v: v * 3, x))(np.ones(2)).tolist() == [9.0, 9.0]
    with pytest.raises(ss.TraceError, match="every branch must return the same structure"):
        ss.jit(lambda x: ss.lax.cond(np.sum(x) > 0, lambda a: a, lambda a: a[:1], x))(np.ones(2))


def _layers(n):
    ws, x = ss.exact_inputs([(n, 8, 8), (16, 8)], seed=0, max_abs=1)
    return ws, x


def test_a_scan_is_partitioned_once_into_one_loop_and_the_report_multiplies():
    from simshard.spmd import Loop, Schedule

    kw = dict(mesh=ss.Mesh({"x": 2, "y": 2}), in_shardings=(P(None, None, "y"), P("x", None)), backend="local")
    runs = {n: ss.run(_deep, *_layers(n), **kw) for n in (2, 6)}
    for n, res in runs.items():
        assert res.verify.bitwise
        sched = res.spmd.schedule(0)
        (loop,) = [i for i in sched.instrs if isinstance(i, Loop)]
        assert loop.length == n
        data = sched.to_bytes()
        assert Schedule.from_bytes(data).to_bytes() == data  # a loop ships to a Ray actor as data
    lengths = {n: len(r.spmd.schedule(0).instrs) for n, r in runs.items()}
    bodies = {n: len(next(i for i in r.spmd.schedule(0).instrs if isinstance(i, Loop)).body) for n, r in runs.items()}
    assert lengths[2] == lengths[6] and bodies[2] == bodies[6]  # the schedule does not grow with the layers
    per_step = {n: sum(1 for rec in r.comm.records if "scan" in rec.source or "dot_general" in rec.source) / n
                for n, r in runs.items()}
    assert per_step[2] == per_step[6] > 0  # every iteration's collectives recorded: the report multiplies


def test_fori_loop_is_a_scan_over_the_step_numbers():
    program = ss.jit(lambda x: ss.lax.fori_loop(0, 5, lambda i, v: v * 2 + i, x)).trace(np.ones(3))
    assert [e.op for e in program.eqns] == ["constant", "scan"]  # the step numbers, then one loop
    assert ss.jit(lambda x: ss.lax.fori_loop(0, 5, lambda i, v: v * 2 + i, x))(np.ones(3)).tolist() == [58.0] * 3


def _grow(x, w):
    """Multiply until the total passes a bound: a trip count only the data know."""
    def cond(c):
        return np.sum(np.abs(c[0])) < 1000.0

    def body(c):
        return c[0] @ w + 1.0, c[1] + 1

    return ss.lax.while_loop(cond, body, (x, np.int32(0)))


def test_a_while_loop_with_a_data_dependent_trip_count_runs_partitioned():
    from simshard.spmd import While

    x, w = ss.exact_inputs([(8, 4), (4, 4)], seed=0, max_abs=2)
    program = ss.jit(_grow).trace(x, w)
    assert [e.op for e in program.eqns][-1] == "while"
    res = ss.run(_grow, x, w, mesh=ss.Mesh({"x": 2, "y": 2}), in_shardings=(P("x", None), P(None, "y")), backend="local")
    assert res.verify.bitwise and int(res.outputs[1]) == 4
    assert any(isinstance(i, While) for i in res.spmd.schedule(0).instrs)
    # the condition's total is all-reduced every iteration (4 runs of the body, 5 tests)
    tests = [r for r in res.comm.records if r.device == 0 and r.kind == "all_reduce"]
    assert len(tests) == 5
    with pytest.raises(ss.TraceError, match=r"op while\(f32\[8,4\], i32\[\]\) has no derivative rule"):
        ss.grad(lambda x: np.sum(_grow(x, w)[0]))(x)


def test_a_traced_cond_runs_only_the_taken_branch_and_differentiates_through_it():
    from simshard.spmd import Switch

    def f(x, w):
        return ss.lax.cond(np.sum(x) > 0, lambda a: a @ w, lambda a: a - 1, x)

    x, w = ss.exact_inputs([(8, 4), (4, 4)], seed=0, max_abs=2)
    kw = dict(mesh=ss.Mesh({"x": 2, "y": 2}), in_shardings=(P("x", None), P(None, "y")), backend="local")
    sources = {}
    for sign in (1, -1):
        res = ss.run(f, sign * np.abs(x), w, **kw)
        assert res.verify.bitwise and any(isinstance(i, Switch) for i in res.spmd.schedule(0).instrs)
        sources[sign] = {r.source.split(" for ")[-1] for r in res.comm.records if "switch" in r.source}
    assert all("branch 1" in s for s in sources[1]) and all("branch 0" in s for s in sources[-1])  # only one ran
    for sign, taken in ((1, lambda x, w: x @ w), (-1, lambda x, w: x - 1)):
        xs = sign * np.abs(x)
        got = ss.grad(lambda x, w: np.sum(f(x, w) ** 2), argnums=(0, 1))(xs, w)
        want = ss.grad(lambda x, w: np.sum(taken(x, w) ** 2), argnums=(0, 1))(xs, w)
        assert all(np.array_equal(a, b) for a, b in zip(got, want))


def _nested(ws, x):
    """A scan whose body holds a cond on a traced predicate and a scan of its own."""
    def layer(h, w):
        h = ss.lax.cond(np.sum(h) > 0, lambda h: np.maximum(h @ w, 0), lambda h: h @ w * np.float32(2), h)
        h, _ = ss.lax.scan(lambda c, k: (c + k, None), h, np.arange(3, dtype=np.float32))
        return h, np.sum(h)
    return ss.lax.scan(layer, x, ws)


def test_control_flow_nested_in_a_scan_body_is_partitioned_with_it():
    ws, x = ss.exact_inputs([(3, 4, 4), (8, 4)], seed=1)
    kw = dict(mesh=ss.Mesh({"x": 2, "y": 2}), in_shardings=(P(None, None, "y"), P("x", None)), backend="local")
    res = ss.run(_nested, ws, x, **kw)
    assert res.verify.bitwise
    body = next(e for e in res.program.eqns if e.op == "scan").kw["body"]
    assert [e.op for e in body.eqns if e.op in ("switch", "scan")] == ["switch", "scan"]  # not unrolled
    grad = ss.run(lambda ws, x: ss.grad(lambda ws: np.sum(_nested(ws, x)[0]))(ws), ws, x, **kw)
    assert grad.verify.bitwise


def _striped_layer(h, w):
    """A layer whose residual is a reshape merging a dim sharded on its minor side: the body holds
    it in an exact strided layout, which no tensor-dim sharding states."""
    flat = (h @ w).reshape(-1)
    return (flat * flat).reshape(h.shape), None


@pytest.mark.parametrize("w_spec", [P(None, None, "x"), P(None, "x", None)])
def test_a_scan_residual_held_in_a_strided_layout_is_stacked_and_the_step_runs_bitwise(w_spec):
    def step(ws, x):
        value, g = ss.value_and_grad(lambda ws, x: np.sum(ss.lax.scan(_striped_layer, x, ws)[0]))(ws, x)
        return value, ws - 2.0**-10 * g

    ws, x = ss.exact_inputs([(3, 8, 8), (4, 8)], seed=0, max_abs=1)
    res = ss.run(step, ws, x, mesh=ss.Mesh({"x": 4}), in_shardings=(w_spec, P(None, "x")), backend="local")
    assert res.verify.bitwise, res.verify.render()
