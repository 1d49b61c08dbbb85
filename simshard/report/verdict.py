"""What an estimate says in words: whether its peak memory fits the devices, and how many devices
hold no share of an input (idle in its compute).

A 7B data-parallel step on 8,192 devices peaks at 181.64 GiB on the 1,024 devices holding a
sequence, and the other 7,168 hold none: "peaks at 181.64 GiB on 1,024 devices; does not fit an
80 GB H100 device" and "7,168 of 8,192 devices (7 of 8) hold no share of x (idle)".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..units import fmt_bytes
from .compute import DEVICE_CLASSES, DeviceSpec
from .estimate.blocks import input_block_codes

# Memory per device of the device classes (report/compute.py), in bytes, from the vendors' data
# sheets: H100 SXM 80 GB HBM3, A100 SXM 80 GB HBM2e, TPU v5e 16 GiB HBM2 (Google Cloud's TPU v5e
# page); "cpu" has no fixed capacity.
DEVICE_MEMORY: dict[str, int] = {"h100": 80 * 10**9, "a100": 80 * 10**9, "tpu-v5e": 16 * 2**30}


def device_name(spec: DeviceSpec | None) -> str | None:
    """The class name of a device spec (``DEVICE_CLASSES``), None for one of its own."""
    return next((name for name, s in DEVICE_CLASSES.items() if s == spec), None) if spec is not None else None


@dataclass(frozen=True)
class MemoryVerdict:
    """The peak per device, how many devices reach it, and against what capacity (None: unknown)."""

    peak: int
    at_peak: int  # devices whose peak is ``peak``
    devices: int
    capacity: int | None
    capacity_of: str  # what the capacity is: "an 80 GB H100 device", "--device-memory 8 KiB"

    @property
    def fits(self) -> bool | None:
        return None if self.capacity is None else self.peak <= self.capacity

    def __str__(self) -> str:
        where = "every device" if self.at_peak == self.devices else f"{self.at_peak:,} device{'s' * (self.at_peak != 1)}"
        text = f"peaks at {fmt_bytes(self.peak)} on {where}"
        if self.capacity is None:
            return text + " (no device capacity known: give the topology a device or --device-memory)"
        return text + ("; fits " if self.fits else "; does not fit ") + self.capacity_of


def memory_verdict(memory, capacity: int | None = None, device: DeviceSpec | None = None) -> MemoryVerdict:
    """``memory`` (a ``MemoryReport``) against ``capacity`` bytes per device, else the memory of
    ``device``'s class (``DEVICE_MEMORY``)."""
    peak = memory.max_peak
    at_peak = sum(len(c.devices) for c in memory.classes if c.memory.peak_bytes == peak)
    if capacity is not None:
        what = f"a device of {fmt_bytes(capacity)} (--device-memory)"
    else:
        name = device_name(device)
        capacity = DEVICE_MEMORY.get(name) if name else None
        what = f"an {capacity // 10**9} GB {name.upper()} device" if name in ("h100", "a100") else f"a {name} device"
    return MemoryVerdict(peak, at_peak, memory.device_count, capacity, what)


@dataclass(frozen=True)
class Idle:
    """Devices holding an empty block of input ``input`` while others hold some of it."""

    input: str  # its name (``Program.input_names``: ``x``, ``params['w1']``)
    idle: int
    devices: int

    def __str__(self) -> str:
        ratio = math.gcd(self.idle, self.devices)
        of = f" ({self.idle // ratio} of {self.devices // ratio})" if ratio > 1 else ""
        return f"{self.idle:,} of {self.devices:,} devices{of} hold no share of {self.input} (idle)"


def idle_devices(spmd) -> Idle | None:
    """The input the most devices hold none of while others hold some, from the program's input
    shardings (None when every device holds a share of every input it is split over)."""
    codes, distinct = input_block_codes(spmd)
    counts = [0] * len(distinct)
    for k in codes.tolist():
        counts[k] += 1
    best = None
    n_inputs = len(distinct[0]) if distinct else 0
    names = getattr(spmd.program, "input_names", None) or [f"input {i}" for i in range(n_inputs)]
    for i in range(n_inputs):
        empty = [c for c, blocks in enumerate(distinct) if 0 in blocks[i].shape]
        if not empty or len(empty) == len(distinct):
            continue
        idle = sum(counts[c] for c in empty)
        if best is None or idle > best.idle:
            best = Idle(str(names[i]), idle, len(codes))
    return best


__all__ = ["DEVICE_MEMORY", "Idle", "MemoryVerdict", "device_name", "idle_devices", "memory_verdict"]
