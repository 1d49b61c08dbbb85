"""Devices: peak FLOP/s per dtype, memory bandwidth and size, and what real kernels reach of them.

A ``DeviceSpec`` holds a device's data-sheet figures and the two fractions real kernels reach:

* ``peaks``: the dense peak per dtype (``bfloat16``, ``float16``, ``tf32``, ``float32``); ``flops``
  is the 16-bit tensor-core peak, used for a dtype without its own entry (a device given as
  ``{"flops": ..., "memory_bandwidth": ...}`` has only that one);
* ``sms``: streaming multiprocessors, over which a matmul's tiles run in waves
  (``report/kernels.py``; 0: no kernel model, the plain roofline);
* ``matmul_efficiency``: the fraction of the per-SM peak a full tile sustains under power
  (the kernel model's ceiling, per dtype family: ``tensor`` for 16-bit and tf32, ``vector`` for
  float32 without tensor cores);
* ``bandwidth_efficiency``: the fraction of the HBM data-sheet bandwidth a streaming kernel moves;
* ``burst``: how much faster a short burst runs than a sustained load (boost over saturated clock).

Sources, per constant, beside it below; docs/estimate.md#the-compute-model derives the fitted ones.
"""

from __future__ import annotations

import math
import numbers
import operator
from dataclasses import dataclass, field
from typing import Mapping

from .kernels import efficiency_from_mamf


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


# dtype names as numpy spells them -> the peak they run at
DTYPE_PEAK = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32", "tf32": "tf32",
              "float64": "float64"}
TENSOR_DTYPES = frozenset({"bfloat16", "float16", "tf32", "float8_e4m3fn", "float8_e5m2"})


@dataclass(frozen=True)
class DeviceSpec:
    """A device's peaks, bandwidth and the fractions of them real kernels reach (module docstring)."""

    flops: float  # the dense 16-bit peak: the default for a dtype with no entry in ``peaks``
    memory_bandwidth: float  # HBM, bytes per second (data sheet)
    peaks: tuple[tuple[str, float], ...] = ()  # (dtype name, dense peak FLOP/s)
    sms: int = 0  # streaming multiprocessors (0: no kernel model, the roofline)
    memory: float = 0.0  # bytes of device memory (0: unknown)
    matmul_efficiency: tuple[tuple[str, float], ...] = ()  # ("tensor" | "vector", sustained fraction of a tile's peak)
    bandwidth_efficiency: float = 1.0
    burst: float = 1.0
    name: str = field(default="", compare=False)

    def __post_init__(self):
        finite_number(self.flops, "a device's peak FLOP/s")
        finite_number(self.memory_bandwidth, "a device's memory bandwidth")
        if not (self.flops > 0 and self.memory_bandwidth > 0):
            raise ValueError(f"a device needs a positive peak and bandwidth, got {self.flops} FLOP/s, "
                             f"{self.memory_bandwidth} B/s")
        peaks = self.peaks.items() if isinstance(self.peaks, Mapping) else self.peaks
        object.__setattr__(self, "peaks", tuple((str(k), finite_number(v, f"the {k} peak")) for k, v in peaks))
        eff = self.matmul_efficiency
        eff = eff.items() if isinstance(eff, Mapping) else eff
        object.__setattr__(self, "matmul_efficiency", tuple((str(k), float(v)) for k, v in eff))
        for what, v in (("bandwidth efficiency", self.bandwidth_efficiency), ("burst", self.burst)):
            if not finite_number(v, f"a device's {what}") > 0:
                raise ValueError(f"a device's {what} must be positive, got {v}")

    def peak(self, dtype: str | None = None) -> float:
        """The dense peak FLOP/s for ``dtype`` (a numpy name, or ``tf32``); ``flops`` if none is given."""
        if dtype is None:
            return self.flops
        return dict(self.peaks).get(DTYPE_PEAK.get(str(dtype), str(dtype)), self.flops)

    def efficiency(self, dtype: str | None) -> float:
        """The sustained fraction of a full tile's peak for ``dtype``'s units (1.0 if not stated)."""
        family = "vector" if str(dtype) in ("float32", "float64") else "tensor"
        return dict(self.matmul_efficiency).get(family, 1.0)

    @property
    def achieved_bandwidth(self) -> float:
        return self.memory_bandwidth * self.bandwidth_efficiency

    def seconds(self, flops: int, nbytes: int, dtype: str | None = None) -> float:
        """The roofline: the longer of the FLOPs at the dtype's peak and the bytes at the bandwidth."""
        return max(flops / self.peak(dtype), nbytes / self.memory_bandwidth)


# Achieved HBM bandwidth of a streaming kernel: 88% of the data sheet. Sources: an A100 80 GB SXM
# read kernel at 1.80 of 2.04 TB/s (88%, Nsight Compute agreeing; NVIDIA developer forum "Trouble
# to reach peak bandwidth of A100", citing a GTC talk's ~90% best), and one H200's 1 GiB device
# copy at 4.22 of 4.8 TB/s (88%; tests/data/gemm_h200.json, copy_TBps).
HBM_EFFICIENCY = 0.88

# The tensor-core tile efficiency of the GH100 die (H100, H200): fitted to one H200's 52 bf16
# matmuls (tests/data/gemm_h200.json; report/kernels.py's model, docs/estimate.md). It agrees
# with the H100's published maximum achievable matmul FLOPS (MAMF, stas00/ml-engineering,
# compute/accelerator/README.md: 792.1 of 989 TFLOP/s at 6144x17920x2816) through the same
# model: 0.741 (tests/report/test_kernels.py). The float32 (CUDA-core) efficiency: fitted to the
# same run's 49 float32 matmuls.
HOPPER_EFFICIENCY = {"tensor": 0.72, "vector": 0.79}
# MAMF over MSMF (maximum sustainable matmul FLOPS, power-saturated) for the H200 bf16,
# 828.0 / 702.9 (stas00/ml-engineering, compute/accelerator/benchmarks/README.md).
HOPPER_BURST = 828.0 / 702.9
# A100: its published MAMF, 267.9 TFLOP/s bf16 at 6912x16384x2048 (same table), under a burst of
# boost over power-limited clock, 1410 / 1305 MHz (NVIDIA's HPL sustained A100 clock, quoted by
# G. Lockwood, "peak FLOPS", glennklockwood.com): the tile efficiency the kernel model needs to
# give 267.9 there is derived in report/kernels.py (``efficiency_from_mamf``).
A100_BURST = 1410 / 1305
A100_MAMF = (267.9e12, (6912, 16384, 2048))


def _a100(name: str = "a100", bandwidth: float = 2.039e12, memory: float = 80e9) -> DeviceSpec:
    base = DeviceSpec(312e12, bandwidth, {"bfloat16": 312e12, "float16": 312e12, "tf32": 156e12, "float32": 19.5e12},
                      sms=108, memory=memory, bandwidth_efficiency=HBM_EFFICIENCY, burst=A100_BURST, name=name)
    tensor = efficiency_from_mamf(base, *A100_MAMF)
    return DeviceSpec(**{**base.__dict__, "matmul_efficiency": {"tensor": tensor, "vector": HOPPER_EFFICIENCY["vector"]}})


def _hopper(name: str, bandwidth: float, memory: float) -> DeviceSpec:
    return DeviceSpec(989.4e12, bandwidth, {"bfloat16": 989.4e12, "float16": 989.4e12, "tf32": 494.7e12,
                                            "float32": 66.9e12},
                      sms=132, memory=memory, matmul_efficiency=HOPPER_EFFICIENCY,
                      bandwidth_efficiency=HBM_EFFICIENCY, burst=HOPPER_BURST, name=name)


# Data sheets: NVIDIA A100 Tensor Core GPU (SXM 80 GB: 312 TFLOP/s bf16/fp16 dense, 156 tf32,
# 19.5 fp32, 2,039 GB/s, 108 SMs; SXM 40 GB: the same compute, 1,555 GB/s), H100 SXM (989.4 bf16 dense, 494.7 tf32, 66.9 fp32,
# 3.35 TB/s, 80 GB, 132 SMs), H200 SXM (the same compute, 4.8 TB/s, 141 GB); Google TPU v5e
# (197 TFLOP/s bf16, 819 GB/s, 16 GB); "cpu" is a laptop-class core count (roofline only).
DEVICE_CLASSES: dict[str, DeviceSpec] = {
    "h100": _hopper("h100", 3.35e12, 80e9),
    "h200": _hopper("h200", 4.8e12, 141e9),
    "a100": _a100(),
    "a100-40gb": _a100("a100-40gb", 1.555e12, 40e9),
    "tpu-v5e": DeviceSpec(197e12, 0.819e12, memory=16e9, name="tpu-v5e"),
    "cpu": DeviceSpec(1e12, 1e11, name="cpu"),
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


__all__ = ["DEVICE_CLASSES", "DeviceSpec", "HBM_EFFICIENCY", "TENSOR_DTYPES", "device_of", "finite_number"]
