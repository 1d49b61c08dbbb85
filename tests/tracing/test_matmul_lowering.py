"""``np.matmul`` / ``@`` lowered as ``jnp.matmul`` lowers it (issue 34): one ``dot_general`` on the
operands as they are. A batch dim only one operand has (or has with extent 1) is a free dim of
that operand, only batch dims both have with one extent are ``dot_general`` batch dims, and a
transpose gives numpy's order; no operand is broadcast to the other's batch dims, so a weight
shared by a batch is never copied per sequence."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simshard as ss
from simshard.ops.evaluate import evaluate

P = ss.P


def _operands(draw_shapes):
    """Exact-arithmetic operands (small integers in float32: every sum is exact, any order)."""
    rng = np.random.default_rng(0)
    return [rng.integers(-4, 5, size=s).astype(np.float32) for s in draw_shapes]


@st.composite
def matmul_shapes(draw):
    """Two matmul operand shapes of ranks 1 to 4 whose batch dims broadcast: each batch dim is
    the result's, or 1 on one side (a dim that does broadcast), or missing on the shorter one."""
    ra, rb = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    m, k, n = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 3))
    nb = max(ra - 2, rb - 2, 0)
    batch = [draw(st.integers(1, 3)) for _ in range(nb)]
    a_batch = [draw(st.sampled_from([b, 1])) for b in batch[nb - max(ra - 2, 0):]]
    b_batch = [draw(st.sampled_from([b, 1])) for b in batch[nb - max(rb - 2, 0):]]
    a = (k,) if ra == 1 else (*a_batch, m, k)
    b = (k,) if rb == 1 else (*b_batch, k, n)
    return a, b


def _ops(program) -> list[str]:
    return [e.op for e in program.eqns]


def test_a_batched_operand_times_a_weight_is_one_contraction_without_broadcast():
    """The issue's case: x [4, 8, 16] @ w [16, 32] contracts w as it is, the batch dim a free dim
    of x (no [4, 16, 32] copy of w), the result already in numpy's order."""
    p = ss.trace(lambda x, w: x @ w, np.zeros((4, 8, 16), np.float32), np.zeros((16, 32), np.float32))
    assert _ops(p) == ["dot_general"]
    kw = p.eqns[0].kw
    assert kw["contracting"] == ((2,), (0,)) and kw["batch"] == ((), ())
    assert p.eqns[0].inputs[1] is p.inputs[1]
    assert p.outputs[0].aval.shape == (4, 8, 32)


def test_a_weight_times_a_batched_operand_is_transposed_into_numpy_order():
    """w [8, 16] @ x [4, 16, 32]: dot_general gives [8, 4, 32] (a's free dims, then b's); one
    transpose makes it numpy's [4, 8, 32]."""
    p = ss.trace(lambda w, x: w @ x, np.zeros((8, 16), np.float32), np.zeros((4, 16, 32), np.float32))
    assert _ops(p) == ["dot_general", "transpose"]
    assert p.eqns[0].outputs[0].aval.shape == (8, 4, 32) and p.eqns[1].kw["perm"] == (1, 0, 2)


def test_shared_batch_dims_are_batch_dims_and_extent_one_dims_are_squeezed():
    """a [1, 3, 8, 16] @ b [2, 3, 16, 32]: the 3s are a batch dim of both, a's extent-1 dim is
    squeezed (a reshape, never a broadcast) and b's 2 becomes a free dim."""
    p = ss.trace(lambda a, b: a @ b, np.zeros((1, 3, 8, 16), np.float32), np.zeros((2, 3, 16, 32), np.float32))
    assert "broadcast_in_dim" not in _ops(p)
    dot = next(e for e in p.eqns if e.op == "dot_general")
    assert dot.kw["batch"] == ((0,), (1,)) and dot.inputs[1] is p.inputs[1]
    assert p.outputs[0].aval.shape == (2, 3, 8, 32)


def test_einsum_contracts_a_shared_weight_without_broadcast():
    """einsum's lowering gives a weight no batch dim either: 'bsd,de->bse' is one dot_general."""
    p = ss.trace(lambda x, w: np.einsum("bsd,de->bse", x, w), np.zeros((4, 8, 16), np.float32),
                 np.zeros((16, 32), np.float32))
    assert _ops(p) == ["dot_general"] and p.eqns[0].kw["batch"] == ((), ())


def test_batch_dims_that_do_not_broadcast_are_a_trace_error_naming_the_shapes():
    with pytest.raises(ss.TraceError, match=r"np.matmul: operands of shapes \(4, 8, 16\) and \(3, 16, 32\)"):
        ss.trace(lambda a, b: a @ b, np.zeros((4, 8, 16), np.float32), np.zeros((3, 16, 32), np.float32))


@settings(max_examples=150, deadline=None)
@given(matmul_shapes())
def test_matmul_of_every_rank_pair_equals_numpy_bitwise_without_broadcast(shapes):
    """Ranks 1 to 4 on each side, batch dims equal, extent 1 on one side, or missing: the traced
    program broadcasts nothing and its result is numpy's, shape and bits."""
    a, b = _operands(shapes)
    p = ss.trace(np.matmul, a, b)
    assert "broadcast_in_dim" not in _ops(p)
    assert sum(op == "dot_general" for op in _ops(p)) == 1
    (got,) = evaluate(p, a, b)
    want = np.matmul(a, b)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.array_equal(got, want)


@settings(max_examples=100, deadline=None)
@given(matmul_shapes(), st.integers(2, 200), st.sampled_from([np.float32, np.float64]))
def test_the_reference_of_a_batched_matmul_is_bit_identical_to_numpy_on_random_floats(shapes, k, dtype):
    """Not only exact sums: the program's reference run computes each output matrix as the one
    2-D product np.matmul makes (``loops``), neither merging the sequences into one product nor
    copying the shared operand, so random floats round as in the user's numpy, bit for bit."""
    sa, sb = shapes
    sa = (k,) if len(sa) == 1 else sa[:-1] + (k,)
    sb = (k,) if len(sb) == 1 else sb[:-2] + (k, sb[-1])
    rng = np.random.default_rng(k)
    a, b = rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)
    (got,) = evaluate(ss.trace(np.matmul, a, b), a, b)
    want = np.matmul(a, b)
    assert got.shape == want.shape and np.array_equal(got, want)


def test_a_batch_split_over_devices_verifies_bitwise_on_random_floats():
    """x [4, 8, 16] @ w [16, 32] with x's batch split over 2 devices: each device makes numpy's
    per-sequence products, so the run is bitwise against plain numpy even on random floats."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 8, 16)).astype(np.float32), rng.standard_normal((16, 32)).astype(np.float32)
    res = ss.run(lambda x, w: x @ w, x, w, mesh=ss.Mesh({"x": 2}), in_shardings=(P("x", None, None), P()),
                 backend="local")
    assert res.verify.bitwise


@settings(max_examples=60, deadline=None)
@given(matmul_shapes())
def test_matmul_lowers_as_jax_does(shapes):
    """Against ``jnp.matmul`` itself (the jax extra): the same ``dot_general`` (operand shapes,
    contracting and batch dims, result shape) and the same result, bit for bit."""
    jax = pytest.importorskip("jax", reason="comparing with jnp.matmul needs the jax extra")
    a, b = _operands(shapes)
    jaxpr = jax.make_jaxpr(jax.numpy.matmul)(a, b).jaxpr
    (jdot,) = [e for e in jaxpr.eqns if e.primitive.name == "dot_general"]
    (contract_a, contract_b), (batch_a, batch_b) = jdot.params["dimension_numbers"]
    p = ss.trace(np.matmul, a, b)
    (dot,) = [e for e in p.eqns if e.op == "dot_general"]
    assert [v.aval.shape for v in dot.inputs] == [tuple(v.aval.shape) for v in jdot.invars]
    assert dot.kw["contracting"] == (tuple(contract_a), tuple(contract_b))
    assert dot.kw["batch"] == (tuple(batch_a), tuple(batch_b))
    assert dot.outputs[0].aval.shape == tuple(jdot.outvars[0].aval.shape)
    (got,) = evaluate(p, a, b)
    want = np.asarray(jax.numpy.matmul(a, b))
    assert got.shape == want.shape and np.array_equal(got, want)


def _broadcasts(program):
    """Every broadcast_in_dim of ``program`` and of the programs nested in its ops (scan bodies)."""
    for e in program.eqns:
        if e.op == "broadcast_in_dim":
            yield e
        for _, v in e.params:
            if hasattr(v, "eqns"):
                yield from _broadcasts(v)


def test_the_gpt_step_holds_no_weight_copied_per_sequence():
    """The tiny GPT training step (data parallel on 8 devices, 8 sequences a device): no
    broadcast_in_dim in it, forward or backward scan, copies a weight, and its estimated peak
    memory per device is 871,956 B. It was 1,666,572 B while each matmul broadcast its weight to
    the sequences: the two layers' stacked [8, d, e] copies of wq, wk, wv, wo, w1, w2 (residuals
    of the forward scan, 524,288 B) and, in the backward step at the peak, 4 [8, d, d] and 3
    [8, d, f] copies and per-sequence gradients (327,680 B), less the [d, e] weight slices and
    gradients the step now reads instead (57,352 B): buffer by buffer at the peak, 794,616 B."""
    from simshard.programs import gpt

    cfg = gpt.CONFIGS["tiny"]
    prog = gpt.program("tiny")
    weights = {(cfg.d, cfg.d), (cfg.d, cfg.d_ff), (cfg.d_ff, cfg.d)}
    step = prog.program("dp", mode="sgd")
    found = list(_broadcasts(step))
    assert found  # the step does broadcast (row statistics, the mask): none of a weight
    assert not [e for e in found if tuple(e.inputs[0].aval.shape) in weights]
    assert prog.estimate("dp", mode="sgd").memory.max_peak == 871_956
