"""A GPT training step from numbers (simshard/report/training): every term of docs/estimate.md's
derivation checked on its own, and Megatron-LM's weak-scaling table reproduced."""

from __future__ import annotations

import pytest

from simshard.report.devices import device_of
from simshard.report.kernels import Gemm, gemm_seconds
from simshard.report.training import Options, Parallel, Schedule, Transformer, cluster, estimate_step, megatron_flops, model_flops
from simshard.report.training.layer import layer
from simshard.report.training.memory import layer_activation_bytes, state_bytes, stage_params
from simshard.report.training.tune import tune

A100 = device_of("a100")
DGX = cluster("dgx-a100")
GPT_1_7B = Transformer(24, 2304, 24, 51200, 2048)

# Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
# Megatron-LM", SC'21, Table 1 (weak scaling; vocabulary 51,200, sequence 2,048, A100 80 GB on
# Selene: DGX A100 nodes): parameters (B), heads, hidden, layers, tensor and pipeline parallel
# sizes, GPUs, batch, achieved TFLOP/s per GPU by their eq. 3.
TABLE_1 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137), (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142), (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138), (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148), (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163), (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
]
# What those runs did (the paper, sections 3 and 5; the Megatron-LM of 2021): full activation
# recomputation (eq. 3's 96), microbatches of one sequence, the 1F1B schedule, no ZeRO, no
# sequence parallelism (Korthikanti et al. 2022 came later), Megatron's fused softmax rather
# than a fused attention kernel, each microbatch's weight gradients added into float32 buffers.
MEGATRON_2021 = dict(microbatch=1, recompute="full", attention="unfused", fused_accumulation=False)


def table_1_estimate(row):
    _, heads, hidden, layers, tp, pp, gpus, batch, _ = row
    model = Transformer(layers, hidden, heads, 51200, 2048)
    return estimate_step(model, Parallel(tp, pp, gpus // (tp * pp)), Options(batch, **MEGATRON_2021), A100, DGX)


@pytest.mark.parametrize("row", TABLE_1, ids=[f"{r[0]}B" for r in TABLE_1])
def test_megatron_weak_scaling_table_within_15_percent(row):
    """Every row of Table 1 within 15% of the published TFLOP/s per GPU (the constants come from the
    matmul data, the data sheets and published link and kernel figures; none is set per row:
    docs/estimate.md#megatron-lms-weak-scaling-table lists the residuals), and it fits in 80 GB."""
    est = table_1_estimate(row)
    assert est.megatron_flops_per_device == pytest.approx(row[-1] * 1e12, rel=0.15)
    assert est.fits


def test_the_table_model_flops_are_megatrons_count_and_params_its_formula():
    """With full recomputation the matmuls every device runs add up to Megatron's eq. 3 exactly;
    without, to the 72-count; and the parameters are eq. 2 plus the final LayerNorm."""
    par = Parallel(2, 1, 4)
    for recompute, count in (("full", megatron_flops), ("none", model_flops)):
        est = estimate_step(GPT_1_7B, par, Options(64, 2, recompute=recompute, attention="unfused"), A100, DGX)
        assert est.matmul_flops * par.devices == pytest.approx(count(GPT_1_7B, 64), rel=1e-12)
    l, h, V, s = 24, 2304, 51200, 2048
    assert GPT_1_7B.params == 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h)) + 2 * h


def test_recomputation_full_reruns_the_forward_and_selective_the_attention_core():
    par = Parallel(2, 1, 1)
    none, sel, full = (layer(GPT_1_7B, par, Options(8, 1, recompute=r, attention="unfused"), A100)
                       for r in ("none", "selective", "full"))
    assert full.recompute == full.forward and none.recompute.seconds == 0
    s, dh, heads = 2048, 96, 12
    assert sel.recompute.flops == 2 * 2 * heads * s * s * dh  # Q K^T and P V of 12 heads
    assert sel.recompute.comm.items == ()  # no tensor-parallel collective is rerun
    assert len(full.recompute.comm.items) == 1 and full.recompute.comm.items[0][1] == 2  # its two all-reduces are
    flash = layer(GPT_1_7B, par, Options(8, 1, recompute="selective"), A100)
    assert flash.recompute.seconds == 0  # a fused attention kernel recomputes its scores itself


@pytest.mark.parametrize("schedule, v", [(Schedule(), 1), (Schedule("interleaved", 2), 2), (Schedule("interleaved", 4), 4)])
def test_pipeline_bubble_is_p_minus_1_over_v_m(schedule, v):
    """1F1B runs m + p - 1 slots; interleaving v chunks a device cuts the bubble to (p-1)/(v m)."""
    model = Transformer(32, 2048, 16, 51200, 2048)
    est = estimate_step(model, Parallel(2, 4, 2), Options(64, 1, schedule), A100, DGX)
    m, p = 32, 4
    assert est.microbatches == m
    assert est.bubble_seconds / (m * est.slot_seconds) == pytest.approx((p - 1) / (v * m))
    transfers = dict((r.kind, c) for r, c in est.comm.items if r.source.startswith("pipeline"))
    assert transfers["collective_permute"] == 2 * v * m  # each chunk boundary: activation out, gradient back


def test_gradient_accumulation_reduces_once_per_step_and_overlaps_the_last_backward():
    """m microbatches of compute, one data-parallel all-reduce of the stage's bf16 gradients
    (2 (d-1)/d of them received); with overlap only what outlasts the last microbatch's backward
    is exposed; tensor-parallel all-reduces never overlap."""
    par = Parallel(2, 1, 8)
    one, four = (estimate_step(GPT_1_7B, par, Options(8 * m, 1, attention="unfused"), A100, DGX) for m in (1, 4))
    assert four.compute_seconds == pytest.approx(4 * one.compute_seconds)
    grads = 2 * stage_params(GPT_1_7B, par)
    for est in (one, four):
        reduced = sum(r.bytes_received * c for r, c in est.comm.items if r.source.startswith("data-parallel"))
        assert reduced == pytest.approx(2 * 7 / 8 * grads, rel=1e-6)
    backward = layer(GPT_1_7B, par, Options(8, 1, attention="unfused"), A100).backward.seconds * 24
    assert four.dp_exposed_seconds == pytest.approx(max(four.dp_seconds - backward, 0), abs=0.1 * four.dp_seconds)
    serial = estimate_step(GPT_1_7B, par, Options(32, 1, attention="unfused", overlap=False), A100, DGX)
    assert serial.dp_exposed_seconds == serial.dp_seconds > four.dp_exposed_seconds
    assert four.step_seconds >= four.compute_seconds + four.tp_seconds


def test_zero_stages_shard_states_and_zero3_moves_one_and_a_half_times():
    """Mixed precision: 16 bytes a parameter (bf16 weight and gradient, float32 master, momentum,
    variance); ZeRO-1 shards the 12, ZeRO-2 the gradient too, ZeRO-3 everything; ZeRO-3 gathers
    the weights for the forward and again for the backward and reduce-scatters the gradients:
    3 (d-1)/d against the all-reduce's 2 (d-1)/d."""
    par = Parallel(1, 1, 8)
    P = stage_params(GPT_1_7B, par)
    states = [state_bytes(GPT_1_7B, par, Options(8, zero=z)) for z in range(4)]
    assert states == pytest.approx([16 * P, (4 + 12 / 8) * P, (2 + 14 / 8) * P, 16 / 8 * P])
    dp_bytes = [estimate_step(GPT_1_7B, par, Options(8, 1, zero=z), A100, DGX).comm.bytes_received for z in (0, 3)]
    assert dp_bytes[1] == pytest.approx(1.5 * dp_bytes[0], rel=1e-6)


def test_sequence_parallelism_moves_the_same_bytes_and_saves_activations():
    """An all-reduce becomes a reduce-scatter and an all-gather (the same bytes); the LayerNorm and
    dropout activations split over t (Korthikanti et al.: 10 + 24/t becomes 34/t)."""
    par = Parallel(8, 1, 1)
    off, on = (estimate_step(GPT_1_7B, par, Options(8, 1, sequence_parallel=sp, attention="unfused"), A100, DGX)
               for sp in (False, True))
    assert on.comm.bytes_received == pytest.approx(off.comm.bytes_received, rel=1e-6)
    sbh = 2048 * 1 * 2304
    assert layer_activation_bytes(GPT_1_7B, par, Options(8, 1, recompute="selective")) == sbh * (10 + 24 / 8)
    assert layer_activation_bytes(GPT_1_7B, par, Options(8, 1, recompute="selective", sequence_parallel=True)) == \
        sbh * 34 / 8


def test_tuning_picks_the_fastest_that_fits_and_says_what_it_chose():
    model = Transformer(96, 16384, 128, 51200, 2048)
    tuned = tune(model, Parallel(8, 16, 15), {"batch": 2160}, A100, DGX)
    assert tuned.step.fits and set(tuned.chosen) == {"microbatch", "schedule", "recompute", "zero", "sequence_parallel"}
    fixed = estimate_step(model, Parallel(8, 16, 15), Options(2160, **MEGATRON_2021), A100, DGX)
    assert tuned.step.step_seconds <= fixed.step_seconds
    limit = 0.8 * tuned.step.peak_bytes  # a smaller device: the choice changes to one that fits it, slower
    small = device_of({**A100.__dict__, "memory": limit})
    squeezed = tune(model, Parallel(8, 16, 15), {"batch": 2160}, small, DGX)
    assert squeezed.step.fits and squeezed.step.peak_bytes <= limit
    assert squeezed.step.step_seconds >= tuned.step.step_seconds
    nothing = tune(model, Parallel(8, 16, 15), {"batch": 2160}, device_of({**A100.__dict__, "memory": 1e9}), DGX)
    assert not nothing.step.fits and nothing.step.summary()["fits"] is False  # the least memory, said not to fit
    given = tune(model, Parallel(8, 16, 15), {"batch": 2160, "microbatch": 1, "schedule": Schedule(),
                                              "recompute": "full", "zero": 0, "sequence_parallel": False}, A100, DGX)
    assert given.chosen == () and given.candidates == 1


def test_every_matmul_is_timed_by_the_kernel_model():
    """The layer's forward matmuls are the kernel model's, one for one (one implementation)."""
    par, T, h = Parallel(4, 1, 1), 2048, 2304
    fwd = layer(GPT_1_7B, par, Options(8, 1, attention="flash"), A100).forward
    dense = sum(gemm_seconds(g, A100) for g in (Gemm(T, 3 * h // 4, h), Gemm(T, h, h // 4), Gemm(T, 4 * h // 4, h),
                                                 Gemm(T, h, 4 * h // 4)))
    assert dense < fwd.seconds < dense * 1.5


def test_bad_layouts_are_refused_by_name():
    with pytest.raises(ValueError, match="do not split over tp=5"):
        estimate_step(GPT_1_7B, Parallel(5, 1, 1), Options(8), A100, DGX)
    with pytest.raises(ValueError, match="batch 10 does not split"):
        estimate_step(GPT_1_7B, Parallel(1, 1, 4), Options(10), A100, DGX)
    with pytest.raises(ValueError, match="24 layers do not split"):
        estimate_step(GPT_1_7B, Parallel(1, 5, 1), Options(10), A100, DGX)


def test_the_analytic_step_equals_the_traced_estimate_on_matmul_flops_and_bytes():
    """The library's tiny GPT (programs/gpt.py: 2 layers, d 32, 8 heads, MLP 64, vocabulary 64,
    float32, no embedding, no biases), its 2-D strategy on x=2 (data) by y=4 (tensor), traced,
    partitioned and estimated (ss.estimate) against the step from numbers: every device's matmul
    FLOPs, and per device the tensor-parallel all-reduces (2 + 2 per layer, 1 for the head's
    input gradient) and the data-parallel gradient all-reduce, record for record in bytes
    (the traced loss's one scalar all-reduce aside)."""
    from simshard.programs import gpt

    traced = gpt.program("tiny").estimate("2d", mode="sgd", mesh={"x": 2, "y": 4})
    model = Transformer(2, 32, 8, 64, 8, 64, dtype="float32", embedding=False, biases=False, vocab_multiple=1)
    step = estimate_step(model, Parallel(4, 1, 2), Options(64, 32, recompute="none", attention="unfused"),
                         device_of("h100"), cluster("dgx-h100"))
    assert {c.matmul_flops for c in traced.compute} == {step.matmul_flops}
    for d in range(8):
        got = [r for r in traced.comm.records if r.device == d and r.bytes_received > 64]
        tp = [r.bytes_received for r in got if r.axes == ("y",)]
        dp = sum(r.bytes_received for r in got if r.axes == ("x",))
        want = {r.axes[0]: (r.bytes_received, c) for r, c in step.comm.items if r.axes == ("tp",)}
        assert len(tp) == sum(c for r, c in step.comm.items if r.axes == ("tp",)) == 9
        assert set(tp) == {want["tp"][0]}
        assert dp == sum(r.bytes_received * c for r, c in step.comm.items if r.axes == ("dp",))


# Smith et al., "Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B" (2022), section
# 2.4, as llm-analysis (cli99/llm-analysis, examples/megatron-turing-nlg) quotes it: 105 layers,
# hidden 20,480, 128 heads, vocabulary 50,272, sequence 2,048, batch 1,920, tensor 8 x pipeline
# 35, on 280, 350 and 420 DGX A100 (40 GB) servers: seconds per iteration.
MT_NLG = [(2240, 60.1), (2800, 50.2), (3360, 44.4)]


@pytest.mark.parametrize("gpus, seconds", MT_NLG, ids=[f"{g}" for g, _ in MT_NLG])
def test_a_published_run_beyond_the_table_mt_nlg_530b_within_25_percent(gpus, seconds):
    """Checked beyond the table it was compared with: MT-NLG's iteration times, on the A100 40 GB,
    run as Table 1's (the ZeRO stage left to the tuner: the fastest that fits in 40 GB). The
    estimate is 21-24% fast: the same architecture and layout ran 29% faster per GPU in Table 1
    (163 against 126 TFLOP/s, 2,520 A100 80 GB), a difference of software stacks (Megatron-LM
    against Megatron-DeepSpeed) the model does not hold (docs/estimate.md)."""
    model = Transformer(105, 20480, 128, 50272, 2048)
    given = {"batch": 1920, "schedule": Schedule(), "sequence_parallel": False, **MEGATRON_2021}
    tuned = tune(model, Parallel(8, 35, gpus // 280), given, device_of("a100-40gb"), DGX)
    assert tuned.chosen == ("zero",) and tuned.step.fits
    assert seconds * 0.75 < tuned.step.step_seconds < seconds


def test_a_pipeline_holds_the_activations_of_its_microbatches_in_flight():
    """1F1B's first stage holds min(p, m) microbatches of its l/p layers, the interleaved schedule
    p (1 + (p-1)/(p v)); full recomputation keeps each layer's input, 2 s b h, plus one layer's
    activations while it is recomputed; the last stage its float32 logits and their gradient."""
    from simshard.report.training.memory import in_flight, peak_bytes

    model, par = Transformer(32, 2048, 16, 51200, 2048), Parallel(2, 4, 2)
    assert in_flight(par, Options(64, 1), 32) == 4 and in_flight(par, Options(64, 16), 2) == 2
    assert in_flight(par, Options(64, 1, Schedule("interleaved", 2)), 32) == 4 * (1 + 3 / 8)
    opt = Options(64, 1, recompute="full")
    per_layer = layer_activation_bytes(model, par, opt)
    assert per_layer == 2 * 2048 * 2048
    full_layer = layer_activation_bytes(model, par, opt.with_(recompute="none"))
    logits = 2 * 4 * 2048 * 51200 // 2
    assert peak_bytes(model, par, opt, 32) == state_bytes(model, par, opt) + 8 * per_layer * 4 + full_layer + logits


def test_fsdp_prefetches_its_gathers_behind_the_compute():
    """ZeRO-3 / FSDP: each layer's weights gathered for every microbatch's forward and backward,
    prefetched behind the compute (exposed only what outlasts it); without overlap all exposed."""
    par = Parallel(1, 1, 8)
    on = estimate_step(GPT_1_7B, par, Options(32, 1, zero=3), A100, DGX)
    off = estimate_step(GPT_1_7B, par, Options(32, 1, zero=3, overlap=False), A100, DGX)
    assert on.dp_exposed_seconds == pytest.approx(max(on.dp_seconds - on.compute_seconds, 0.0))
    assert off.dp_exposed_seconds == off.dp_seconds == on.dp_seconds
    gathers = [c for r, c in on.comm.items if r.source == "ZeRO-3 weight gather"]
    assert gathers == [2 * on.microbatches]
