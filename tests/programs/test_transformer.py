"""programs/transformer.py: each strategy's communication derived from the shapes, and why the
fixed-point grid is there."""

import numpy as np

import simshard as ss
from simshard import programs
from simshard.ops import get_op
from simshard.ir.program import Literal
from simshard.programs import transformer as tf

F32 = 4
G = 8  # devices of the default mesh {x: 2, y: 4}
ACT = tf.BATCH * tf.SEQ * tf.D * F32  # one [batch, seq, d] float32 activation: 8192 B


def collectives(res):
    """{(kind, mesh axes): (collectives, bytes sent over all devices)}, from the report's summary."""
    return {(row["kind"], tuple(row["axis"].split(","))): (row["collectives"], row["sent"])
            for row in res.comm.summary(("kind", "axis"))}


def test_dp_moves_nothing(run_strategy):
    assert run_strategy("transformer", "dp").comm.total_bytes == 0


def test_megatron_is_two_all_reduces_of_batch_seq_d(run_strategy):
    # wo and w2 are row-parallel: each leaves partial sums of a [batch, seq, d] activation over all
    # 8 devices, all-reduced once (2(g-1)/g of it received per device); nothing else moves
    res = run_strategy("transformer", "megatron")
    assert collectives(res) == {("all_reduce", ("x", "y")): (2, 2 * G * 2 * (G - 1) * ACT // G)}  # 229376 B
    assert res.comm.total_bytes == 229376


def test_explicit_mode_places_the_same_all_reduces_and_matches_plain_numpy(run_strategy):
    res = run_strategy("transformer", "explicit")
    assert res.program.mode == "explicit"
    assert collectives(res) == collectives(run_strategy("transformer", "megatron"))
    # the explicit function calls snp with out_sharding (trace only), so the run verified against
    # the program run whole; check it against the plain numpy block as well
    assert np.array_equal(res.outputs, tf.block(*programs.load("transformer").inputs()))


def test_sequence_all_gathers_keys_and_values_only(run_strategy):
    # queries stay split by token; k and v, [batch, seq, d] each, are gathered whole on every device
    res = run_strategy("transformer", "sequence")
    assert collectives(res) == {("all_gather", ("x", "y")): (2, 2 * G * (G - 1) * ACT // G)}  # 114688 B
    sources = {r.source for r in res.comm.records}
    assert len(sources) == 2


def test_the_fixed_point_grid_is_what_makes_megatron_bitwise(monkeypatch):
    # without rounding after layernorm and softmax, the row-parallel matmuls add non-integer
    # floats in another order than numpy does: the run is no longer bitwise
    monkeypatch.setattr(tf, "fixed_point", lambda v, bits: v)
    res = programs.load("transformer").run("megatron", backend="local", check_ops=False)
    assert not res.verify.bitwise


def test_only_the_causal_past_is_attended():
    params, x = tf.inputs()
    out = tf.block(params, x)
    changed = x.copy()
    changed[:, -1] += 1  # the last token cannot change any earlier token's output
    again = tf.block(params, changed)
    assert np.array_equal(out[:, :-1], again[:, :-1]) and not np.array_equal(out[:, -1], again[:, -1])


def test_every_matmul_and_softmax_sum_adds_exactly():
    # the bounds in tf.inputs' docstring, checked: each dot_general and each sum but layernorm's
    # variances gives the same value in float64 as in float32: no float32 sum ever rounded
    params, x = tf.inputs()
    program = ss.jit(tf.block).trace(params, x)
    env = dict(zip(program.inputs, [np.asarray(a) for a in (*[params[k] for k in sorted(params)], x)]))
    checked = inexacts = 0
    for e in program.eqns:
        ins = [i.value if isinstance(i, Literal) else env[i] for i in e.inputs]
        (out,) = get_op(e.op).kernel(*ins, **e.kw)
        if e.op in ("dot_general", "reduce_sum"):
            wide = get_op(e.op).kernel(*[np.asarray(i, np.float64) for i in ins], **e.kw)[0]
            inexact = not np.array_equal(out.astype(np.float64), wide)
            inexacts += inexact
            if inexact:  # only the variances of the two layernorms, sums of squares of non-dyadic deviations
                assert e.op == "reduce_sum" and program.producer(e.inputs[0]).op == "mul"
            checked += 1
        env[e.outputs[0]] = out
    assert checked == 13 and inexacts <= 2  # 6 projections, 2 einsums, the softmax sum, 2 x (mean, variance)


def test_training_steps_in_a_scan():
    """The SGD step over two blocks in ss.lax.scan (one loop forward, one backward). dp
    all-reduces every gradient (each weight's a contraction over batch and sequence that the
    devices split: equal up to that reassociation, the loss bitwise); Megatron all-reduces a [batch, seq, d]
    activation twice per block forward and twice per block backward, for the input gradients of its
    column-parallel layers (a loop computes the carry's gradient at every step, the first block's
    too, which an unrolled tape would skip), and verifies up to reassociation (layernorm's and
    softmax's derivatives are not on a grid, so its sharded gradient sums round differently)."""
    prog = programs.load("transformer")
    dp, megatron = (prog.run(s, mode="sgd", backend="local") for s in ("dp", "megatron"))
    grads = tf.TRAIN_LAYERS * sum(int(np.prod(s)) for s in tf.PARAMS.values()) * F32
    assert dp.verify.ok and not dp.verify.wrong_ops and dp.verify.reassociations
    # one per layer's gradient of each weight (each iteration of the backward loop), and the loss
    count = tf.TRAIN_LAYERS * len(tf.PARAMS) + 1
    assert collectives(dp) == {("all_reduce", ("x", "y")): (count, 2 * (G - 1) * grads + 2 * (G - 1) * F32)}
    assert megatron.verify.ok and not megatron.verify.wrong_ops
    assert collectives(megatron) == {("all_reduce", ("x", "y")): (8, 8 * 2 * (G - 1) * ACT)}
    assert "explicit" not in prog.training.strategies  # explicit mode runs forward only
