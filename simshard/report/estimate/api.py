"""``estimate`` and ``estimate_spmd``: a program's records, memory and compute without data, and
the ``Estimate`` they return."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import optree

from ...partition import partition
from ...spmd import Instructions, ScheduleClass, Schedules, SpmdProgram
from ...propagate.prepare import prepare
from ...tracing.tracer import ShapeDtype
from ..comm import CommReport, TimeEstimate
from ..compute import DeviceCompute, device_of
from ..memory import MemoryClass, MemoryReport, figures
from ..topology import Topology
from . import walk as walking  # the module, not its function: a test counts the walks through it
from ...sharding.rows import distinct_columns
from .blocks import Block, input_block_codes
from .memo import Memo, value_key
from .state import DeviceState, DeviceTable, Members, ascending


@dataclass(frozen=True)
class Estimate:
    """What a run would record, without running: ``comm`` and ``memory`` as an executed run's,
    ``time`` under ``topology`` (None without one)."""

    comm: CommReport
    memory: MemoryReport
    spmd: SpmdProgram
    topology: Topology | None = None
    # per class of devices that ran the same local ops: their FLOPs and bytes, and its members
    compute_classes: tuple[tuple[DeviceCompute, tuple[int, ...]], ...] = ()

    @property
    def compute(self) -> tuple[DeviceCompute, ...]:
        """Per device, its local ops' FLOPs and bytes (listed from ``compute_classes``)."""
        return tuple(sorted((DeviceCompute(d, c.ops) for c, members in self.compute_classes for d in members),
                            key=lambda c: c.device))

    @property
    def time(self) -> TimeEstimate | None:
        return None if self.topology is None else self.comm.estimate(self.topology)

    def compute_seconds(self, device=None) -> float:
        """The slowest device's compute time on ``device`` (a DeviceSpec or class name; default the
        topology's), its ops one after another on the roofline (``report/compute.py``)."""
        spec = device_of(device if device is not None else self._topology_device())
        return max((c.seconds(spec) for c, _ in self.compute_classes), default=0.0)

    def step_seconds(self) -> float:
        """Compute then communication, nothing overlapped: the slowest device's compute plus the
        collectives' alpha-beta time, under the topology (which must name a device)."""
        return self.compute_seconds() + self.time.total

    def _topology_device(self):
        if self.topology is None or self.topology.device is None:
            raise ValueError("a compute time needs a device: give topology=Topology(..., device='h100') or device=")
        return self.topology.device

    @property
    def program(self):
        return self.spmd.program


def estimate(f, *args, mesh=None, in_shardings=None, out_shardings=None, static_argnums: Sequence[int] = (),
             strategy: str = "user_priority", topology: Topology | None = None) -> Estimate:
    """The communication and memory ``ss.run(f, *args, ...)`` would record, and the alpha-beta
    time under ``topology``, without data and without executing: ``args`` may be ``ShapeDtype``s
    (or arrays, of which only the shape and dtype are read)."""
    def abstract(a):
        return ShapeDtype(a.shape, a.dtype) if isinstance(a, np.ndarray) else a

    program, _ = prepare(f, *optree.tree_map(abstract, args), mesh=mesh, in_shardings=in_shardings,
                         out_shardings=out_shardings, static_argnums=static_argnums, strategy=strategy)
    spmd = partition(program)
    return estimate_spmd(spmd, topology=topology)


def estimate_spmd(spmd: SpmdProgram, input_blocks: Mapping[int, Sequence[Block]] | None = None,
                  topology: Topology | None = None) -> Estimate:
    """Walk ``spmd``'s schedules on blocks. ``input_blocks`` (device -> its input blocks) default
    to the local shapes of the program's inputs under ``spmd.in_shardings``."""
    schedules = spmd.schedules
    ids = schedules.device_ids()
    if input_blocks is None:
        codes, distinct = input_block_codes(spmd)  # in the schedules' order
    else:
        numbers: dict[tuple, int] = {}
        codes = np.asarray([numbers.setdefault(tuple(input_blocks[d]), len(numbers)) for d in schedules.devices],
                           dtype=np.int64)
        distinct = list(numbers)
    lists, classes, states = {}, [], []
    start = np.empty(len(codes), dtype=np.int64)
    for kind, rows, code in _classes(schedules, codes):
        # the same instructions on the same inputs: one class (devices whose lists differ only in
        # Varying fields, a collective's groups, share a class list and resolve per member)
        state = DeviceState()
        state.start(kind.inputs, distinct[code])
        start[rows] = len(states)
        states.append(state)
        members = Members(ids[rows])
        lists[members[0]] = kind.instrs
        classes.append(members)
    devices = DeviceTable(ids, start, states)
    walked = classes  # the walk splits classes in place where members diverge
    memo = Memo()
    walking.walk(devices, walked, lists, memo, top=True)
    memory = MemoryReport(classes=_memory_classes(devices, walked))
    compute = tuple((DeviceCompute.of(c[0], devices[c[0]].state.ops), tuple(c)) for c in walked)
    return Estimate(CommReport(items=memo.records), memory, spmd, topology, compute)


def _classes(schedules: Schedules, codes: np.ndarray) -> list[tuple[ScheduleClass, np.ndarray, int]]:
    """The walk's classes in the order of their first devices, each its schedule class, its
    devices' rows (positions in the schedules' order) and its input blocks' code: the schedules'
    classes with equal lists (an ``Instructions`` by its table row, a plain list by its value) and
    inputs joined, split where the devices' input blocks (``codes``, in the schedules' order) differ."""
    kinds: dict[tuple, int] = {}
    firsts: list[ScheduleClass] = []  # each kind's first class
    kind_of = np.empty(len(schedules.classes), dtype=np.int64)
    for k, c in enumerate(schedules.classes):
        kind_of[k] = kinds.setdefault((_which(c.instrs), c.inputs), len(kinds))
        if kind_of[k] == len(firsts):
            firsts.append(c)
    radix = int(codes.max(initial=0)) + 1
    key = kind_of[schedules.class_index()] * radix + codes
    first, inverse = distinct_columns([key])  # by counting where the keys are few
    order = np.argsort(inverse, kind="stable")
    bounds = np.flatnonzero(np.diff(inverse[order])) + 1
    out = [(group, firsts[int(key[group]) // radix], part, int(codes[group]))
           for group, part in zip(first.tolist(), np.split(order, bounds))]
    return [rest for _, *rest in sorted(out, key=lambda row: row[0])]


def _which(instrs) -> object:
    """Which list a class runs: an ``Instructions`` by its table row, a plain list by its value."""
    return instrs.device_class if isinstance(instrs, Instructions) else value_key(tuple(instrs))


def _memory_classes(devices, walked) -> list[MemoryClass]:
    """The memory of each class of the walk (its members share a state), classes with equal
    figures joined."""
    by: dict[tuple, list] = {}
    for c in walked:
        m = devices[c[0]].memory()
        row = by.setdefault(figures(m), [m, []])
        row[1].append(c)
    return [MemoryClass(m, ascending(members[0]) if len(members) == 1 else tuple(sorted(d for c in members for d in c)))
            for m, members in by.values()]
