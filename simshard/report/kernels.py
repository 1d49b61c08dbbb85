"""How long a kernel runs on a device: a matmul by its tiles and waves, memory-bound work at the
achieved bandwidth, fused attention at its published efficiency.

A matmul of ``[m, k] @ [k, n]`` (``batch`` of them) runs as output tiles of ``Tm x Tn``, one per
streaming multiprocessor at a time: ``ceil(m/Tm) ceil(n/Tn) batch`` tiles in
``waves = ceil(tiles / SMs)`` waves, each wave as long as one tile's ``2 Tm Tn (k + k0)`` FLOPs at
an SM's sustained rate (``peak / SMs x efficiency``), the library picking the tile shape that
finishes first. This one formula holds the three losses real kernels show:

* tile quantisation: a dim that is not a multiple of the tile computes the padding;
* wave quantisation: a last wave that fills few SMs takes as long as a full one;
* small-dim inefficiency: ``k0`` (each tile's prologue and epilogue: loading the first operand
  blocks, writing the result) counts as ``k0`` more of the contracted dim, and a result too
  small to fill the SMs leaves them idle (few tiles, one short wave) unless its contracted dim
  is long enough to split over several tiles (split-K, 1 to 4 ways: ``k/s + k0`` per tile).

Tensor-core kernels need every dim a multiple of 8 elements (16 bytes of bf16) to use their
vector loads; a matmul with an odd dim falls back to a kernel ``MISALIGNED`` times slower. A
matmul also cannot beat its operands' and result's bytes at the achieved bandwidth. Timed on its
own (the measurements below), a call pays a fixed ``CALL_OVERHEAD`` (launch and the timing
events), and a short burst runs at the boost clock (``DeviceSpec.burst`` faster), decaying to the
power-limited clock as the burst lengthens (time constant ``BURST_SECONDS``); inside a training
step kernels are queued back to back (their launches overlap the previous kernel) and run
sustained, so neither applies there.

The constants ``K_OVERHEAD``, ``CALL_OVERHEAD``, ``BURST_SECONDS``, ``MISALIGNED`` and the
GH100's efficiency (``devices.HOPPER_EFFICIENCY``) are fitted to one H200's 103 matmuls
(``tests/data/gemm_h200.json``), by a grid search of the log-time error;
``tests/report/test_kernels.py`` holds the fit to the data within the errors docs/estimate.md
states.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from .devices import DeviceSpec

# Thread-block tiles of cuBLAS/CUTLASS's tensor-core GEMMs on Ampere and Hopper (CUTLASS's
# default GEMM configurations: 128x256, 256x128 and 128x128 output tiles).
TILES = ((128, 256), (256, 128), (128, 128))
# Split-K: a result of few tiles cuts its contracted dim over 1..4 tiles per output tile, so the
# SMs fill (cuBLAS's split-K and stream-K kernels; CUTLASS's split-k GEMMs).
SPLIT_K = (1, 2, 3, 4)
K_OVERHEAD = 128  # fitted: a tile's prologue and epilogue, as that many more of the contracted dim
CALL_OVERHEAD = 12e-6  # fitted: one isolated call's fixed cost (the 256^3 matmul takes 14 us)
BURST_SECONDS = 0.01  # fitted: the time constant of the boost clock's decay under load
TIMED_CALLS = 20  # the measurements' protocol: 20 timed calls back to back (gemm_h200.json "how")
ALIGNMENT = 8  # elements: tensor-core operands' dims in multiples of 16 bytes (cuBLAS's documented requirement)
MISALIGNED = 6.0  # fitted: 4095x4097x4096 runs 95.6 TFLOP/s against 628 at 4096^3
ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4, "tf32": 4, "float64": 8}
# FlashAttention-2 (Dao 2023, "FlashAttention-2: Faster Attention with Better Parallelism and Work
# Partitioning", abstract and section 4.1): 50-73% of the A100's peak forward, the backward
# lower; taken at the middle of that range for forward and backward together.
FLASH_EFFICIENCY = 0.6


class Gemm(NamedTuple):
    """``batch`` matmuls of ``[m, k] @ [k, n]`` in ``dtype`` (a numpy name or ``tf32``)."""

    m: int
    n: int
    k: int
    batch: int = 1
    dtype: str = "bfloat16"

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k

    @property
    def bytes(self) -> int:
        return self.batch * (self.m * self.k + self.k * self.n + self.m * self.n) * ITEMSIZE.get(self.dtype, 4)


def tile_seconds(g: Gemm, device: "DeviceSpec") -> float:
    """The waves of tiles at the sustained per-SM rate, over the tile shapes and split-K
    factors: the fastest."""
    per_sm = device.peak(g.dtype) * device.efficiency(g.dtype) / device.sms
    best = math.inf
    for (tm, tn), split in itertools.product(TILES, SPLIT_K):
        tiles = g.batch * math.ceil(g.m / tm) * math.ceil(g.n / tn) * split
        waves = math.ceil(tiles / device.sms)
        best = min(best, waves * 2 * tm * tn * (math.ceil(g.k / split) + K_OVERHEAD) / per_sm)
    return best


def gemm_seconds(g: Gemm, device: "DeviceSpec", *, isolated: bool = False) -> float:
    """A matmul's time on ``device`` inside a step (sustained, queued); ``isolated``: timed on its
    own as the measurements were (its fixed call cost and the boost burst). A device without
    SMs (no kernel model) takes the roofline."""
    if g.flops == 0:
        return 0.0
    if not device.sms:
        return device.seconds(g.flops, g.bytes, g.dtype)
    t = max(tile_seconds(g, device), g.bytes / device.achieved_bandwidth)
    if g.dtype in ("bfloat16", "float16", "tf32") and any(d % ALIGNMENT for d in (g.m, g.n, g.k)):
        t *= MISALIGNED
    if isolated:
        t = t / (1 + (device.burst - 1) * math.exp(-TIMED_CALLS * t / BURST_SECONDS)) + CALL_OVERHEAD
    return t


def efficiency_from_mamf(device: "DeviceSpec", mamf: float, shape: tuple[int, int, int]) -> float:
    """The tile efficiency at which the model gives ``mamf`` FLOP/s for the ``(m, n, k)`` matmul
    measured in a short burst (a published maximum achievable matmul FLOPS): the model's time
    there is ``t1 / (efficiency x burst)`` with ``t1`` its time at efficiency 1, so
    ``mamf = flops x efficiency x burst / t1``."""
    m, n, k = shape
    g = Gemm(m, n, k)
    unit = type(device)(**{**device.__dict__, "matmul_efficiency": {"tensor": 1.0, "vector": 1.0}})
    return mamf * tile_seconds(g, unit) / (g.flops * device.burst)


def stream_seconds(nbytes: float, device: "DeviceSpec") -> float:
    """Memory-bound work: ``nbytes`` read and written at the achieved bandwidth."""
    return nbytes / device.achieved_bandwidth


def elementwise_seconds(flops: float, nbytes: float, device: "DeviceSpec") -> float:
    """An element-wise op or reduction: its bytes at the achieved bandwidth, unless its FLOPs at
    the vector (float32) peak take longer."""
    return max(flops / device.peak("float32"), stream_seconds(nbytes, device))


def flash_attention_seconds(flops: float, device: "DeviceSpec", dtype: str = "bfloat16") -> float:
    """A fused attention kernel (FlashAttention-2): its FLOPs at ``FLASH_EFFICIENCY`` of the peak."""
    return flops / (device.peak(dtype) * FLASH_EFFICIENCY)


__all__ = ["FLASH_EFFICIENCY", "Gemm", "TILES", "efficiency_from_mamf", "elementwise_seconds",
           "flash_attention_seconds", "gemm_seconds", "stream_seconds", "tile_seconds"]
