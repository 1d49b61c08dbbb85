"""Schedules: what one device does, as plain data.

A ``Schedule`` is a device's list of instructions over numbered local buffers
(``simshard.spmd.instructions``). Every device of an ``SpmdProgram`` runs the same sequence of
instruction ids (SPMD); a collective's ``id`` is how peers match their messages. Schedules
contain no code: they serialize with msgpack and round-trip exactly (``to_bytes`` /
``from_bytes``, ``simshard.spmd.wire_format``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

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


def shown(v) -> str:
    """A field's value, short, for ``Schedule.pretty``."""
    if isinstance(v, np.ndarray):
        return f"array{list(v.shape)}"
    if isinstance(v, tuple) and len(v) > 8:
        return f"({', '.join(map(str, v[:8]))}, ...{len(v)})"
    return str(v)


@dataclass(frozen=True)
class Checkpoint:
    """Where one program value lives right after the op producing it has run: buffer ``buf`` on
    every device (buffer numbers are the same on all devices), laid out as ``sharding`` (with its
    unreduced axes when the value is still a pending reduction). ``eqn`` indexes
    ``program.eqns`` and ``output`` that eqn's outputs; ``source`` names the op as instructions do
    (``"%5 dot_general"``). ``reassociated``: mesh axes over which a sum-like reduction of this op
    was sharded (its float additions then run in another order than in the op run whole)."""

    eqn: int
    output: int
    buf: int
    sharding: Any
    source: str
    reassociated: tuple[str, ...] = ()
    # a scan's: its body's own checkpoints (their ``eqn`` index the body's equations), from which
    # the op-by-op check makes each device's reference of the loop
    body: tuple["Checkpoint", ...] = ()


@dataclass(frozen=True)
class SpmdProgram:
    """The partitioned program: one Schedule per device, and how inputs / outputs are laid out.
    ``checkpoints`` (driver side only, not part of any Schedule): one ``Checkpoint`` per output
    of each top-level program op, for op-by-op verification (``simshard.report.opcheck``)."""

    program: Any  # the propagated Program it was partitioned from
    schedules: tuple[Schedule, ...]
    in_shardings: tuple[Any, ...]  # Sharding of each program input (how the driver scatters it)
    out_shardings: tuple[Any, ...]  # Sharding of each output as the schedules leave it
    checkpoints: tuple[Checkpoint, ...] = ()

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
        return tuple(s.device for s in self.schedules)
