"""The compute model (simshard/report/compute.py): each device's FLOPs and bytes from its schedule,
hand-derived, and their seconds on a roofline."""

from __future__ import annotations

import json

import numpy as np
import pytest

import simshard as ss
from simshard import P
from simshard.report.compute import DEVICE_CLASSES, DeviceSpec, device_of, op_flops
from simshard.report.topology import Topology

F32 = np.float32


def test_op_flops_by_hand():
    # [b, m, k] x [b, k, n] batched matmul: 2 * b * m * n * k
    assert op_flops("dot_general", [(3, 4, 5), (3, 5, 6)], [(3, 4, 6)], {"contracting": ((2,), (1,)), "batch": ((0,), (0,))}) \
        == 2 * 3 * 4 * 6 * 5
    # conv: 2 * output elements * input channels * window
    assert op_flops("conv2d", [(1, 3, 8, 8), (4, 3, 3, 3)], [(1, 4, 6, 6)], {}) == 2 * (4 * 36) * 3 * 9
    assert op_flops("add", [(4, 5), (4, 5)], [(4, 5)], {}) == 20
    assert op_flops("reduce_sum", [(4, 5)], [(4,)], {"axes": (1,)}) == 20
    assert op_flops("transpose", [(4, 5)], [(5, 4)], {"perm": (1, 0)}) == 0


def test_roofline_takes_the_slower_of_flops_and_bytes():
    d = DeviceSpec(flops=1e12, memory_bandwidth=1e11)
    assert d.seconds(10**12, 0) == 1.0 and d.seconds(0, 10**11) == 1.0 and d.seconds(10**12, 2 * 10**11) == 2.0
    assert device_of("h100") == DEVICE_CLASSES["h100"]
    with pytest.raises(ValueError, match="unknown device class"):
        device_of("abacus")
    with pytest.raises(ValueError, match="positive"):
        DeviceSpec(0, 1)


def test_estimate_counts_each_devices_local_work():
    """Megatron x @ w with x rows over x (2) and w columns over y (4): each device multiplies a
    [32, 128] block by a [128, 64] one, then tanh on its [32, 64] result."""
    mesh = ss.Mesh({"x": 2, "y": 4})
    est = ss.estimate(lambda a, w: np.tanh(a @ w), ss.ShapeDtype((64, 128), F32), ss.ShapeDtype((128, 256), F32),
                      mesh=mesh, in_shardings=(P("x", None), P(None, "y")),
                      topology=Topology({}, "nvlink", device=DeviceSpec(1e12, 1e12)))
    matmul, tanh = 2 * 32 * 64 * 128, 32 * 64
    moved = (32 * 128 + 128 * 64 + 32 * 64) * 4 + 2 * 32 * 64 * 4
    assert {c.flops for c in est.compute} == {matmul + tanh}
    assert {c.bytes for c in est.compute} == {moved}
    assert est.compute_seconds() == pytest.approx(matmul / 1e12 + max(tanh / 1e12, 2 * 32 * 64 * 4 / 1e12))
    assert est.step_seconds() == pytest.approx(est.compute_seconds() + est.time.total)


def test_a_scan_counts_every_iteration():
    """A scan of L identical layers does L times one layer's work (the estimate walks the body once
    when the carries keep their shapes, and must still count every iteration)."""
    mesh = ss.Mesh({"x": 4})

    def layers(n):
        def f(h, ws):
            return ss.lax.scan(lambda h, w: (np.tanh(h @ w), None), h, ws)[0]
        return f

    def flops(n):
        est = ss.estimate(layers(n), ss.ShapeDtype((32, 16), F32), ss.ShapeDtype((n, 16, 16), F32), mesh=mesh,
                          in_shardings=(P("x", None), P()))
        return {c.flops for c in est.compute}

    one = 2 * 8 * 16 * 16 + 8 * 16
    assert flops(1) == {one}
    assert flops(6) == {6 * one}


def test_compute_time_needs_a_device():
    mesh = ss.Mesh({"x": 2})
    est = ss.estimate(lambda a: a * 2, ss.ShapeDtype((4,), F32), mesh=mesh, in_shardings=P("x"))
    with pytest.raises(ValueError, match="needs a device"):
        est.compute_seconds()
    # each device: 2 multiplies; its [2] block, the scalar 2 and the [2] result move 20 bytes
    assert est.compute_seconds("cpu") == pytest.approx(max(2 / 1e12, 20 / 1e11))


def test_topology_with_a_device_round_trips_through_json():
    t = Topology({"x": "infiniband"}, "nvlink", device="a100")
    back = Topology.from_dict(json.loads(json.dumps(t.to_dict())))
    assert back == t and back.device == DEVICE_CLASSES["a100"]


def test_on_a_kernel_model_device_a_matmul_runs_as_tiles_and_a_shared_weight_is_one_gemm():
    """On the h100 class (report/kernels.py): a float32 contraction runs at the CUDA-core peak by
    its tiles, numpy's matmul of [b, s, d] by [d, e] is one [b s, d] x [d, e] GEMM (traced as
    jnp.matmul traces it: the weight contracted as it is, never broadcast to the batch), and
    element-wise work writes its result once at the achieved bandwidth."""
    from simshard.report.compute import Work
    from simshard.report.kernels import Gemm, elementwise_seconds, gemm_seconds

    h100 = device_of("h100")
    mesh = ss.Mesh({"x": 2})
    est = ss.estimate(lambda a, w: np.tanh(a @ w), ss.ShapeDtype((8, 64, 128), F32), ss.ShapeDtype((128, 256), F32),
                      mesh=mesh, in_shardings=(P("x", None, None), P()))
    works = {w.kind: w for c in est.compute[:1] for w, _ in c.ops}
    assert works["gemm"].gemm == (1, 4 * 64, 256, 128) and works["gemm"].dtype == "float32"
    assert "layout" not in works  # no broadcast of the weight to the batch
    expected = gemm_seconds(Gemm(4 * 64, 256, 128, 1, "float32"), h100) + elementwise_seconds(4 * 64 * 256, 4 * 64 * 256 * 4, h100)
    assert est.compute[0].seconds(h100) == pytest.approx(expected)
    assert est.compute[0].matmul_flops == 2 * 4 * 64 * 256 * 128
    assert Work(10, 10, "gemm", (1, 8, 8, 8), "float32").seconds(DeviceSpec(1e12, 1e12)) == pytest.approx(1e-11)
