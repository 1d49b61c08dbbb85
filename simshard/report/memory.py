"""Memory reports: peak live bytes per device over its schedule.

A device's live bytes are the sizes of the buffers it holds (its inputs, every instruction's
outputs until freed or overwritten). An instruction's outputs are counted while its inputs are
still live, so the peak includes each instruction's working set; a scan's write of one step
into its stacked output (a ``dynamic_update_slice`` into its own buffer) is in place and adds
nothing. Each buffer counts its full logical size (``nbytes``) even when numpy happens to share
memory between two buffers, as a device that materializes every buffer would; staging buffers inside a collective (the received
pieces before they land in the output) are not counted.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from ..units import fmt_bytes, plain_text
from .reading import checked, read_entries


@dataclass(frozen=True)
class DeviceMemory:
    """One device's memory over its schedule."""

    device: int
    peak_bytes: int
    peak_position: int  # index of the instruction at the peak (-1: the inputs)
    peak_instr: int | None  # its instruction id
    peak_source: str  # the program op it comes from
    input_bytes: int
    final_bytes: int  # live bytes when the schedule ended (its outputs and anything not freed)
    capacity: int | None = None


@dataclass(frozen=True)
class MemoryReport:
    devices: tuple[DeviceMemory, ...]

    def __post_init__(self):
        object.__setattr__(self, "devices", tuple(sorted(self.devices, key=lambda d: d.device)))

    def __getitem__(self, device: int) -> DeviceMemory:
        for d in self.devices:
            if d.device == device:
                return d
        raise KeyError(f"no memory record for device {device}")

    def peak(self, device: int) -> int:
        return self[device].peak_bytes

    @property
    def max_peak(self) -> int:
        return max((d.peak_bytes for d in self.devices), default=0)

    @property
    def peaks(self) -> dict[int, int]:
        return {d.device: d.peak_bytes for d in self.devices}

    def table(self):
        from rich.table import Table

        t = Table(title="peak live memory per device", title_justify="left")
        for col, just in (("device", "left"), ("inputs", "right"), ("peak", "right"), ("at", "left"),
                          ("final", "right"), ("capacity", "right")):
            t.add_column(col, justify=just)
        for d in self.devices:
            at = "inputs" if d.peak_position < 0 else f"[{d.peak_instr}] {d.peak_source}"
            t.add_row(
                str(d.device), fmt_bytes(d.input_bytes), fmt_bytes(d.peak_bytes), at, fmt_bytes(d.final_bytes),
                "-" if d.capacity is None else fmt_bytes(d.capacity),
            )
        return t

    def render(self, width: int = 100) -> str:
        return plain_text(self.table(), width=width)

    def __str__(self) -> str:
        return self.render()

    def __rich__(self):
        return self.table()

    def to_dict(self) -> dict:
        return {"max_peak": self.max_peak, "devices": [asdict(d) for d in self.devices]}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @staticmethod
    def from_json(text: str) -> "MemoryReport":
        """The report ``to_json`` wrote; other text is a ``ReportFormatError`` naming the problem."""
        entries = read_entries(text, "a memory report", "devices")
        return MemoryReport(tuple(DeviceMemory(**checked(DeviceMemory, d, f"a memory report: device entry {i}"))
                                  for i, d in enumerate(entries)))


def capacity_of(device_memory, device: int) -> int | None:
    """``device_memory`` is None, one byte count for every device, or a mapping device -> bytes."""
    if device_memory is None:
        return None
    if isinstance(device_memory, dict):
        cap = device_memory.get(device)
    else:
        cap = device_memory
    if cap is None:
        return None
    cap = int(cap)
    if cap < 0:
        raise ValueError(f"device_memory for device {device} is negative ({cap})")
    return cap

