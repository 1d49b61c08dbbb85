"""A pipeline axis (simshard/report/pipeline.py): GPipe and 1F1B over S stages and M microbatches,
priced from one stage's estimate; every figure against its hand-derived formula."""

from __future__ import annotations

import numpy as np
import pytest

import simshard as ss
from simshard import P
from simshard.programs import gpt
from simshard.report.compute import DeviceSpec
from simshard.report.pipeline import Pipeline, PipelineEstimate
from simshard.report.topology import Link, Topology

F32 = np.float32
TOPO = Topology({"pp": Link(1e9, 1e-5), "x": Link(4e9, 2e-6), "y": Link(4e9, 2e-6)}, device=DeviceSpec(1e11, 1e10))


def test_schedules_differ_in_activations_held_not_in_bubble():
    g, f = Pipeline(4, 8, "gpipe"), Pipeline(4, 8, "1f1b")
    assert g.slots == f.slots == 11
    assert g.bubble_fraction == f.bubble_fraction == 3 / 11
    assert (g.in_flight, f.in_flight) == (8, 4)
    assert Pipeline(8, 2, "1f1b").in_flight == 2  # fewer microbatches than stages
    with pytest.raises(ValueError, match="schedule 'interleaved'"):
        Pipeline(4, 8, "interleaved")
    with pytest.raises(ValueError, match="at least one stage"):
        Pipeline(0, 8)


def _stage():
    """A stand-in stage: x @ w then tanh, batch over x."""
    mesh = ss.Mesh({"x": 2})
    return ss.estimate(lambda a, w: np.tanh(a @ w), ss.ShapeDtype((16, 32), F32), ss.ShapeDtype((32, 32), F32),
                       mesh=mesh, in_shardings=(P("x", None), P()), topology=TOPO)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_step_time_bubble_and_memory_by_hand(schedule):
    stage = _stage()
    S, M, B = 4, 6, 8 * 32 * 4  # each device's [8, 32] block of the activation
    pe = PipelineEstimate(Pipeline(S, M, schedule), stage, B, None, TOPO)
    # per device: the matmul ([8, 32] x [32, 32]) and tanh on [8, 32], each on the roofline
    compute = max(2 * 8 * 32 * 32 / 1e11, (8 * 32 + 32 * 32 + 8 * 32) * 4 / 1e10) + max(8 * 32 / 1e11, 2 * 8 * 32 * 4 / 1e10)
    transfer = 2 * (1e-5 + B / 1e9)
    t = compute + 0.0 + transfer  # the stage itself moves nothing (batch-parallel, weights replicated)
    assert pe.microbatch_seconds() == pytest.approx(t)
    assert pe.step_seconds() == pytest.approx((M + S - 1) * t)
    assert pe.bubble_seconds() == pytest.approx((S - 1) * t)
    inputs = (8 * 32 + 32 * 32) * 4
    per_mb = stage.memory.devices[0].peak_bytes - inputs
    assert pe.resident_bytes == inputs
    assert pe.peak_bytes == inputs + (M if schedule == "gpipe" else S) * per_mb
    assert pe.transfer_bytes == 2 * M * B


def test_one_stage_sends_nothing():
    pe = PipelineEstimate(Pipeline(1, 4), _stage(), 1024, None, TOPO)
    assert pe.transfer_bytes == 0 and pe.transfer_seconds() == 0 and pe.bubble_seconds() == 0


def test_a_time_needs_a_device():
    pe = PipelineEstimate(Pipeline(2, 2), _stage(), 1024, None, Topology({}, "nvlink"))
    with pytest.raises(ValueError, match="needs a topology with a device"):
        pe.step_seconds()


def test_gpt_3d_stage_leaves_gradients_pending_and_syncs_them_once():
    """The tiny GPT over {pp: 2, x: 2, y: 2} as 2d inside each stage (the 3-D strategy): one layer
    per stage, microbatches of 16; the stage's collectives run over y only (Megatron), its
    gradients stay pending over x, and the per-step sync all-reduces each device's half of the
    stage's parameters over x: 2 (g - 1) / g of (4 d^2 + 2 d d_ff) / 2 floats, g = 2."""
    pe = gpt.estimate_pipeline("tiny", "2d", {"pp": 2, "x": 2, "y": 2}, Pipeline(2, 4, "1f1b"), TOPO)
    assert {r.axes for r in pe.stage.comm.records} <= {("y",)}
    d, f = 32, 64
    half = (4 * d * d + 2 * d * f) // 2 * 4
    assert {pe.sync.comm.bytes_received(dev) for dev in pe.sync.comm.devices} == {half}
    assert pe.boundary_bytes == (64 // 4 // 2) * 8 * 32 * 4  # [mb / x, seq, d] per device
    # the last stage syncs its head too: each device's half of the [d, V] projection (column-
    # parallel over y), all-reduced over x: 2 (g - 1) / g of d V / 2 floats more
    head = 32 * 64 // 2 * 4
    assert {pe.last_sync.comm.bytes_received(dev) for dev in pe.last_sync.comm.devices} == {half + head}
    most = [max(e.comm.bytes_received(v) for v in e.comm.devices) for e in (pe.stage, pe.last)]
    assert pe.collective_bytes == max(4 * most[0] + half, 4 * most[1] + half + head)
    # its microbatch all-reduces the projection's input gradient over y as well: it receives more
    assert most[1] > most[0]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_the_slower_stage_paces_the_slots_and_each_stage_holds_its_own_microbatches(schedule):
    """A last stage twice as long as the others: every slot takes its time; under 1F1B it holds
    one microbatch's activations (its backward follows its forward), the first stage S."""
    stage = _stage()
    mesh = ss.Mesh({"x": 2})
    last = ss.estimate(lambda a, w: np.tanh(np.tanh(a @ w) @ w), ss.ShapeDtype((16, 32), F32),
                       ss.ShapeDtype((32, 32), F32), mesh=mesh, in_shardings=(P("x", None), P()), topology=TOPO)
    S, M, B = 4, 6, 8 * 32 * 4
    pe = PipelineEstimate(Pipeline(S, M, schedule), stage, B, None, TOPO, last)
    alone = PipelineEstimate(Pipeline(S, M, schedule), last, B, None, TOPO)
    assert pe.microbatch_seconds() == pytest.approx(alone.microbatch_seconds())
    assert pe.microbatch_seconds() > PipelineEstimate(Pipeline(S, M, schedule), stage, B, None, TOPO).microbatch_seconds()
    inputs = (8 * 32 + 32 * 32) * 4
    per_mb = {k: max(m.peak_bytes for m in e.memory.devices) - inputs for k, e in (("stage", stage), ("last", last))}
    held = {"stage": M if schedule == "gpipe" else S, "last": M if schedule == "gpipe" else 1}
    assert pe.peak_bytes == inputs + max(held[k] * per_mb[k] for k in held)


def test_gpt_pipeline_refuses_a_mesh_without_the_stage_axis_size():
    with pytest.raises(ValueError, match="'pp' axis has 4 devices, the pipeline 2 stages"):
        gpt.estimate_pipeline("tiny", "2d", {"pp": 4, "x": 2}, Pipeline(2, 4), TOPO)
