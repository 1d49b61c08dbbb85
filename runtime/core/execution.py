"""What a run produced, on either backend: ``Execution`` (each device's output shards and what the
run cost), and the check both backends make of a run's inputs before they start."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Mapping, Sequence

import numpy as np

from simshard.spmd import SpmdProgram
from simshard.report.comm import CommRecord, CommReport
from simshard.report.memory import MemoryReport

from .placement import assemble_outputs
from .records import record_rows
from .transfer_log import TransferLog


@dataclass(frozen=True, eq=False)
class Execution:
    """What a run produced: each device's output shards, and what it cost."""

    def __repr__(self) -> str:  # short: asyncio may repr a finished task's result (its arrays)
        return f"<Execution of {len(self.outputs)} devices, {sum(map(len, self.ran.values()))} collectives run>"

    spmd: SpmdProgram
    outputs: Mapping[int, tuple[np.ndarray, ...]]  # device -> its local output shards
    # device -> each collective it ran, as ``records.Ran`` fields in the order run (``records``
    # makes the records from them when first read: a run that nobody asks about pays nothing more)
    ran: Mapping[int, Sequence[tuple]]
    memory: MemoryReport
    transfers: TransferLog  # every message, as recorded by the transport
    # device -> buffer -> its contents right after it was written, for the SpmdProgram's
    # checkpoint buffers; empty unless the run traced values (``trace_values=True``)
    values: Mapping[int, Mapping[int, np.ndarray]] = field(default_factory=dict)
    # device -> when it ran each instruction (``executor.Span``s, in schedule order)
    timeline: Mapping[int, tuple] = field(default_factory=dict)
    # what the Ray backend adds (the local backend leaves the defaults): the driver's calls per
    # kind over every attempt, how many attempts the run took, the devices restarted on the way,
    # and the routes its messages (data plane) and its run calls (control plane) took; ``routes``:
    # how many ordered pairs of its devices each route joined ("process", "unix", "tcp", "ray":
    # ``ray/host/peers.route``), so that a peer reached by Ray calls shows in every result;
    # ``messages``: how many messages the devices sent by each route, counted as each was sent;
    # ``control_reason``: why the run calls went as Ray calls (``ray/driver/lines.WhyRayCalls``)
    controller_calls: Mapping[str, int] = field(default_factory=dict)
    attempts: int = 1
    restarted: tuple[int, ...] = ()
    data_plane: str | None = None
    control_plane: str | None = None
    routes: Mapping[str, int] = field(default_factory=dict)
    messages: Mapping[str, int] = field(default_factory=dict)
    control_reason: str | None = None
    # how often the processes' polling stepped aside during the run, another task wanting their
    # cores (``wire/preemption``): messages meanwhile paid a wakeup each, as where nothing polls
    stepped_aside: int = 0

    def describe_routes(self) -> str | None:
        """What went where, in words (None on the local backend): the messages between devices per
        route taken (with the device pairs each route joins), then the run calls' route and, where
        they went as Ray calls, why; and how often the processes' polling stepped aside, where it
        did. A "ray" among the messages' routes is a peer reached by Ray calls; run calls by Ray
        carry the driver's inputs and answers, never a device's messages."""
        if self.data_plane is None:
            return None
        sent = ", ".join(f"{r} {n}" for r, n in sorted(self.messages.items())) or "none"
        pairs = ", ".join(f"{r} {n}" for r, n in sorted(self.routes.items())) or "none"
        calls = (f"the driver's control lines{self._by_ring()}" if self.control_plane == "sockets" else
                 f"Ray actor calls ({self.control_reason})" if self.control_reason else f"{self.control_plane}")
        aside = (f"; polling stepped aside {self.stepped_aside} times (another task wanted the cores)"
                 if self.stepped_aside else "")
        return f"messages between devices: {sent} (device pairs: {pairs}); run calls: {calls}{aside}"

    def _by_ring(self) -> str:
        """How many of the control lines' calls and answers went by ring (``wire/control_line``):
        none while the reading end sleeps, as on a node with fewer cores than processes."""
        c = self.controller_calls
        calls, answers = f"{c.get('line by ring', 0)} of {c.get('line', 0)} calls", c.get("answer by ring", 0)
        return f" ({calls}, {answers} answers by ring)"

    @cached_property
    def record_rows(self) -> tuple[tuple, ...]:
        """One ``CommRecord``'s fields per collective instruction per participating device, made
        from what each device ran and the transfer log (``records.record_rows``)."""
        counts, spmd = self.transfers.counts, self.spmd
        return tuple(row for d in spmd.devices for row in record_rows(d, spmd.schedule(d), self.ran.get(d, ()), counts))

    @cached_property
    def records(self) -> tuple[CommRecord, ...]:
        """One per collective instruction per participating device."""
        return tuple(CommRecord(*row) for row in self.record_rows)

    @property
    def comm(self) -> CommReport:
        return CommReport(self.records)

    def shards(self, device: int) -> tuple[np.ndarray, ...]:
        return self.outputs[device]

    def assemble(self, shapes: Sequence[Sequence[int]] | None = None) -> tuple[np.ndarray, ...]:
        """The global outputs, rebuilt from the shards by ``simshard.sharding.layout`` with the program's
        ``out_shardings`` (global shapes from the program's outputs unless given)."""
        return assemble_outputs(self.spmd, self.outputs, shapes)


def check_inputs(spmd: SpmdProgram, inputs: Mapping[int, Sequence[np.ndarray]]) -> None:
    """Every device of ``spmd`` given as many input shards as its schedule takes, and no other device
    given any: a ``ValueError`` naming the device otherwise (both backends check before they start)."""
    devices = spmd.devices
    if len(set(devices)) != len(devices):
        dup = sorted({d for d in devices if devices.count(d) > 1})
        raise ValueError(f"the SpmdProgram has more than one schedule for device {dup[0]}")
    missing = [d for d in devices if d not in inputs]
    extra = [d for d in inputs if d not in devices]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"no inputs for devices {missing}")
        if extra:
            parts.append(f"inputs for devices {extra}, which have no schedule")
        raise ValueError("run_local: " + "; ".join(parts))
    for s in spmd.schedules:
        if len(inputs[s.device]) != len(s.inputs):
            raise ValueError(
                f"run_local: device {s.device}'s schedule takes {len(s.inputs)} input shards, got {len(inputs[s.device])}"
            )


