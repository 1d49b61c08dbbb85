"""One device's memory accounting, written once for the executor and the estimate.

The executor (``runtime/executor.py``) holds arrays and the estimate (``report/estimate``) holds
blocks (a shape and a dtype); both keep the buffers a device holds in a ``MemoryLedger``, which
counts their ``nbytes`` the way ``report/memory.py`` describes: an instruction's outputs count
while its inputs are still live, a buffer overwritten under the same number is released after the
write, a free releases at once. Its peak (``Peak``) and totals become the device's
``DeviceMemory``. Holding the one accounting in one place is what keeps the estimate's memory
report equal to an executed run's, record for record.
"""

from __future__ import annotations

from typing import Generic, NamedTuple, Protocol, Sequence, TypeVar

from .memory import DeviceMemory


class Sized(Protocol):
    """What a ledger holds: anything with a byte size (a numpy array, an estimate's block)."""

    nbytes: int


Held = TypeVar("Held", bound=Sized)


class Peak(NamedTuple):
    """The most bytes a device held at once, and where: the position of the top-level
    instruction running (-1: placing the inputs), its id and the program op it comes from."""

    bytes: int
    position: int
    instr: int | None
    source: str


NO_PEAK = Peak(0, -1, None, "inputs")


class OverCapacity(Exception):
    """A write that would take a device past its capacity (the caller names the device and the
    instruction in the error its users read)."""

    def __init__(self, needed: int, new: int, live: int):
        super().__init__(f"needs {needed} bytes ({new} new on top of {live} live)")
        self.needed, self.new, self.live = needed, new, live


class MemoryLedger(Generic[Held]):
    """The buffers one device holds (number -> array or block), their live bytes and the peak.

    ``position`` and ``instr`` say where the device is, for the peak: the position of the
    top-level instruction running and the instruction (-1 and None while placing the inputs);
    its owner moves them on (``at``) as it runs."""

    __slots__ = ("buffers", "live", "input_bytes", "peak", "position", "instr")

    def __init__(self) -> None:
        self.buffers: dict[int, Held] = {}
        self.live = 0
        self.input_bytes = 0
        self.peak = NO_PEAK
        self.position = -1
        self.instr = None

    def copy_into(self, out: "MemoryLedger[Held]") -> None:
        """Make ``out`` an independent ledger with this one's buffers, counts and place (devices
        about to diverge)."""
        out.buffers, out.live, out.input_bytes, out.peak = dict(self.buffers), self.live, self.input_bytes, self.peak
        out.position, out.instr = self.position, self.instr

    def at(self, position: int, instr) -> None:
        """The device runs top-level instruction ``instr`` at ``position`` now."""
        self.position, self.instr = position, instr

    def inputs_placed(self) -> None:
        """The device's inputs are written (at position -1): remember their bytes."""
        self.input_bytes = self.live

    def write(self, outs: Sequence[tuple[int, Held]], capacity: int | None = None) -> None:
        """Hold ``outs`` (buffer number, array or block); raises ``OverCapacity`` (holding nothing
        new) when the device would need more than ``capacity`` bytes."""
        new = sum(int(b.nbytes) for _, b in outs)
        replaced = sum(int(self.buffers[k].nbytes) for k, _ in outs if k in self.buffers)
        needed = self.live + new
        if capacity is not None and needed > capacity:
            raise OverCapacity(needed, new, self.live)
        if needed > self.peak.bytes:
            self.peak = _peak_at(needed, self.position, self.instr)
        for k, b in outs:
            self.buffers[k] = b
        self.live = needed - replaced

    def write_one(self, buf: int, held: Held) -> None:
        """``write([(buf, held)])`` without a capacity, the common case, without its sums over
        lists (the estimate of a large mesh and the executor's every step take it)."""
        old = self.buffers.get(buf)
        needed = self.live + held.nbytes
        if needed > self.peak.bytes:
            self.peak = _peak_at(needed, self.position, self.instr)
        self.buffers[buf] = held
        self.live = needed if old is None else needed - old.nbytes

    def free(self, bufs: Sequence[int]) -> None:
        """Release buffers ``bufs`` (a ``KeyError`` at the first one the device does not hold)."""
        for buf in bufs:
            self.live -= int(self.buffers.pop(buf).nbytes)

    def memory(self, device: int, capacity: int | None = None) -> DeviceMemory:
        """This ledger as the device's memory record."""
        peak = self.peak
        return DeviceMemory(device, peak.bytes, peak.position, peak.instr, peak.source, self.input_bytes, self.live,
                            capacity)


def _peak_at(needed: int, position: int, instr) -> Peak:
    if instr is None:
        return Peak(needed, position, None, "inputs")
    return Peak(needed, position, instr.id, instr.source)


__all__ = ["MemoryLedger", "NO_PEAK", "OverCapacity", "Peak"]
