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
from dataclasses import asdict, dataclass, fields, replace
from operator import attrgetter
from typing import Iterable

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

    def to_wire(self) -> tuple:
        """Its fields as a plain tuple, in their order, as a device process ships it (measured
        here: unpickling the dataclass took 1.7 us, the tuple 0.2 us and ``of_wire`` 0.8 us)."""
        return _DEVICE_MEMORY_FIELDS(self)

    @classmethod
    def of_wire(cls, fields: tuple) -> "DeviceMemory":
        return cls(*fields)


_DEVICE_MEMORY_FIELDS = attrgetter(*(f.name for f in fields(DeviceMemory)))  # ``to_wire``: one call, in C


@dataclass(frozen=True)
class MemoryClass:
    """Devices whose memory figures are equal: each of ``devices`` (ascending) has ``memory``
    (the first member's record) with its own device number."""

    memory: DeviceMemory
    devices: tuple[int, ...]

    def figures(self) -> tuple:
        """The record's figures, its device aside (what devices of one class share)."""
        return figures(self.memory)


def figures(m: DeviceMemory) -> tuple:
    return (m.peak_bytes, m.peak_position, m.peak_instr, m.peak_source, m.input_bytes, m.final_bytes, m.capacity)


class MemoryReport:
    """Every device's memory, held per class of devices with equal figures (``classes``): an
    estimate of 8,192 devices holds a few classes, and lists ``devices`` one record each only when
    asked. Built from per-device records (a run), their wire tuples (``of_wire``: a run on Ray,
    whose report most training steps never read, so nothing is made until it is) or from classes
    (the estimate)."""

    def __init__(self, devices: Iterable[DeviceMemory] = (), classes: Iterable[MemoryClass] | None = None):
        self._wires: tuple[tuple, ...] | None = None
        if classes is None:
            self._devices: tuple[DeviceMemory, ...] | None = tuple(sorted(devices, key=lambda d: d.device))
            self._classes: tuple[MemoryClass, ...] | None = None
        else:
            self._classes = tuple(sorted(classes, key=lambda c: c.devices[0]))  # devices ascending
            self._devices = None

    @classmethod
    def of_wire(cls, wires: Iterable[tuple]) -> "MemoryReport":
        """The report of devices' ``DeviceMemory.to_wire`` tuples, made into records when first read."""
        report = cls()
        report._wires, report._devices = tuple(wires), None
        return report

    @property
    def classes(self) -> tuple[MemoryClass, ...]:
        """The devices grouped by equal figures, each class's devices ascending."""
        if self._classes is None:
            by: dict[tuple, list[DeviceMemory]] = {}
            for m in self.devices:
                by.setdefault(figures(m), []).append(m)
            self._classes = tuple(MemoryClass(ms[0], tuple(m.device for m in ms)) for ms in by.values())
        return self._classes

    @property
    def devices(self) -> tuple[DeviceMemory, ...]:
        """One record per device, by device number."""
        if self._devices is None and self._wires is not None:
            self._devices = tuple(sorted((DeviceMemory.of_wire(w) for w in self._wires), key=lambda m: m.device))
        elif self._devices is None:
            self._devices = tuple(sorted((replace(c.memory, device=d) for c in self.classes for d in c.devices),
                                         key=lambda m: m.device))
        return self._devices

    def __eq__(self, other) -> bool:
        return isinstance(other, MemoryReport) and self.devices == other.devices

    __hash__ = None  # compares by its records

    def __repr__(self) -> str:
        return f"MemoryReport({sum(len(c.devices) for c in self.classes)} devices, {len(self.classes)} classes)"

    def __getitem__(self, device: int) -> DeviceMemory:
        for c in self.classes:
            if device in c.devices:
                return replace(c.memory, device=device)
        raise KeyError(f"no memory record for device {device}")

    def peak(self, device: int) -> int:
        return self[device].peak_bytes

    @property
    def device_count(self) -> int:
        return sum(len(c.devices) for c in self.classes)

    @property
    def max_peak(self) -> int:
        return max((c.memory.peak_bytes for c in self.classes), default=0)

    @property
    def peaks(self) -> dict[int, int]:
        return {d: c.memory.peak_bytes for c in self.classes for d in c.devices}

    def table(self):
        """A row per class of devices with equal figures (``fmt_devices`` names them)."""
        from rich.table import Table

        t = Table(title="peak live memory per device", title_justify="left")
        for col, just in (("devices", "left"), ("inputs", "right"), ("peak", "right"), ("at", "left"),
                          ("final", "right"), ("capacity", "right")):
            t.add_column(col, justify=just)
        for c in sorted(self.classes, key=lambda c: (-c.memory.peak_bytes, min(c.devices))):
            d = c.memory
            at = "inputs" if d.peak_position < 0 else f"[{d.peak_instr}] {d.peak_source}"
            t.add_row(
                fmt_devices(c.devices), fmt_bytes(d.input_bytes), fmt_bytes(d.peak_bytes), at, fmt_bytes(d.final_bytes),
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


def fmt_devices(devices: Iterable[int]) -> str:
    """Device numbers as runs (``0-1023, 2048``), with their count where there are several:
    ``1,024 devices: 0-1023``; at most four runs, then how many more."""
    ds = sorted(devices)
    runs: list[list[int]] = []
    for d in ds:
        if runs and d == runs[-1][1] + 1:
            runs[-1][1] = d
        else:
            runs.append([d, d])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs[:4])
    if len(runs) > 4:
        length, stride = runs[0][1] - runs[0][0], runs[1][0] - runs[0][0]
        if all(b - a == length and a - runs[0][0] == k * stride for k, (a, b) in enumerate(runs)):
            text = f"{text}, ... every {stride} to {runs[-1][1]}"  # a regular pattern: a mesh axis's stride
        else:
            text += f", ... ({len(runs) - 4:,} more runs)"
    return text if len(ds) == 1 else f"{len(ds):,} devices: {text}"


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

