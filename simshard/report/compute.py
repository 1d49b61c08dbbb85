"""How long a device computes: floating-point operations and bytes per local op, on a roofline.

Each ``Compute`` instruction a device runs is counted as the FLOPs its op performs on the local
blocks and the bytes it reads and writes (its operands and results): a contraction
(``dot_general``) ``2 x result elements x contracted size``, a convolution ``2 x result elements x
input channels x window``, reductions and element-wise ops one per element touched, layout ops
(transpose, reshape, slice, ...) none. On a ``DeviceSpec`` an op takes the longer of its FLOPs at the
peak rate and its bytes at the memory bandwidth (the roofline), one op after another; a
device's compute time is the sum. The counts are exact for the schedule; the seconds are a model,
as the alpha-beta time of the collectives is.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Sequence

LAYOUT_OPS = frozenset({
    "transpose", "reshape", "broadcast_in_dim", "slice", "concatenate", "pad", "dynamic_slice", "dynamic_update_slice",
    "iota", "full", "constant", "convert", "stop_gradient", "sharding_constraint", "reshard", "propagation_barrier",
    "take",
})


@dataclass(frozen=True)
class DeviceSpec:
    """A device's peak FLOP/s and memory bandwidth (bytes per second)."""

    flops: float
    memory_bandwidth: float

    def __post_init__(self):
        finite_number(self.flops, "a device's peak FLOP/s")
        finite_number(self.memory_bandwidth, "a device's memory bandwidth")
        if not (self.flops > 0 and self.memory_bandwidth > 0):
            raise ValueError(f"a device needs a positive peak and bandwidth, got {self.flops} FLOP/s, "
                             f"{self.memory_bandwidth} B/s")

    def seconds(self, flops: int, nbytes: int) -> float:
        return max(flops / self.flops, nbytes / self.memory_bandwidth)


def finite_number(value, what: str) -> float:
    """``value`` as a float if it is a finite real number (not a bool, NaN, an infinity or an int
    too large for a float, which would turn times into 0, NaN or OverflowError later); else a
    ValueError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{what} is a number, got {value!r}")
    try:
        number = float(value)
    except OverflowError:
        raise ValueError(f"{what} is a finite number, got an integer of {operator.index(value).bit_length()} bits") from None
    if not math.isfinite(number):
        raise ValueError(f"{what} is a finite number, got {value!r}")
    return number


# Dense 16-bit tensor-core peaks and HBM bandwidth from the vendors' data sheets (H100 SXM,
# A100 SXM 80 GB, TPU v5e); "cpu" is a laptop-class core count.
DEVICE_CLASSES: dict[str, DeviceSpec] = {
    "h100": DeviceSpec(989e12, 3.35e12),
    "a100": DeviceSpec(312e12, 2.04e12),
    "tpu-v5e": DeviceSpec(197e12, 0.82e12),
    "cpu": DeviceSpec(1e12, 1e11),
}


def device_of(spec) -> DeviceSpec:
    """A ``DeviceSpec``, a device class name, or ``{"flops": ..., "memory_bandwidth": ...}``."""
    if isinstance(spec, DeviceSpec):
        return spec
    if isinstance(spec, str):
        try:
            return DEVICE_CLASSES[spec]
        except KeyError:
            raise ValueError(f"unknown device class {spec!r} (known: {', '.join(DEVICE_CLASSES)})") from None
    if isinstance(spec, Mapping):
        return DeviceSpec(**spec)
    raise ValueError(f"a device is a DeviceSpec, a device class name or a dict of flops and memory_bandwidth, got {spec!r}")


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


@dataclass(frozen=True)
class DeviceCompute:
    """One device's local work: per distinct (FLOPs, bytes) of an op, how many it ran."""

    device: int
    ops: tuple[tuple[tuple[int, int], int], ...]  # ((flops, bytes), count), sorted

    @property
    def flops(self) -> int:
        return sum(f * n for (f, _), n in self.ops)

    @property
    def bytes(self) -> int:
        return sum(b * n for (_, b), n in self.ops)

    def seconds(self, device: DeviceSpec) -> float:
        return sum(device.seconds(f, b) * n for (f, b), n in self.ops)

    @staticmethod
    def of(device: int, counts: Counter) -> "DeviceCompute":
        return DeviceCompute(device, tuple(sorted(counts.items())))


__all__ = ["DEVICE_CLASSES", "DeviceCompute", "DeviceSpec", "device_of", "op_flops"]
