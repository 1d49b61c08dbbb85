"""Schedules: what one device does, as plain data.

A ``Schedule`` is a device's list of instructions over numbered local buffers
(``simshard.spmd.instructions``). Every device of an ``SpmdProgram`` runs the same sequence of
instruction ids (SPMD); a collective's ``id`` is how peers match their messages. Schedules
contain no code: they serialize with msgpack and round-trip exactly (``to_bytes`` /
``from_bytes``, ``simshard.spmd.wire_format``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import numpy as np

from .instructions import INSTRUCTIONS, Instr
from .wire_format import packed, unpacked


@dataclass(frozen=True)
class Schedule:
    """One device's program: where its inputs go, its instructions, where its outputs are."""

    device: int
    inputs: tuple[int, ...]  # buffer of each program input's local shard
    instrs: tuple[Instr, ...]
    outputs: tuple[int, ...]  # buffer of each program output's local shard

    def pretty(self) -> str:
        lines = [f"schedule(device {self.device}) inputs -> {', '.join(f'b{b}' for b in self.inputs)}"]
        for ins in self.instrs:
            body = ", ".join(f"{f.name}={shown(getattr(ins, f.name))}" for f in fields(ins) if f.name not in ("id", "source"))
            lines.append(f"  [{ins.id}] {ins.kind}({body})  # {ins.source}")
        lines.append(f"  return {', '.join(f'b{b}' for b in self.outputs)}")
        return "\n".join(lines)

    # -- serialization ---------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        return packed(self._as_data())

    @staticmethod
    def from_bytes(data: bytes) -> "Schedule":
        d = unpacked(data)
        instrs = tuple(INSTRUCTIONS[i.pop("kind")](**i) for i in d["instrs"])
        return Schedule(d["device"], d["inputs"], instrs, d["outputs"])

    def _as_data(self) -> dict:
        """The schedule as plain data (each instruction a dict of its fields and ``kind``)."""
        instrs = [{"kind": i.kind, **{f.name: getattr(i, f.name) for f in fields(i)}} for i in self.instrs]
        return {"device": self.device, "inputs": self.inputs, "instrs": instrs, "outputs": self.outputs}


class ScheduleClass(NamedTuple):
    """Devices that run one instruction list: the partitioner's class of devices (equal
    instruction objects at every step), ``instrs`` the class's list (``Instructions``: read from
    the step table, ``Varying`` fields unresolved) and ``varying`` the positions each member
    resolves for itself (``Instructions.own``)."""

    members: tuple[int, ...]
    inputs: tuple[int, ...]
    instrs: Sequence[Instr]
    outputs: tuple[int, ...]
    varying: frozenset = frozenset()


class Schedules(Sequence):
    """A program's schedules, one per device in ``devices``' order, held per class of devices
    (``classes``): a mesh of 8,192 devices whose schedules fall in a few classes holds a few
    entries, and the estimate walks the classes without a ``Schedule`` per device. The
    per-device ``Schedule`` objects are made on first access to one (made once, then shared);
    compares, hashes and pickles as the tuple of them."""

    __slots__ = ("devices", "classes", "_class_of", "_made", "_ids")

    def __init__(self, devices: tuple[int, ...], classes: tuple[ScheduleClass, ...], made: tuple | None = None,
                 class_of: np.ndarray | None = None, ids: np.ndarray | None = None):
        self.devices, self.classes, self._made = devices, classes, made
        self._class_of = class_of  # each device's class, in ``devices``' order (found when not given)
        self._ids = ids  # ``devices`` as an int64 array (made when first asked, unless given)

    def device_ids(self) -> np.ndarray:
        """``devices`` as an int64 array, made once (8,192 Python ints convert slowly, and the
        estimate reads them as an array)."""
        if self._ids is None:
            self._ids = np.asarray(self.devices, dtype=np.int64)
        return self._ids

    @staticmethod
    def of(schedules) -> "Schedules":
        """``schedules`` as ``Schedules``: itself, or a sequence of ``Schedule`` each its own class."""
        if isinstance(schedules, Schedules):
            return schedules
        made = tuple(schedules)
        return Schedules(tuple(s.device for s in made),
                         tuple(ScheduleClass((s.device,), s.inputs, s.instrs, s.outputs) for s in made), made)

    def class_index(self) -> np.ndarray:
        """Each device's class (its index in ``classes``), in ``devices``' order."""
        if self._class_of is not None:
            return self._class_of
        ids = self.device_ids()
        order = np.argsort(ids, kind="stable")
        out = np.empty(len(ids), dtype=np.int64)
        for k, c in enumerate(self.classes):
            out[order[np.searchsorted(ids, c.members, sorter=order)]] = k
        return out

    @property
    def is_made(self) -> bool:
        """Whether the per-device ``Schedule`` objects exist yet (an estimate makes none)."""
        return self._made is not None

    def made(self) -> tuple[Schedule, ...]:
        """One ``Schedule`` per device (made once)."""
        if self._made is None:
            out = {}
            for c in self.classes:
                for d in c.members:  # a class with Varying fields: each device resolves its own
                    out[d] = _schedule(d, c.inputs, c.instrs.own(d, c.varying) if c.varying else c.instrs, c.outputs)
            self._made = tuple(out[d] for d in self.devices)
        return self._made

    def __len__(self) -> int:
        return len(self.devices)

    def __getitem__(self, i):
        return self.made()[i]

    def __iter__(self):
        return iter(self.made())

    def __eq__(self, other) -> bool:
        if isinstance(other, (tuple, Schedules)):
            return self.made() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.made())

    def __reduce__(self):
        return (Schedules.of, (self.made(),))

    def __repr__(self) -> str:
        return f"Schedules({len(self.devices)} devices, {len(self.classes)} classes)"


def _schedule(device: int, inputs: tuple, instrs, outputs: tuple) -> Schedule:
    """``Schedule(device, inputs, instrs, outputs)`` without the frozen dataclass's constructor
    (its fields set as they are: the partitioner made them): a mesh of 8,192 devices makes 8,192."""
    out = object.__new__(Schedule)
    out.__dict__.update(device=device, inputs=inputs, instrs=instrs, outputs=outputs)
    return out


def shown(v) -> str:
    """A field's value, short, for ``Schedule.pretty``."""
    if isinstance(v, np.ndarray):
        return f"array{list(v.shape)}"
    if isinstance(v, tuple) and len(v) > 8:
        return f"({', '.join(map(str, v[:8]))}, ...{len(v)})"
    return str(v)


class HeldOperand(NamedTuple):
    """How one operand of an op was held on the devices when its local kernel ran: ``layout``
    (each device's index sets, the partitioner's own, strided ones included; None for a literal,
    held whole) and the dims it padded at their end to the layout's block size with ``pad`` (a
    sharded reduction's identity). The op-by-op check runs the op on exactly these operands."""

    layout: Any
    padded: tuple[int, ...] = ()
    pad: Any = None


@dataclass(frozen=True)
class Checkpoint:
    """Where one program value lives right after the op producing it has run: buffer ``buf`` on
    every device (buffer numbers are the same on all devices), laid out as ``sharding`` (with its
    unreduced axes when the value is still a pending reduction). ``eqn`` indexes
    ``program.eqns`` and ``output`` that eqn's outputs; ``source`` names the op as instructions do
    (``"%5 dot_general"``). ``reassociated``: mesh axes over which a sum-like reduction of this op
    was sharded (its float additions then run in another order than in the op run whole).
    ``operands``: how each operand was held when the op's local kernel ran (``HeldOperand``), or
    () where the op ran otherwise (a structured op, a row block with halo rows, an identity)."""

    eqn: int
    output: int
    buf: int
    sharding: Any
    source: str
    reassociated: tuple[str, ...] = ()
    # a scan's: its body's own checkpoints (their ``eqn`` index the body's equations), from which
    # the op-by-op check makes each device's reference of the loop
    body: tuple["Checkpoint", ...] = ()
    operands: tuple[HeldOperand, ...] = ()


@dataclass(frozen=True)
class SpmdProgram:
    """The partitioned program: one Schedule per device, and how inputs / outputs are laid out.
    ``checkpoints`` (driver side only, not part of any Schedule): one ``Checkpoint`` per output
    of each top-level program op, for op-by-op verification (``simshard.report.opcheck``)."""

    program: Any  # the propagated Program it was partitioned from
    schedules: Schedules  # a sequence of Schedule is held as Schedules (each its own class)
    in_shardings: tuple[Any, ...]  # Sharding of each program input (how the driver scatters it)
    out_shardings: tuple[Any, ...]  # Sharding of each output as the schedules leave it
    checkpoints: tuple[Checkpoint, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "schedules", Schedules.of(self.schedules))

    @property
    def checkpoint_buffers(self) -> frozenset[int]:
        """The buffers an executor keeps copies of when asked to trace values."""
        return frozenset(c.buf for c in self.checkpoints)

    def schedule(self, device: int) -> Schedule:
        for s in self.schedules:
            if s.device == device:
                return s
        raise KeyError(f"no schedule for device {device}")

    @property
    def devices(self) -> tuple[int, ...]:
        return self.schedules.devices
