"""What the walk holds per device: its buffers as blocks in a ``MemoryLedger`` (maybe shared with
its class); classes split where their members diverge."""

from __future__ import annotations

from collections import Counter
from typing import Callable, Hashable, Iterator, Mapping, Sequence

import numpy as np

from ...sharding.rows import row_of
from ...spmd import Instr
from ..ledger import MemoryLedger
from ..memory import DeviceMemory
from .blocks import Block, EstimateError


class DeviceState(MemoryLedger[Block]):
    """Buffers as blocks and the executor's memory accounting over them (a ``MemoryLedger``,
    whose ``instr`` is the top-level instruction running: a loop, for its body), and the local
    work done: of one device, or of every device of a class (devices that ran the same
    instructions on the same blocks so far hold equal buffers, so they share one state until an
    instruction sets them apart)."""

    __slots__ = ("ops",)

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter = Counter()  # (FLOPs, bytes) of each local op run -> how many times

    def fork(self) -> "DeviceState":
        """An independent copy (its class is about to split)."""
        out = DeviceState()
        self.copy_into(out)
        out.ops = Counter(self.ops)
        return out

    def start(self, inputs: Sequence[int], blocks: Sequence[Block]) -> None:
        """Hold the device's input blocks under its input buffer numbers."""
        self.write(list(zip(inputs, blocks)))
        self.inputs_placed()

    def read(self, buf: int, ins: Instr, device) -> Block:
        """Buffer ``buf``'s block, or the error naming ``ins`` that reads a buffer not held."""
        try:
            return self.buffers[buf]
        except KeyError:
            raise EstimateError(f"device {device}: [{ins.id}] {ins.kind} from {ins.source!r} reads buffer "
                                f"b{buf}, which it does not hold") from None


class Device:
    """One device: its state (maybe shared with its class). Its communication records are in
    the walk's log (``Memo.records``), a step's members sharing class records."""

    __slots__ = ("device", "state")

    def __init__(self, device: int, state: DeviceState):
        self.device = device
        self.state = state

    def memory(self) -> DeviceMemory:
        return self.state.memory(self.device)


class DeviceTable(Mapping):
    """device -> its ``Device``, each made on first lookup with its starting class's state: the
    walk reads a class by its first member, so a mesh of 8,192 devices in a few classes makes a
    few ``Device`` objects (and one per member only where a step looks at every member).
    ``ids``: the devices; ``start``: each one's starting state's index in ``states``."""

    def __init__(self, ids: np.ndarray, start: np.ndarray, states: list[DeviceState]):
        order = np.argsort(ids, kind="stable")  # ascending, as ``row_of`` reads them
        self._ids, self._start, self._states = ids[order], start[order], states
        self._made: dict[int, Device] = {}

    def __getitem__(self, device: int) -> Device:
        hit = self._made.get(device)
        if hit is None:
            hit = self._made[device] = Device(device, self._states[int(self._start[row_of(self._ids, device)])])
        return hit

    def __iter__(self) -> Iterator[int]:
        return iter(self._ids.tolist())

    def __len__(self) -> int:
        return len(self._ids)


class Members(list):
    """A class's devices as the walk reads them (a list), with the int64 array they were made
    from: a collective step reads its members as an array, converted once per class, not per
    step (8,192 Python ints convert slowly). Not changed in place (a class splits into new lists)."""

    __slots__ = ("ids",)

    def __init__(self, ids: np.ndarray):
        super().__init__(ids.tolist())
        self.ids = ids


def member_ids(c: list[int]) -> np.ndarray:
    """A class's devices as an int64 array (its ``Members.ids`` where it has them)."""
    return c.ids if isinstance(c, Members) else np.asarray(c, dtype=np.int64)


def ascending(c: list[int]) -> tuple[int, ...]:
    """A class's devices as an ascending tuple (its list as it is where its array is ascending,
    as a class the estimate starts with is: no sort of thousands)."""
    if isinstance(c, Members) and bool(np.all(c.ids[1:] > c.ids[:-1])):
        return tuple(c)
    return tuple(sorted(c))


Devices = Mapping[int, Device]
Classes = list[list[int]]  # the devices sharing a state; the first member's list in ``Lists``
Lists = dict[int, Sequence[Instr]]  # a class's first member -> the instruction list the class runs


def split(devices: Devices, members: list[int], key: Callable[[int], Hashable]) -> Classes:
    """Members of one class grouped by ``key(device)``; every group but the first gets a copy of
    the state (they are about to diverge)."""
    groups: dict = {}
    for d in members:
        groups.setdefault(key(d), []).append(d)
    parts = list(groups.values())
    for part in parts[1:]:
        state = devices[part[0]].state.fork()
        for d in part:
            devices[d].state = state
    return parts


def regroup(devices: Devices, classes: Classes, lists: Lists, c: list[int], key: Callable[[int], Hashable]) -> Classes:
    """Class ``c`` split by ``key(device)`` (``split``), ``classes`` and ``lists`` updated: each
    part runs on in ``c``'s list."""
    parts = split(devices, c, key)
    if len(parts) > 1:
        classes.remove(c)
        classes.extend(parts)
        for part in parts:
            lists[part[0]] = lists[c[0]]
    return parts
