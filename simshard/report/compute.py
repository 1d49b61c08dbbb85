"""How long a device computes: each local op's FLOPs and bytes, and its time on a device.

Each ``Compute`` instruction a device runs is counted as the FLOPs its op performs on the local
blocks and the bytes it reads and writes (its operands and results): a contraction
(``dot_general``) ``2 x result elements x contracted size``, a convolution ``2 x result elements x
input channels x window``, reductions and element-wise ops one per element touched, layout ops
(transpose, reshape, broadcast, slice, ...) none. The counts are exact for the schedule.

The seconds are a model. On a device with a kernel model (a class such as ``"a100"`` or
``"h100"``: ``DeviceSpec.sms``), each op runs as real kernels do (``report/kernels.py``):

* a contraction as a matmul of its batch, free and contracted sizes, by tiles and waves at the
  sustained efficiency fitted to measured matmuls, in its dtype's peak (bf16 at the tensor-core
  peak, float32 at the CUDA cores'); a batched matmul against a weight broadcast to the batch is
  costed as its tiles, never as a materialised ``[b, d, d]`` weight;
* a layout op (a broadcast, transpose, reshape, slice) is a view or folded into its consumer's
  loads: no time;
* an element-wise op or reduction is fused with its neighbours as compilers do: it writes its
  result once at the achieved bandwidth (its operands are its producers' results, counted there).

On a device without one (a ``{"flops", "memory_bandwidth"}`` dict, ``"cpu"``) each op takes the
longer of its FLOPs at the peak and its bytes at the bandwidth (the roofline). Ops run one after
another; a device's compute time is the sum.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Mapping, NamedTuple, Sequence

from .devices import DEVICE_CLASSES, DeviceSpec, device_of, finite_number  # noqa: F401  (importable from here, as before)
from .kernels import Gemm, elementwise_seconds, gemm_seconds

LAYOUT_OPS = frozenset({
    "transpose", "reshape", "broadcast_in_dim", "slice", "concatenate", "pad", "dynamic_slice", "dynamic_update_slice",
    "iota", "full", "constant", "convert", "stop_gradient", "sharding_constraint", "reshard", "propagation_barrier",
    "take",
})


def op_flops(op: str, in_shapes: Sequence[Sequence[int]], out_shapes: Sequence[Sequence[int]],
             params: Mapping) -> int:
    """FLOPs of ``op`` on local blocks of these shapes (module docstring)."""
    out_elems = sum(math.prod(s) for s in out_shapes)
    if op in LAYOUT_OPS:
        return 0
    if op == "dot_general":
        lhs_contracting = params["contracting"][0]
        contracted = math.prod(in_shapes[0][d] for d in lhs_contracting)
        return 2 * out_elems * contracted
    if op == "conv2d":
        _, c_in, kh, kw = in_shapes[1]
        return 2 * out_elems * c_in * kh * kw
    largest_in = max((math.prod(s) for s in in_shapes), default=0)
    return max(out_elems, largest_in)  # element-wise: one per result; a reduction: one per operand element


class Work(NamedTuple):
    """One local op's work, the key its runs are counted under: FLOPs, bytes read and written,
    what kind of kernel runs it (``gemm``, ``elementwise`` or ``layout``), its matmul's
    ``(batch, m, n, k)`` (a contraction) and its result's dtype."""

    flops: int
    bytes: int
    kind: str = "elementwise"
    gemm: tuple[int, ...] = ()
    dtype: str = "float32"
    out_bytes: int = 0

    def seconds(self, device: DeviceSpec) -> float:
        if not device.sms:
            return device.seconds(self.flops, self.bytes, self.dtype)
        if self.kind == "layout":
            return 0.0
        if self.kind == "gemm":
            b, m, n, k = self.gemm
            return gemm_seconds(Gemm(m, n, k, b, self.dtype), device)
        return elementwise_seconds(self.flops, self.out_bytes, device)


def op_work(op: str, in_shapes: Sequence[Sequence[int]], out_shapes: Sequence[Sequence[int]], params: Mapping,
            dtype: str, in_bytes: int, out_bytes: int) -> Work:
    """``op``'s ``Work`` on local blocks of these shapes (module docstring)."""
    flops = op_flops(op, in_shapes, out_shapes, params)
    if op in LAYOUT_OPS:
        return Work(flops, in_bytes + out_bytes, "layout", (), dtype, out_bytes)
    if op == "dot_general":
        (lc, rc), (lb, rb) = params["contracting"], params.get("batch", ((), ()))
        lhs, rhs = in_shapes[0], in_shapes[1]
        k = math.prod(lhs[d] for d in lc)
        batch = math.prod(lhs[d] for d in lb)
        m = math.prod(s for d, s in enumerate(lhs) if d not in lc and d not in lb)
        n = math.prod(s for d, s in enumerate(rhs) if d not in rc and d not in rb)
        return Work(flops, in_bytes + out_bytes, "gemm", (batch, m, n, k), dtype, out_bytes)
    return Work(flops, in_bytes + out_bytes, "elementwise", (), dtype, out_bytes)


@dataclass(frozen=True)
class DeviceCompute:
    """One device's local work: per distinct ``Work`` of an op, how many it ran."""

    device: int
    ops: tuple[tuple[Work, int], ...]  # (work, count), sorted

    @property
    def flops(self) -> int:
        return sum(w[0] * n for w, n in self.ops)

    @property
    def bytes(self) -> int:
        return sum(w[1] * n for w, n in self.ops)

    @property
    def matmul_flops(self) -> int:
        """The FLOPs of its contractions alone (what Megatron's count counts)."""
        return sum(w.flops * n for w, n in self.ops if isinstance(w, Work) and w.kind == "gemm")

    def seconds(self, device: DeviceSpec) -> float:
        return sum(_as_work(w).seconds(device) * n for w, n in self.ops)

    @staticmethod
    def of(device: int, counts: Counter) -> "DeviceCompute":
        return DeviceCompute(device, tuple(sorted(counts.items())))


def _as_work(w) -> Work:
    """A ``Work``, or a bare ``(flops, bytes)`` pair (an element-wise op of unknown dtype)."""
    return w if isinstance(w, Work) else Work(w[0], w[1])


__all__ = ["DEVICE_CLASSES", "DeviceCompute", "DeviceSpec", "Work", "device_of", "op_flops", "op_work"]
